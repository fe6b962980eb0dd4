"""A ZooKeeper server the nemesis can stop, restart (same port, same data), pause and resume.

``bookie.testing.zookeeper.ZooKeeperServer`` starts a server for a test; this subclass keeps
its directory and port across restarts and can run inside a network namespace (``prefix``,
e.g. ``["ip", "netns", "exec", "nem-zk"]``, with ``host`` the namespace's address).
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

from bookie.testing.zookeeper import ZooKeeperError, ZooKeeperServer, _classpath, _free_port


class RestartableZooKeeper(ZooKeeperServer):
    """One standalone ZooKeeper whose process the nemesis may kill, restart and SIGSTOP."""

    def __init__(self, *, host: str = "127.0.0.1", prefix: list[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.host = host
        self.prefix = list(prefix or [])
        self.paused = False

    def start(self) -> "RestartableZooKeeper":
        if self.java is None:
            raise ZooKeeperError("java not found: install default-jre-headless (tests/setup.sh)")
        self.dir = tempfile.mkdtemp(prefix="bookie-nemesis-zk-")
        # In a namespace of its own every port is free; on 127.0.0.1 pick a free one.
        self.port = 2181 if self.prefix else _free_port()
        data_dir = os.path.join(self.dir, "data")
        os.makedirs(data_dir, exist_ok=True)
        with open(os.path.join(self.dir, "zoo.cfg"), "w") as f:
            f.write(f"tickTime={self.tick_ms}\ndataDir={data_dir}\nclientPort={self.port}\n"
                    f"clientPortAddress={self.host}\nmaxClientCnxns=0\n"
                    f"minSessionTimeout={2 * self.tick_ms}\n"
                    f"maxSessionTimeout={self.max_session_timeout_ms}\n"
                    "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat\n"
                    "forceSync=no\n")
        self._launch()
        return self

    def _launch(self) -> None:
        self._log = open(os.path.join(self.dir, "zookeeper.log"), "ab")
        self._process = subprocess.Popen(
            [*self.prefix, self.java, f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC",
             "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Dzookeeper.jmx.log4j.disable=true",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", _classpath(),
             "org.apache.zookeeper.server.ZooKeeperServerMain", os.path.join(self.dir, "zoo.cfg")],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        self.paused = False
        if not self._wait_ready():
            tail = self.log_tail()
            self._kill()
            raise ZooKeeperError(f"ZooKeeper did not start within {self.start_timeout_s:g} s:\n{tail}")

    def kill(self) -> None:
        """SIGKILL the server (its data stays for ``relaunch``)."""
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)
        self._process = None
        self.paused = False
        if self._log is not None:
            self._log.close()
            self._log = None

    def relaunch(self) -> None:
        """Start the server again on the same port with the same data; waits until it serves.
        The port may linger briefly after a kill: retried for a few seconds."""
        deadline = time.monotonic() + 20.0
        while True:
            try:
                self._launch()
                return
            except ZooKeeperError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def pause(self) -> None:
        if self.running and not self.paused:
            os.killpg(self._process.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.running and self.paused:
            os.killpg(self._process.pid, signal.SIGCONT)
        self.paused = False

    def stop(self, *, keep_dir: bool = False) -> None:
        self.resume()
        super().stop(keep_dir=keep_dir)
