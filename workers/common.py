"""What every worker process shares: its name, its log line, its runtime paths, readiness."""

from __future__ import annotations

import os
import signal
import sys
import time

import orjson
import setproctitle

from bookie.appliance.config import BookieConfig


class WorkerContext:
    """A worker's view of its bookie: configuration, runtime paths, identity."""

    def __init__(self, role: str, conf: BookieConfig, run_dir: str, ready_fd: int | None):
        self.role = role
        self.conf = conf
        self.run_dir = run_dir
        self.ready_fd = ready_fd
        self.stopping = False
        self.name = f"bookie[{conf.bookiePort}] {role}"

    # -- identity and logs -----------------------------------------------------------------------
    def start(self) -> None:
        setproctitle.setproctitle(self.name)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the supervisor

    def _on_term(self, _signo, _frame) -> None:
        self.stopping = True

    def log(self, event: str, **fields) -> None:
        """One line per event on stderr (journald picks it up under systemd)."""
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        sys.stderr.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.name}: {event}"
                         f"{' ' + extra if extra else ''}\n")
        sys.stderr.flush()

    def ready(self) -> None:
        """Tell the supervisor this worker serves (one byte on the inherited pipe)."""
        if self.ready_fd is not None:
            os.write(self.ready_fd, b"R")
            os.close(self.ready_fd)
            self.ready_fd = None

    # -- runtime paths ---------------------------------------------------------------------------
    def endpoint(self, name: str) -> str:
        return f"ipc://{os.path.join(self.run_dir, name)}"

    @property
    def ring_path(self) -> str:
        with open(os.path.join(self.run_dir, "ring.path")) as f:
            return f.read().strip()

    def write_stats(self, stats: dict) -> None:
        """Publish this worker's counters for the supervisor's /metrics (atomic rename)."""
        path = os.path.join(self.run_dir, f"stats.{self.role}.json")
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(stats))
        os.replace(tmp, path)


def make_socket(ctx, kind, linger_ms: int = 0):
    sock = ctx.socket(kind)
    sock.setsockopt(__import__("zmq").LINGER, linger_ms)
    return sock
