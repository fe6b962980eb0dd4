"""Peer systems measured beside the bookie in one ``bookie bench report``: Redis and ZooKeeper.

Theory of operation
-------------------
A bookie's figures move by tens of percent with the load of the machine, so the report judges
them as ratios to a system a user might pick instead, measured minutes apart on the same disk:

- **Redis 7 Streams** (Debian's ``redis-server``): a private server on a free 127.0.0.1 port in
  a scratch directory, AOF on with ``appendfsync always`` (the AOF is fsynced before the replies
  of each event-loop batch go out: durable before ack, as a bookie), RDB snapshots and AOF
  rewrites off.  ``redis-benchmark`` (its C client) drives ``XADD`` of 1 KiB entries twice:
  16 clients x 16 pipelined (256 in flight) and 1 client x 1 (one add at a time, QD1).  A short
  calibration sizes each run to about ``time_s``.
- **ZooKeeper, 3 servers** (Debian's ``zookeeper``): three ``QuorumPeerMain`` JVMs on
  127.0.0.1, default durability (``forceSync=yes``: a write is acknowledged once 2 of 3 logged
  and fsynced it), driven by ZooKeeper's own Java client (the one BookKeeper uses): a load
  program (``ZK_LOAD_JAVA`` below, run with the JDK's single-file source launcher) keeps
  256 asynchronous ``create(PERSISTENT_SEQUENTIAL)`` of 1 KiB in flight over 2 sessions,
  after a warm-up (JIT) that is not counted.

Each peer run becomes one result line in the report's results file, in the layout of the
bench tools (``tool`` is ``peer``, ``params.system`` names it): ``phases.adds`` with
``ops_per_s`` and ``latency_ms`` (``p50``, ``p95``, ``p99``, ``max``, ``mean``).  A peer that is
not installed, or fails, gives a line with ``error`` instead, which the table shows.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time

import orjson

from bookie.bench.report import build_result, now_iso

ZK_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-nop.jar")
REDIS_PAYLOAD = 1024


def _free_ports(count: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:g} s")


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _result(system: str, params: dict, adds: dict | None, started: str, error: str | None = None,
            extra: dict | None = None) -> dict:
    result = build_result("peer", dict(params, system=system), {"adds": adds} if adds else {},
                          started=started, figures=extra or {})
    if error:
        result["error"] = error
    return result


def _adds(ops: int, secs: float, p50, p95, p99, mx, mean) -> dict:
    return {"unit": "adds", "ops": ops, "duration_s": secs, "ops_per_s": ops / secs,
            "latency_ms": {"p50": p50, "p95": p95, "p99": p99, "max": mx, "mean": mean}}


# -- Redis ----------------------------------------------------------------------------------------


def redis_missing() -> str | None:
    """Why the Redis peer cannot run here (None: it can)."""
    missing = [t for t in ("redis-server", "redis-benchmark") if shutil.which(t) is None]
    return (f"{', '.join(missing)} not installed (Debian: apt-get install redis-server "
            f"redis-tools; tests/setup.sh does)") if missing else None


def _redis_benchmark(port: int, n: int, clients: int, pipeline: int) -> tuple[float, dict]:
    cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-P", str(pipeline), "-n", str(n), "--csv", "XADD", "peerlog", "*", "f",
           "x" * REDIS_PAYLOAD]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    secs = time.perf_counter() - t0
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows:
        raise RuntimeError(f"redis-benchmark printed no figures: {out[-300:]!r}")
    return secs, {k: float(v) for k, v in rows[-1].items() if k != "test"}


def _xlen(port: int) -> int:
    out = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "XLEN", "peerlog"],
                         check=True, capture_output=True, text=True, timeout=30).stdout
    return int(out.strip())


def run_redis(time_s: float, shapes=((16, 16), (1, 1))) -> list[dict]:
    """One private redis-server, ``redis-benchmark`` XADD at each (clients, pipeline) shape.
    Returns one result per shape (an ``error`` one each if Redis is missing or fails)."""
    started = now_iso()
    params = [{"clients": c, "pipeline": p, "in_flight": c * p, "payload": REDIS_PAYLOAD,
               "appendfsync": "always", "time": time_s} for c, p in shapes]
    why = redis_missing()
    if why:
        return [_result("redis", p, None, started, why) for p in params]
    scratch = tempfile.mkdtemp(prefix="bookie-bench-redis-")
    (port,) = _free_ports(1)
    server = None
    out = []
    try:
        with open(os.path.join(scratch, "redis.out"), "wb") as log:
            server = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir", scratch,
                 "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                 "--auto-aof-rewrite-percentage", "0", "--protected-mode", "no",
                 "--daemonize", "no", "--logfile", ""], stdout=log, stderr=subprocess.STDOUT)
        _wait_port(port, 15)
        for p in params:
            started = now_iso()
            try:
                calibrate = 5_000 if p["in_flight"] > 1 else 200
                secs, _ = _redis_benchmark(port, calibrate, p["clients"], p["pipeline"])
                n = max(calibrate, int(calibrate / secs * time_s))
                n -= n % p["in_flight"]
                before = _xlen(port)
                secs, r = _redis_benchmark(port, n, p["clients"], p["pipeline"])
                ops = _xlen(port) - before
                out.append(_result("redis", p, _adds(ops, secs, r.get("p50_latency_ms"),
                                                     r.get("p95_latency_ms"),
                                                     r.get("p99_latency_ms"),
                                                     r.get("max_latency_ms"),
                                                     r.get("avg_latency_ms")), started))
            except (subprocess.SubprocessError, RuntimeError, ValueError, OSError) as e:
                out.append(_result("redis", p, None, started, f"redis-benchmark failed: {e}"))
    except (RuntimeError, OSError) as e:
        out = [_result("redis", p, None, started, f"redis-server did not start: {e}")
               for p in params]
    finally:
        _stop(server)
        shutil.rmtree(scratch, ignore_errors=True)
    return out


# -- ZooKeeper ------------------------------------------------------------------------------------


def zookeeper_missing() -> str | None:
    """Why the ZooKeeper peer cannot run here (None: it can)."""
    if shutil.which("java") is None:
        return "java not installed (Debian: default-jre-headless; tests/setup.sh does)"
    if not os.path.exists(ZK_JARS[0]):
        return f"{ZK_JARS[0]} not found (Debian: apt-get install zookeeper; tests/setup.sh does)"
    return None


def _zk_mode(port: int) -> str | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"srvr")
            buf = b""
            while chunk := s.recv(65536):
                buf += chunk
    except OSError:
        return None
    for line in buf.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def run_zookeeper(time_s: float, sessions: int = 2, window: int = 128,
                  warmup_s: float = 3.0) -> dict:
    """Three ZooKeeper servers and the Java load client; one result."""
    started = now_iso()
    params = {"servers": 3, "sessions": sessions, "in_flight": sessions * window,
              "payload": REDIS_PAYLOAD, "time": time_s, "warmup": warmup_s,
              "client": "ZooKeeper Java client, async create(PERSISTENT_SEQUENTIAL)"}
    why = zookeeper_missing()
    if why:
        return _result("zookeeper", params, None, started, why)
    scratch = tempfile.mkdtemp(prefix="bookie-bench-zk-")
    ports = _free_ports(9)
    client_ports, quorum_ports, election_ports = ports[:3], ports[3:6], ports[6:]
    servers = "\n".join(f"server.{i + 1}=127.0.0.1:{quorum_ports[i]}:{election_ports[i]}"
                        for i in range(3))
    classpath = ":".join(j for j in ZK_JARS if os.path.exists(j))
    procs: list[subprocess.Popen] = []
    load = None
    try:
        for i in range(3):
            data = os.path.join(scratch, f"zk{i + 1}")
            os.makedirs(data)
            with open(os.path.join(data, "myid"), "w", encoding="ascii") as f:
                f.write(f"{i + 1}\n")
            cfg = os.path.join(data, "zoo.cfg")
            with open(cfg, "w", encoding="ascii") as f:
                f.write(f"tickTime=2000\ninitLimit=10\nsyncLimit=5\ndataDir={data}\n"
                        f"clientPort={client_ports[i]}\nclientPortAddress=127.0.0.1\n"
                        f"maxClientCnxns=0\nadmin.enableServer=false\nforceSync=yes\n"
                        f"4lw.commands.whitelist=*\n{servers}\n")
            with open(os.path.join(data, "server.log"), "wb") as log:
                procs.append(subprocess.Popen(
                    ["java", "-Xms512m", "-Xmx512m", "-cp", classpath,
                     "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg],
                    stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        while True:
            modes = sorted(m for m in map(_zk_mode, client_ports) if m)
            if modes == ["follower", "follower", "leader"]:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"the three servers elected no leader (modes {modes})")
            time.sleep(0.3)
        source = os.path.join(scratch, "ZkLoad.java")
        with open(source, "w", encoding="ascii") as f:
            f.write(ZK_LOAD_JAVA)
        hosts = ",".join(f"127.0.0.1:{p}" for p in client_ports)
        load = subprocess.Popen(["java", "-cp", classpath, source, hosts, f"{time_s:g}",
                                 str(sessions), str(window), str(REDIS_PAYLOAD), f"{warmup_s:g}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = load.communicate(timeout=time_s + warmup_s + 180)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if load.returncode != 0 or not lines:
            raise RuntimeError(f"the Java load client failed (exit {load.returncode}): "
                               f"{(err.strip().splitlines() or ['no output'])[-1]}")
        r = orjson.loads(lines[-1])
        if r["errors"]:
            raise RuntimeError(f"{r['errors']} creates failed")
        return _result("zookeeper", params, _adds(r["ops"], r["secs"], r["p50_ms"], None,
                                                  r["p99_ms"], r["max_ms"], None), started)
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
        return _result("zookeeper", params, None, started, str(e))
    finally:
        if load is not None and load.poll() is None:
            load.kill()
            load.wait(5)
        for p in procs:
            _stop(p)
        shutil.rmtree(scratch, ignore_errors=True)


# The load client: each of SESSIONS ZooKeeper sessions keeps WINDOW async creates in flight;
# a warm-up (not counted) first, then the measured phase; one JSON object on stdout.
ZK_LOAD_JAVA = r"""
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.zookeeper.*;

public class ZkLoad {
    public static void main(String[] a) throws Exception {
        String hosts = a[0];
        double secs = Double.parseDouble(a[1]);
        int sessions = Integer.parseInt(a[2]);
        int window = Integer.parseInt(a[3]);
        byte[] data = new byte[Integer.parseInt(a[4])];
        double warm = Double.parseDouble(a[5]);
        new Random(1).nextBytes(data);
        List<ZooKeeper> zks = new ArrayList<>();
        for (int i = 0; i < sessions; i++) {
            CountDownLatch up = new CountDownLatch(1);
            ZooKeeper zk = new ZooKeeper(hosts, 30000, ev -> {
                if (ev.getState() == Watcher.Event.KeeperState.SyncConnected) up.countDown();
            });
            if (!up.await(30, TimeUnit.SECONDS)) throw new RuntimeException("connect timeout");
            zks.add(zk);
        }
        try {
            zks.get(0).create("/peers", new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        } catch (KeeperException.NodeExistsException e) { }
        if (warm > 0) phase(zks, warm, window, data, new long[1], new AtomicInteger(), new AtomicLong());
        long[] lats = new long[20_000_000];
        AtomicInteger n = new AtomicInteger();
        AtomicLong errors = new AtomicLong();
        long t0 = System.nanoTime();
        phase(zks, secs, window, data, lats, n, errors);
        long el = System.nanoTime() - t0;
        int k = Math.min(n.get(), lats.length);
        long[] s = Arrays.copyOf(lats, k);
        Arrays.sort(s);
        for (ZooKeeper zk : zks) zk.close();
        System.out.printf(Locale.ROOT,
            "{\"ops\": %d, \"errors\": %d, \"secs\": %.4f, \"p50_ms\": %.4f, \"p99_ms\": %.4f, \"max_ms\": %.4f}%n",
            n.get(), errors.get(), el / 1e9,
            k > 0 ? s[(int) Math.round(0.50 * (k - 1))] / 1e6 : -1,
            k > 0 ? s[(int) Math.round(0.99 * (k - 1))] / 1e6 : -1,
            k > 0 ? s[k - 1] / 1e6 : -1);
    }

    static void phase(List<ZooKeeper> zks, double secs, int window, byte[] data,
                      long[] lats, AtomicInteger n, AtomicLong errors) throws Exception {
        long deadline = System.nanoTime() + (long) (secs * 1e9);
        List<Thread> threads = new ArrayList<>();
        for (ZooKeeper zk : zks) {
            Thread t = new Thread(() -> {
                Semaphore sem = new Semaphore(window);
                AsyncCallback.StringCallback cb = (rc, path, ctx, name) -> {
                    long l = System.nanoTime() - (Long) ctx;
                    if (rc == 0) {
                        int i = n.getAndIncrement();
                        if (i < lats.length) lats[i] = l;
                    } else {
                        errors.incrementAndGet();
                    }
                    sem.release();
                };
                try {
                    while (true) {
                        sem.acquire();
                        long now = System.nanoTime();
                        if (now >= deadline) { sem.release(); break; }
                        zk.create("/peers/log-", data, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                                  CreateMode.PERSISTENT_SEQUENTIAL, cb, now);
                    }
                    if (!sem.tryAcquire(window, 60, TimeUnit.SECONDS)) errors.incrementAndGet();
                } catch (InterruptedException e) { throw new RuntimeException(e); }
            });
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) t.join();
    }
}
"""
