"""The supervisor: one per bookie.  Starts, watches, restarts and stops the workers.

Start order: check the directory layout and cookies; create the shared-memory ring; start the
journal worker (it finds the journal's end) and wait until it is ready; start the add worker (it
replays the journal from LastLogMark) and wait; start the read and GC workers; register the
bookie in the metadata store.  Stop order (SIGTERM / SIGINT): unregister; stop read and GC; stop
the add worker (it answers what is durable and checkpoints); stop the journal (it writes what is
left); unlink the ring.

Workers are started with fork+exec (``python -m bookie.workers ROLE``), so no LMDB environment,
ZeroMQ context or thread of the supervisor ever crosses into a worker.  Each worker gets
``PR_SET_PDEATHSIG`` so that it stops when the supervisor is gone.

A worker that dies is restarted (the add worker first waits until the journal has written what
it left in the ring, then replays; the journal continues from the end of its files), at most
``workerRestartLimit`` times a minute; past that, or when the journal reports corruption (exit
status 3), the bookie stops cleanly and says why.
"""

from __future__ import annotations

import collections
import ctypes
import glob
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import orjson

from bookie.appliance.exposition import BookieRegistry
from bookie.workers.config import BookieConfig
from bookie.workers.layout import LayoutError, check_or_stamp
from bookie.workers.common import free_port_pair, log_line as log, set_pdeathsig
from bookie.workers.ring import READONLY, Ring

ROLES_IN_START_ORDER = ("journal", "add", "read", "gc")
EXIT_CORRUPT = 3
EXIT_SYNC_FAILED = 4
FATAL_EXITS = {EXIT_CORRUPT: "found corruption", EXIT_SYNC_FAILED: "could not make the journal durable"}
READY_TIMEOUT_S = {"journal": 120.0, "add": 3600.0, "read": 60.0, "gc": 60.0}




def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Worker:
    def __init__(self, role: str):
        self.role = role
        self.proc: subprocess.Popen | None = None
        self.restarts: collections.deque[float] = collections.deque()  # the last minute's
        self.restarts_total = 0


class Supervisor:
    def __init__(self, conf: BookieConfig):
        self.conf = conf
        self.name = f"bookie[{conf.bookie_port}] supervisor"
        self.workers = {role: Worker(role) for role in ROLES_IN_START_ORDER}
        self.stopping = False
        self.stop_reason = ""
        self.exit_code = 0
        self.ring = None
        self.run_dir = ""
        self.registration = None
        self.store = None
        self.readonly = False  # what the workers and the store are told
        self.forced_readonly = False
        self.disks_full = False
        self.http = None  # /metrics on prometheusStatsHttpPort
        self.admin_http = None  # the admin API on httpServerPort
        self.metrics = None  # exposition.BookieRegistry of this run
        self._readonly_lock = threading.RLock()  # the admin API's threads, signals, the loop

    def log(self, event: str, **fields) -> None:
        log(self.name, event, **fields)

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        conf = self.conf
        cookie = check_or_stamp(conf)
        if conf.metadata_uri:
            self._check_cookie_in_store(cookie)
        self._clean_stale_rings()
        self.run_dir = tempfile.mkdtemp(prefix=f"bk{conf.bookie_port}-")
        self.metrics = BookieRegistry(self, self.run_dir)
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else self.run_dir
        ring_path = os.path.join(shm, f"bookie-{conf.bookie_port}-{os.getpid()}.ring")
        self.ring = Ring.create(ring_path, conf.ring_size_bytes)
        with open(os.path.join(self.run_dir, "ring.path"), "w") as f:
            f.write(ring_path)
        with open(os.path.join(self.run_dir, "bookie.conf"), "w") as f:
            f.write(conf.to_properties())
        for role in ROLES_IN_START_ORDER:
            self._start_worker(role)
        if conf.metadata_uri:
            self._register()
        self._start_http()
        self.log("bookie serving", bookie_id=conf.bookie_id, add_port=conf.bookie_port,
                 read_port=conf.bookie_port + 1, metadata=conf.metadata_uri or "none")

    def _clean_stale_rings(self) -> None:
        for path in glob.glob(f"/dev/shm/bookie-{self.conf.bookie_port}-*.ring"):
            try:
                pid = int(path.rsplit("-", 1)[1].split(".")[0])
            except ValueError:
                continue
            if not _pid_alive(pid):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def _start_worker(self, role: str) -> None:
        w = self.workers[role]
        r, wfd = os.pipe()
        cmd = [sys.executable, "-m", "bookie.workers", role,
               "--conf", os.path.join(self.run_dir, "bookie.conf"),
               "--run-dir", self.run_dir, "--ready-fd", str(wfd)]
        w.proc = subprocess.Popen(cmd, pass_fds=(wfd,), preexec_fn=set_pdeathsig,
                                  stdin=subprocess.DEVNULL, env=self.metrics.worker_env())
        os.close(wfd)
        deadline = time.monotonic() + READY_TIMEOUT_S[role]
        try:
            while True:
                ready, _, _ = select.select([r], [], [], 0.2)
                if ready:
                    if os.read(r, 1) == b"R":
                        break
                    raise WorkerStartError(role, w.proc.wait(5))
                if w.proc.poll() is not None:
                    raise WorkerStartError(role, w.proc.returncode)
                if time.monotonic() > deadline:
                    w.proc.kill()
                    raise WorkerStartError(role, None)
                if self.stopping:
                    raise WorkerStartError(role, None)
        finally:
            os.close(r)
        self.log("worker started", role=role, pid=w.proc.pid)

    def _open_store(self):
        from bookie.metadata import open_metadata

        if self.store is None:
            self.store = open_metadata(self.conf.metadata_uri,
                                       timeout_s=self.conf.metadata_timeout_s,
                                       lease_ms=round(self.conf.registration_lease_s * 1000))
        return self.store

    def _check_cookie_in_store(self, cookie: dict) -> None:
        """The store keeps each bookie's cookie: a second bookie (or a wiped one) claiming the
        same id with another disk set is refused."""
        from bookie.metadata import CookieNotFoundError, MetadataError

        try:
            store = self._open_store()
            try:
                raw, _version = store.read_cookie(self.conf.bookie_id)
            except CookieNotFoundError:
                store.write_cookie(self.conf.bookie_id, orjson.dumps(cookie))
                return
        except MetadataError as e:
            raise LayoutError(f"metadata store {self.conf.metadata_uri}: {e}") from None
        try:
            stored = orjson.loads(raw)
        except ValueError:
            raise LayoutError(f"cookie of {self.conf.bookie_id} in the metadata store is unreadable") from None
        if stored != cookie:
            diff = sorted(k for k in set(stored) | set(cookie) if stored.get(k) != cookie.get(k))
            raise LayoutError(f"the metadata store holds another cookie for {self.conf.bookie_id} "
                              f"(differs in: {', '.join(diff)}): a different disk set or a wiped "
                              f"bookie under the same id; restore the directories, or remove the "
                              f"cookie and re-replicate (bookieformat)")

    def _register(self) -> None:
        self._open_store()
        info = {"add_port": self.conf.bookie_port, "read_port": self.conf.bookie_port + 1,
                "host": self.conf.bookie_host, "pid": os.getpid()}
        self.registration = self.store.register_bookie(self.conf.bookie_id, readonly=self.readonly,
                                                       info=info)
        self.log("registered", metadata=self.conf.metadata_uri)

    # -- watch -----------------------------------------------------------------------------------
    def watch(self) -> int:
        next_disk_check = 0.0
        while not self.stopping:
            time.sleep(0.05)
            for role in ROLES_IN_START_ORDER:
                w = self.workers[role]
                if w.proc is None or w.proc.poll() is None:
                    continue
                self._worker_died(w)
                if self.stopping:
                    break
            now = time.monotonic()
            if now >= next_disk_check and not self.stopping:
                next_disk_check = now + self.conf.disk_check_interval_s
                self._check_disks()
        self.shutdown()
        return self.exit_code

    def _worker_died(self, w: Worker) -> None:
        rc = w.proc.returncode
        how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
        self.metrics.worker_gone(w.proc.pid)
        if rc in FATAL_EXITS:
            self.request_stop(f"{w.role} worker {FATAL_EXITS[rc]} ({how}); stopping the bookie", rc)
            return
        now = time.monotonic()
        w.restarts.append(now)
        while w.restarts and now - w.restarts[0] > 60:
            w.restarts.popleft()
        if len(w.restarts) > self.conf.worker_restart_limit:
            self.request_stop(f"{w.role} worker died with {how} {len(w.restarts)} times in a "
                              f"minute; stopping the bookie", 1)
            return
        self.log("worker died; restarting it", role=w.role, pid=w.proc.pid, cause=how)
        w.restarts_total += 1
        try:
            self._start_worker(w.role)
        except WorkerStartError as e:
            self.request_stop(f"restart failed: {e}", 1)

    def _check_disks(self) -> None:
        dirs = [self.conf.journal_dir, *self.conf.ledger_dirs]
        full = []
        for d in dirs:
            try:
                u = shutil.disk_usage(d)
            except OSError:
                full.append(d)
                continue
            if u.total and (u.total - u.free) / u.total >= self.conf.disk_usage_threshold:
                full.append(d)
        disks_full = bool(full)
        if disks_full and not self.conf.read_only_mode_enabled:
            self.request_stop(f"disks full ({', '.join(full)}) and readOnlyModeEnabled=false", 1)
            return
        if disks_full != self.disks_full:
            self.disks_full = disks_full
            self.log("disks full" if disks_full else "disks have room again", full=",".join(full) or "-")
            self._apply_readonly()

    def set_readonly(self, flag: bool) -> None:
        """Force read-only mode, or lift the force (operators: SIGUSR1 / SIGUSR2, the admin
        API's PUT /api/v1/bookie/state/readonly; tests).  Safe from any thread."""
        with self._readonly_lock:
            self.forced_readonly = flag
            self._apply_readonly()

    def _apply_readonly(self) -> None:
        """Read-only while forced or while a disk is full; tell the workers and the store."""
        with self._readonly_lock:
            self._apply_readonly_locked()

    def _apply_readonly_locked(self) -> None:
        readonly = self.forced_readonly or self.disks_full
        if readonly == self.readonly:
            return
        self.readonly = readonly
        self.ring.set(READONLY, 1 if readonly else 0)
        if self.registration is not None:
            self.registration.set_readonly(readonly)
        self.log("bookie is now read-only" if readonly else "bookie is writable again",
                 forced=self.forced_readonly, disks_full=self.disks_full)

    def request_stop(self, reason: str, code: int = 0) -> None:
        if not self.stopping:
            self.stopping = True
            self.stop_reason = reason
            self.exit_code = code
            self.log("stopping", reason=reason)

    # -- stop ------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        if self.registration is not None:
            try:
                self.registration.close()
            except Exception as e:  # noqa: BLE001 - the store may be gone; stopping goes on
                self.log("unregister failed", error=str(e))
        for group in (("read", "gc"), ("add",), ("journal",)):
            procs = [self.workers[r].proc for r in group if self.workers[r].proc is not None]
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.log("worker did not stop in 15 s; killing it", pid=p.pid)
                    p.kill()
                    p.wait()
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # noqa: BLE001
                pass
        for server in (self.http, self.admin_http):
            if server is not None:
                server.stop()
        if self.ring is not None:
            path = self.ring.path
            self.ring.close()
            try:
                os.unlink(path)
            except OSError:
                pass
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        self.log("bookie stopped", reason=self.stop_reason or "requested")

    # -- HTTP: admin API and /metrics (bookie.appliance.admin) -----------------------------------
    def _start_http(self) -> None:
        from bookie.appliance import admin

        conf = self.conf
        api = admin.AdminApi(self, self.metrics)
        limits = {"max_connections": conf.http_server_max_connections,
                  "idle_timeout_s": conf.http_server_idle_timeout_s}
        if conf.metrics_port:
            self.http = admin.start_server(conf.listening_interface, conf.metrics_port, api,
                                           admin.METRICS_ROUTES, self.log, **limits)
        if conf.http_server_enabled:
            self.admin_http = admin.start_server(conf.http_server_host, conf.http_server_port, api,
                                                 admin.ROUTES, self.log, **limits)
            self.log("admin api serving", host=conf.http_server_host, port=self.admin_http.port)


class WorkerStartError(RuntimeError):
    def __init__(self, role: str, returncode):
        how = "timed out" if returncode is None else f"exited with status {returncode}"
        super().__init__(f"{role} worker did not become ready ({how}); see its log lines above")
        self.role = role
        self.returncode = returncode


def run_bookie(conf: BookieConfig) -> int:
    """Run one bookie in the foreground until SIGTERM / SIGINT.  Returns the exit status."""
    if conf.bookie_port == 0:
        values = conf.as_dict()
        values["bookiePort"] = free_port_pair(conf.listening_interface)
        conf = BookieConfig(values, conf.warnings)
    for w in conf.warnings:
        log(f"bookie[{conf.bookie_port}] supervisor", "warning", message=w)
    sup = Supervisor(conf)

    def on_signal(signo, _frame):
        sup.request_stop(f"signal {signal.Signals(signo).name}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGUSR1, lambda *_: sup.set_readonly(True))
    signal.signal(signal.SIGUSR2, lambda *_: sup.set_readonly(False))
    try:
        sup.start()
    except LayoutError as e:
        log(sup.name, "refusing to start", reason=str(e))
        sup.shutdown()
        return 2
    except WorkerStartError as e:
        log(sup.name, "start failed", reason=str(e))
        sup.shutdown()
        return e.returncode if e.returncode in FATAL_EXITS else 1
    return sup.watch()
