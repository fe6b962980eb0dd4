"""What every worker process shares: its name, its log line, its runtime paths, readiness; and the
process helpers the supervisor and the test harness use (parent-death signal, waits for exit);
free ports are in ``bookie.workers.ports``."""

from __future__ import annotations

import collections
import ctypes
import os
import resource
import select
import shutil
import signal
import socket
import struct
import time

import orjson
import setproctitle
import zmq

from bookie import wire
from bookie.workers import logs
from bookie.workers.config import BookieConfig
from bookie.workers.metrics import Metrics
from bookie.storage.ring import READONLY, drain_fd


# A monitor event's first frame (libzmq 4 event API): event id (16 bits), value (32 bits: the
# connection's descriptor here).  Decoded here rather than by pyzmq's zmq.utils.monitor, whose
# import brings asyncio with it: a third of a worker's import time spent on nothing it uses.
_MONITOR_EVENT = struct.Struct("=hi")


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


def make_socket(ctx, kind, linger_ms: int = 0):
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, linger_ms)
    return sock


def raise_open_files_limit() -> int:
    """Raise this process's soft open-files limit to its hard one (client connections are
    descriptors); returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def guard_client_socket(sock, conf, max_message_bytes: int) -> None:
    """Options every client-facing socket gets before it binds (docs/security.md "Limits"):
    the largest frame it buffers, ZMTP heartbeats, and a handshake deadline."""
    ivl_ms = max(1, round(conf.client_heartbeat_interval_s * 1000))
    sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)  # larger: the connection is dropped
    sock.setsockopt(zmq.HEARTBEAT_IVL, ivl_ms)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * ivl_ms)
    sock.setsockopt(zmq.HANDSHAKE_IVL, ivl_ms)  # a connection that never speaks ZMTP goes


class ConnectionCap:
    """Keeps a client socket's TCP connections at ``limit``.

    ZeroMQ accepts every connection itself and offers no cap; its monitor reports each accepted
    connection with its descriptor.  One past the limit is shut down at once (``shutdown`` only:
    ZeroMQ sees the end of the stream and closes its own descriptor, which it then reports).
    ``poll`` the ``monitor`` socket with the worker's others and call ``drain``.
    """

    _EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED

    def __init__(self, sock, limit: int, port: int):
        self.monitor = sock.get_monitor_socket(self._EVENTS)
        self.limit = limit
        self.port = port
        self.open: set[int] = set()
        self.refused_total = 0

    def drain(self) -> None:
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event, fd = _MONITOR_EVENT.unpack(frames[0])
            if event == zmq.EVENT_ACCEPTED:
                if len(self.open) >= self.limit and self.shut(fd):
                    self.refused_total += 1
                self.open.add(fd)  # until ZeroMQ reports it gone
            else:
                self.open.discard(fd)

    def shut(self, fd: int) -> bool:
        """Shut the client connection on ``fd`` down; False when it is not (or no longer) one."""
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            return False  # gone already
        try:
            if s.getsockname()[1] == self.port:  # still our client connection, not a reused fd
                s.shutdown(socket.SHUT_RDWR)
                return True
        except OSError:
            pass
        finally:
            s.detach()  # ZeroMQ owns the descriptor
        return False

    def close(self) -> None:
        self.monitor.close()


# A connection refused more often than this in one second is flooding: shut down.  A client that
# backs off at its first refusals never comes near it.
REFUSALS_PER_CONNECTION_PER_S = 1000


class RefusalBudget:
    """A connection that keeps sending what gets refused is shut down.

    Past a limit a request is answered TOO_MANY_REQUESTS (on the add socket: any refusal but
    FENCED and READ_ONLY, ``ClientServer.flooding``); a client that goes on sending anyway
    (more than ``per_s`` refusals within one second) is flooding, and answering each of its
    requests costs the worker about what sending it cost the client.  Its connection is shut
    down through the ``ConnectionCap`` (only a descriptor the cap saw accepted on this port):
    ZeroMQ sees the stream end and drops what it had queued from it.  A client that backs off
    at its first refusals never comes near the budget.
    """

    def __init__(self, per_s: int, cap: "ConnectionCap | None", on_shut=None, clock=time.monotonic):
        self.per_s = per_s
        self.cap = cap
        self.on_shut = on_shut  # on_shut(ident): forget what the connection left waiting
        self.clock = clock
        self.counts: dict[bytes, int] = {}  # this second's refusals per connection
        self.window = clock()
        self.shut_total = 0
        self.shut_at: dict[bytes, float] = {}  # connection -> when it was shut (DRAIN_S)

    # s: how long what a shut connection had queued is recognised as its own.  The worker may
    # take longer than a second to get through a flood's queue on a loaded machine; a long
    # poll taken from it after a one-second window parked again, for a client that was gone,
    # and held its host's share until the poll's own timeout.
    DRAIN_S = 10.0

    def dropping(self, ident: bytes) -> bool:
        """True while ``ident`` is a connection shut down in the last ``DRAIN_S``: what it
        had queued before the shutdown may be dropped unread, unanswered (nobody is left to
        answer; a shut connection still had up to its receive high-water mark of messages
        queued, each as dear to handle as any), and must never take a place that outlives it
        (a parked long poll, a fence).  A client that reconnects with the same explicit
        identity within ``DRAIN_S`` is refused until then.  Costs a dict lookup; nothing while
        no connection is shut.

        The add worker drops so (``PendingAdds.admit``): a refused add costs it tens of
        microseconds, and its socket queues 10 000.  The read worker does not: its refusals
        are cheap, and in the 1M long-poll flood dropping left the writer less of its rate
        (0.41 / 0.50 against 0.68 / 0.55 without, interleaved runs at load 2.9 - 3.8; why is
        not established: perhaps an emptied queue lets ZeroMQ read more of the flooder's
        stream before it sees the end)."""
        if not self.shut_at:
            return False
        shut_at = self.shut_at.get(ident)
        if shut_at is None:
            return False
        now = self.clock()
        if now - shut_at < self.DRAIN_S:
            return True
        for old in [i for i, t in self.shut_at.items() if now - t >= self.DRAIN_S]:
            del self.shut_at[old]
        return False

    def refused(self, ident: bytes, frame) -> bool:
        """Count a refusal of a request of ``ident`` (``frame``: a zmq.Frame of it, or None).

        Returns:
            True when the connection is over its budget: it was shut down now or earlier in
            this second, and the refusal need not be answered.
        """
        now = self.clock()
        if now - self.window >= 1.0:
            self.counts.clear()
            self.window = now
        n = self.counts.get(ident, 0) + 1
        self.counts[ident] = n
        if n <= self.per_s:
            return False
        if n == self.per_s + 1 and self.cap is not None and frame is not None:
            try:
                fd = frame.get(zmq.SRCFD)
            except zmq.ZMQError:
                fd = -1
            if fd in self.cap.open and self.cap.shut(fd):
                self.shut_total += 1
                self.shut_at[ident] = now
                if self.on_shut is not None:
                    self.on_shut(ident)
        return True


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
        FENCED and READ_ONLY: a writer meets one with every add it has in flight at once, when
        its ledger is fenced or the bookie turns read-only."""
        return status not in (wire.Status.FENCED, wire.Status.READ_ONLY)

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
            wire.send_frames(self.clients, [ident, wire.pack_header(op, status, request_id, ledger_id), *body])
        except zmq.ZMQError:
            self.stats["replies_dropped_total"] += 1

    def reject_raw(self, ident, head, status) -> None:
        """Answer a request whose header did not decode, when there is a request id to echo."""
        self.stats["rejected_malformed_total"] += 1
        if len(head) == wire.HEADER_SIZE:
            _, _, op, _, _, request_id, ledger_id = wire.HEADER.unpack(head)
            self.reply(ident, op, status, request_id, max(ledger_id, 0))

    def info(self) -> bytes:
        from bookie import __version__  # read from the installed metadata when asked, not at start

        usage = shutil.disk_usage(self.ledger_dir)
        return orjson.dumps({"bookie_id": self.ctx.conf.bookie_id, "free_bytes": usage.free,
                             "total_bytes": usage.total, "writable": not self.ring.get(READONLY),
                             "version": __version__})


def set_pdeathsig() -> None:
    """In a child before exec: receive SIGTERM when the parent (thread) that started it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def worker_preexec() -> None:
    """In a bookie worker before exec: ``set_pdeathsig``, and Ctrl-C ignored from the first
    instruction on (an ignored signal stays ignored across exec, and Python then leaves it so).
    A terminal's Ctrl-C signals the whole process group; the supervisor handles it and stops
    its workers with SIGTERM.  The workers are launched early, to import while the ones before
    them start, so a Ctrl-C in the first second of ``bookie run`` used to meet them inside
    Python's own start-up and print KeyboardInterrupt tracebacks (5 of 12 tries)."""
    set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for_go(fd: int) -> bool:
    """Block until the supervisor's go (a byte on ``fd``): True, or False when it closed the
    pipe without one (the start was abandoned).  Workers are launched early so that their
    imports overlap the start of the workers before them (appliance/supervisor.py)."""
    try:
        while True:
            try:
                return os.read(fd, 1) != b""
            except InterruptedError:
                continue
    finally:
        os.close(fd)


def wait_exited(proc, timeout_s: float) -> int:
    """``proc.wait(timeout_s)`` woken by the process's exit itself (a pidfd), not by
    ``Popen.wait``'s polling, whose sleeps grow to 50 ms: a bookie's stop waits on three groups
    of workers in turn, and its owner on the bookie.

    Raises:
        subprocess.TimeoutExpired: still running after ``timeout_s``.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # reaped already, or no pidfd here: Popen's own wait
        return proc.wait(timeout_s)
    try:
        exited = select.select([fd], [], [], timeout_s)[0]
    finally:
        os.close(fd)
    if not exited:
        import subprocess  # (the workers import this module and never wait for a process)
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return proc.wait()
