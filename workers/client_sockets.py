"""The client-facing sockets of the add and read workers: their options (``make_socket``,
``guard_client_socket``), the open-files limit they need, the cap on their TCP connections
(``ConnectionCap``, which also knows the local socket's connections, uncapped) and the budget of
refusals a connection may cost (``RefusalBudget``, on either)."""

from __future__ import annotations

import resource
import socket
import struct
import time

import zmq

# A monitor event's first frame (libzmq 4 event API): event id (16 bits), value (32 bits: the
# connection's descriptor here).  Decoded here rather than by pyzmq's zmq.utils.monitor, whose
# import brings asyncio with it: a third of a worker's import time spent on nothing it uses.
_MONITOR_EVENT = struct.Struct("=hi")


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
        self.open: set[int] = set()  # TCP connections (capped; the frame guard watches them)
        self.local: set[int] = set()  # connections on the local socket (workers/local_sockets.py)
        self.local_path: str | None = None  # the local socket's path, set once it is bound
        self.refused_total = 0

    def drain(self) -> None:
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event, fd = _MONITOR_EVENT.unpack(frames[0])
            if event == zmq.EVENT_ACCEPTED:
                if self.local_path is not None and self._is_local(fd):
                    self.local.add(fd)  # not capped: its uid's share bounds what it holds
                    continue
                if len(self.open) >= self.limit and self.shut(fd):
                    self.refused_total += 1
                self.open.add(fd)  # until ZeroMQ reports it gone
            else:
                self.open.discard(fd)
                self.local.discard(fd)

    def _is_local(self, fd: int) -> bool:
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            return False
        try:
            return s.family == socket.AF_UNIX
        finally:
            s.detach()

    def shut(self, fd: int) -> bool:
        """Shut the client connection on ``fd`` down; False when it is not (or no longer) one."""
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            return False  # gone already
        try:
            name = s.getsockname()
            # still our client connection, not a reused fd
            if (name == self.local_path) if s.family == socket.AF_UNIX else name[1] == self.port:
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
    FENCED, READ_ONLY and OVER_QUOTA, ``ClientServer.flooding``); a client that goes on sending anyway
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
            if (fd in self.cap.open or fd in self.cap.local) and self.cap.shut(fd):
                self.shut_total += 1
                self.shut_at[ident] = now
                if self.on_shut is not None:
                    self.on_shut(ident)
        return True
