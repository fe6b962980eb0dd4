"""What every worker process shares: its name, its log line, its runtime paths, readiness, and
the serving of client requests (``ClientServer``).  The process helpers (parent-death signal,
waits for exit) are in ``bookie.workers.processes``, the client sockets' options and caps in
``bookie.workers.client_sockets``, free ports in ``bookie.workers.ports``."""

from __future__ import annotations

import collections
import os
import select
import shutil
import signal
from typing import TYPE_CHECKING

import orjson
import setproctitle
import zmq

from bookie import wire, wire_sockets
from bookie.workers import logs
from bookie.workers.config import BookieConfig
from bookie.workers.metrics import Metrics
from bookie.storage.ring import READONLY, drain_fd

if TYPE_CHECKING:
    from bookie.workers.client_sockets import RefusalBudget


def log_line(name: str, event: str, level: str | None = None, **fields) -> None:
    """One line per event on stderr (journald keeps it under systemd); format and level rules
    in ``bookie.workers.logs``."""
    logs.emit(name, event, level, **fields)


class WorkerContext:
    """A worker's view of its bookie: configuration, runtime paths, identity."""

    def __init__(self, role: str, conf: BookieConfig, run_dir: str, ready_fd: int | None):
        self.role = role
        self.conf = conf
        self.run_dir = run_dir
        self.ready_fd = ready_fd
        self.stopping = False
        self.name = f"bookie[{conf.bookie_port}] {role}"
        self.metrics = Metrics()
        self.stat_labels: tuple[str, ...] = ()  # label values of this worker's labelled stats
        self._unmapped: set[str] = set()

    # -- identity and logs -----------------------------------------------------------------------
    def start(self) -> None:
        setproctitle.setproctitle(self.name)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the supervisor
        # A SIGTERM also writes a byte here, so a loop that polls this descriptor wakes at
        # once: pyzmq's poll, interrupted by a signal, runs the handler and then polls again
        # for its whole timeout, so each worker stopped up to two timeouts late, and a bookie
        # stops its workers in three groups one after another.
        self.signal_fd, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, less if a signal comes (a SIGTERM: see ``signal_fd``)."""
        if select.select([self.signal_fd], [], [], seconds)[0]:
            self.drain_signals()

    def drain_signals(self) -> None:
        """Empty ``signal_fd`` (the loop saw it readable; ``stopping`` says what happened)."""
        drain_fd(self.signal_fd)

    def _on_term(self, _signo, _frame) -> None:
        self.stopping = True

    def log(self, event: str, level: str | None = None, **fields) -> None:
        log_line(self.name, event, level, **fields)

    def log_exception(self, event: str, exc: BaseException, **fields) -> None:
        """The error as one line; its traceback at debug level."""
        logs.emit_exception(self.name, event, exc, **fields)

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
        """Ring 0's address: journal 0's ring, which also holds the bookie's control words."""
        return self.ring_paths[0]

    @property
    def ring_paths(self) -> list[str]:
        """Every ring's address, journal i's at [i] (one line each in ``ring.path``)."""
        with open(os.path.join(self.run_dir, "ring.path")) as f:
            return f.read().split()

    def write_stats(self, stats: dict) -> None:
        """Publish this worker's figures to the bookie's metrics (bookie.workers.metrics maps
        each key to its metric) and flush what the hot paths counted locally."""
        for key in self.metrics.publish(stats, self.stat_labels):
            if key not in self._unmapped:
                self._unmapped.add(key)
                self.log("stat not in the metrics table; not exported", level="warning", key=key)
        self.metrics.flush()


# Label values of bookie_requests_total: a fixed set, whatever a client sends.
OP_NAMES = {int(op): op.name for op in wire.Op}
OP_NAMES[-1] = "FENCE"  # fences the read worker hands to the add worker
STATUS_NAMES = {int(st): st.name for st in wire.Status}


class ClientServer:
    """What the add and read workers' client-facing sides share: answers, refusals, INFO."""

    def __init__(self, ctx: WorkerContext, clients, ring, ledger_dir: str):
        self.ctx = ctx
        self.clients = clients
        self.ring = ring
        self.ledger_dir = ledger_dir
        self.stats = collections.Counter()
        self.requests = ctx.metrics.counter("bookie_requests_total")
        self.refusals: RefusalBudget | None = None  # the socket's refusal budget, once set

    def counts_as_flooding(self, status) -> bool:
        """Which refusals count against a connection's budget.  Here (the add socket) all but
        FENCED, READ_ONLY and OVER_QUOTA: a writer meets one with every add it has in flight at
        once, when its ledger is fenced, the bookie turns read-only or the writer passes its
        storage quota (shutting the connection would fail its client's other ledgers too)."""
        return status not in (wire.Status.FENCED, wire.Status.READ_ONLY, wire.Status.OVER_QUOTA)

    def flooding(self, ident, frame, status) -> bool:
        """Count a refusal against its connection's budget (``self.refusals``) if it counts
        (``counts_as_flooding``); True when the connection is over it (shut down now or earlier
        in this second): leave it unanswered."""
        if self.refusals is None or not self.counts_as_flooding(status):
            return False
        if not self.refusals.refused(ident, frame):
            return False
        self.stats["connections_shut_flooding_total"] = self.refusals.shut_total
        return True

    def log_shut(self, _ident=None, **fields) -> None:
        """A connection shut down for flooding: a warning for the first ten, then every
        thousandth (a flooder reconnects at once)."""
        n = self.refusals.shut_total
        if n <= 10 or n % 1000 == 0:
            self.ctx.log("connection shut for flooding", level="warning", shut_total=n,
                         refused_per_s=self.refusals.per_s, **fields)

    def count(self, op, status) -> None:
        """One answer, for bookie_requests_total{op, status} (counted locally, cheap)."""
        self.requests.inc(OP_NAMES.get(op, "UNKNOWN"), STATUS_NAMES.get(status, "UNKNOWN"))

    def reply(self, ident, op, status, request_id, ledger_id, body=()) -> None:
        self.count(op, status)
        try:
            wire_sockets.send_frames(self.clients, [ident, wire.pack_header(op, status, request_id, ledger_id), *body])
        except zmq.ZMQError:
            self.stats["replies_dropped_total"] += 1

    def reject_raw(self, ident, head, status) -> None:
        """Answer a request whose header did not decode, when there is a request id to echo."""
        self.stats["rejected_malformed_total"] += 1
        if len(head) == wire.HEADER_SIZE:
            _, _, op, _, _, request_id, ledger_id = wire.HEADER.unpack(head)
            self.reply(ident, op, status, request_id, max(ledger_id, 0))

    def info(self) -> bytes:
        from bookie import __version__  # read from the installed metadata when asked, not at start  # lazy: importlib.metadata

        usage = shutil.disk_usage(self.ledger_dir)
        return orjson.dumps({"bookie_id": self.ctx.conf.bookie_id, "free_bytes": usage.free,
                             "total_bytes": usage.total, "writable": not self.ring.get(READONLY),
                             "version": __version__})
