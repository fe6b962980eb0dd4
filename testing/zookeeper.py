"""A real ZooKeeper server for tests: Debian's ``zookeeper`` package, on 127.0.0.1, in a temp dir.

    from bookie.testing.zookeeper import ZooKeeperServer
    with ZooKeeperServer() as zk:                  # starts, waits for "imok", stops and cleans up
        store = open_metadata(zk.uri("/mytest"), create=True)   # zk://127.0.0.1:PORT/mytest

The server runs standalone (``ZooKeeperServerMain``) with a generated ``zoo.cfg`` (short tick,
admin HTTP server off, four-letter words ``ruok``/``srvr`` on) and logs to ``zookeeper.log`` in
its directory; ``log_tail()`` returns the end of it for a failing test's report.  The server
dies with the thread that started it (``PR_SET_PDEATHSIG``), so a test run killed by SIGKILL
leaves no Java process behind: start it from a thread that lives as long as you need it.

The Java classpath is Debian's ``/usr/share/java/zookeeper.jar`` (its manifest names the other
jars) plus a SLF4J binding; set ``ZOOKEEPER_CLASSPATH`` to use another installation.
``expire_session`` and ``drop_connection`` break a kazoo client's session or connection the way
a network fault would, for tests of what happens next.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid

from bookie.workers.processes import set_pdeathsig

DEBIAN_JARS = ("/usr/share/java/zookeeper.jar", "/usr/share/java/slf4j-simple.jar")


class ZooKeeperError(RuntimeError):
    """The test server could not be started (Java or ZooKeeper missing, port trouble)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str, timeout_s: float = 1.0) -> str:
    """Send a ZooKeeper four-letter command ("ruok", "srvr") and return the answer."""
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def _classpath() -> str:
    configured = os.environ.get("ZOOKEEPER_CLASSPATH")
    if configured:
        return configured
    missing = [jar for jar in DEBIAN_JARS[:1] if not os.path.exists(jar)]
    if missing:
        raise ZooKeeperError(f"ZooKeeper jars not found ({', '.join(missing)}): install Debian's "
                             f"zookeeper package (tests/setup.sh) or set ZOOKEEPER_CLASSPATH")
    return ":".join(jar for jar in DEBIAN_JARS if os.path.exists(jar))


class ZooKeeperServer:
    """One standalone ZooKeeper server on a free 127.0.0.1 port with its own temp data dir."""

    def __init__(self, *, tick_ms: int = 200, max_session_timeout_ms: int = 60_000,
                 start_timeout_s: float = 60.0, java: str | None = None,
                 heap_mb: int = 128):
        self.host = "127.0.0.1"
        self.port = 0
        self.tick_ms = tick_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.start_timeout_s = start_timeout_s
        self.java = java or shutil.which("java")
        self.heap_mb = heap_mb
        self.dir: str | None = None
        self._process: subprocess.Popen | None = None
        self._log = None

    @property
    def hosts(self) -> str:
        """"127.0.0.1:PORT", as kazoo and the zk:// URIs want it."""
        return f"{self.host}:{self.port}"

    def uri(self, root: str = "/ledgers", scheme: str = "zk") -> str:
        return f"{scheme}://{self.hosts}{root}"

    def chroot(self, prefix: str = "/t") -> str:
        """A fresh, unused root path for one test."""
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> "ZooKeeperServer":
        if self.java is None:
            raise ZooKeeperError("java not found: install default-jre-headless (tests/setup.sh)")
        classpath = _classpath()
        self.dir = tempfile.mkdtemp(prefix="bookie-zk-")
        for attempt in range(3):  # a port picked free may be taken by the time Java binds it
            self.port = _free_port()
            data_dir = os.path.join(self.dir, "data")
            os.makedirs(data_dir, exist_ok=True)
            config = os.path.join(self.dir, "zoo.cfg")
            with open(config, "w") as f:
                f.write(
                    f"tickTime={self.tick_ms}\n"
                    f"dataDir={data_dir}\n"
                    f"clientPort={self.port}\n"
                    f"clientPortAddress={self.host}\n"
                    f"maxClientCnxns=0\n"
                    f"minSessionTimeout={2 * self.tick_ms}\n"
                    f"maxSessionTimeout={self.max_session_timeout_ms}\n"
                    "admin.enableServer=false\n"
                    "4lw.commands.whitelist=ruok,srvr,stat\n"
                    "forceSync=no\n")  # a test server need not fsync its log
            self._log = open(os.path.join(self.dir, "zookeeper.log"), "ab")
            self._process = subprocess.Popen(
                [self.java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Xshare:auto", "-Dzookeeper.jmx.log4j.disable=true",
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
                 "-cp", classpath, "org.apache.zookeeper.server.ZooKeeperServerMain", config],
                stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
                # the server dies with the thread that started it, also when its owner is
                # SIGKILLed and cannot stop it (a test run killed by a timeout)
                preexec_fn=set_pdeathsig)
            if self._wait_ready():
                return self
            self._kill()
        tail = self.log_tail()
        self.stop()
        raise ZooKeeperError(f"ZooKeeper did not start within {self.start_timeout_s:g} s:\n{tail}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False  # exited: port in use or a bad installation
            try:
                if four_letter_word(self.host, self.port, "ruok", 0.5) == "imok":
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)
        self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self, *, keep_dir: bool = False) -> None:
        """Stop the server and (unless ``keep_dir``) remove its directory."""
        self._kill()
        if self.dir and not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log_tail(self, max_bytes: int = 8192) -> str:
        if not self.dir:
            return ""
        try:
            with open(os.path.join(self.dir, "zookeeper.log"), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_bytes))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_states(client, states: list[str], timeout_s: float, act) -> None:
    """Run ``act()`` and wait until ``client`` has gone through ``states`` in order."""
    seen: list[str] = []
    done = threading.Event()

    def listener(state):
        if len(seen) < len(states) and state == states[len(seen)]:
            seen.append(state)
            if len(seen) == len(states):
                done.set()
                return True  # kazoo removes a listener that returns True
        return None
    client.add_listener(listener)
    try:
        act()
        if not done.wait(timeout_s):
            raise TimeoutError(f"client did not go through {states} within {timeout_s:g} s "
                               f"(saw {seen})")
    finally:
        client.remove_listener(listener)


def expire_session(client, timeout_s: float = 10.0, wait_reconnect: bool = True) -> None:
    """Make the ZooKeeper server end ``client``'s session, as if it had timed out.

    A second client attaches to the same session and closes it: the server deletes the
    session's ephemeral nodes at once and ``client`` sees LOST, then (kazoo reconnects with a
    new session) CONNECTED.  Waits for both when ``wait_reconnect``, else for LOST only."""
    from kazoo.client import KazooClient  # lazy: kazoo
    from kazoo.protocol.states import KazooState  # lazy: kazoo

    def act():
        hosts = ",".join(f"{host}:{port}" for host, port in client.hosts)
        twin = KazooClient(hosts=hosts, client_id=client.client_id,
                           timeout=client._session_timeout / 1000.0)
        twin.start(timeout=timeout_s)
        twin.stop()
        twin.close()
    states = [KazooState.LOST, KazooState.CONNECTED] if wait_reconnect else [KazooState.LOST]
    _wait_states(client, states, timeout_s, act)


def drop_connection(client, timeout_s: float = 10.0, wait_reconnect: bool = True) -> None:
    """Drop ``client``'s TCP connection (the session survives): the client sees SUSPENDED and,
    having reconnected, CONNECTED (waited for when ``wait_reconnect``)."""
    from kazoo.protocol.connection import _CONNECTION_DROP  # lazy: kazoo
    from kazoo.protocol.states import KazooState  # lazy: kazoo
    states = [KazooState.SUSPENDED, KazooState.CONNECTED] if wait_reconnect \
        else [KazooState.SUSPENDED]
    # kazoo's own test harness breaks connections the same way: a drop request on its queue.
    _wait_states(client, states, timeout_s, lambda: client._call(_CONNECTION_DROP, None))
