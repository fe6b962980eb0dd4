"""Messages of many frames, refused before ZeroMQ holds them whole (the add socket).

Theory of operation
-------------------
ZeroMQ bounds each frame (``ZMQ_MAXMSGSIZE``) but delivers a message only once its last frame is
in, and holds every frame before that in the worker's memory: one ADD of 220 frames of 1 MiB
made the worker hold 220 MiB before it saw anything, and a client sending such messages made
the supervisor's memory watch kill the add worker again and again.  No ZeroMQ option bounds a
message's frames, and the worker cannot read a message before it is whole.  It can read what
the kernel says each connection has received: ``TCP_INFO``'s ``tcpi_bytes_received`` of the
connection's descriptor (the ``ConnectionCap`` knows every one).

Frames of one message are contiguous on a connection, so whatever a connection sent since the
last message of it the worker took is (at most) one message still arriving.  ``FrameGuard``:

- ``delivered(frames)``: the worker took a message of the descriptor ``SRCFD`` names;
- ``check(drained, now)``, at most every ``INTERVAL_S`` and only when the worker has taken
  every complete message ZeroMQ holds (``drained``; else a queue of complete messages would
  count): a connection that delivered since the last check starts counting from what it has
  received now; one that did not has ``received - base`` bytes of a message still arriving.
  Past ``limit_bytes`` (the add size limit, ``maxAddMessageSizeBytes``, plus room for one
  whole message's framing) it is shut down: ZeroMQ sees the stream end and drops what it held
  of it.  ZMTP heartbeats add tens of bytes every interval: months, not minutes, to the limit.

A peer that keeps the worker's memory up anyway (many connections each under the limit)
still meets ``workerMemoryLimitMB``.  So that such a kill falls on the peer, not on everyone:
the connection holding the most of a message still arriving (1 MiB or more) is written to
``SUSPECT_FILE`` in the run directory at each check, and removed when there is none (and at a
clean stop).  A worker that starts and finds the file (its predecessor died holding it) shuts
every connection of that peer address for ``SHUT_OUT_S``, as soon as it sees it accepted.  On
loopback that address may be every local client's: they are shut out for that long as well.
"""

from __future__ import annotations

import os
import socket
import struct
import time

import zmq

INTERVAL_S = 0.05
FRAMING_ROOM_BYTES = 1 << 20  # headers, a CURVE box per frame, handshake, heartbeats
SUSPECT_MIN_BYTES = 1 << 20
SUSPECT_FILE = "add.suspect"
SHUT_OUT_S = 60.0
_TCPI_BYTES_RECEIVED = 128  # offset in struct tcp_info (Linux >= 4.1)
_U64 = struct.Struct("<Q")


def bytes_received(fd: int) -> int | None:
    """What the kernel has received on the TCP connection ``fd``; None when it is not one."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        return _U64.unpack_from(info, _TCPI_BYTES_RECEIVED)[0] if len(info) >= 136 else None
    except OSError:
        return None
    finally:
        s.detach()  # ZeroMQ owns the descriptor


def peer_address(fd: int) -> str | None:
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        return s.getpeername()[0]
    except OSError:
        return None
    finally:
        s.detach()


class FrameGuard:
    """See the module docstring.  ``cap``: the socket's ``ConnectionCap``; ``log(event, ...)``."""

    def __init__(self, cap, limit_bytes: int, run_dir: str, log, clock=time.monotonic):
        self.cap = cap
        self.limit = limit_bytes + FRAMING_ROOM_BYTES
        self.log = log
        self.clock = clock
        self.suspect_path = os.path.join(run_dir, SUSPECT_FILE)
        self.base: dict[int, int] = {}  # fd -> bytes received when its count began
        self.fresh: set[int] = set()  # fds that delivered since the last check
        self.next_check = 0.0
        self.shut_total = 0
        self.shut_out: dict[str, float] = {}  # peer address -> until (monotonic)
        self.seen: set[int] = set()  # fds already judged against shut_out
        self.suspect: str | None = None
        self._take_over_suspect()

    def _take_over_suspect(self) -> None:
        try:
            with open(self.suspect_path) as f:
                peer = f.read().strip()
        except OSError:
            return
        os.unlink(self.suspect_path)
        if peer:
            self.shut_out[peer] = self.clock() + SHUT_OUT_S
            self.log("peer shut out: the worker before this one died while it held a message "
                     "still arriving", level="warning", peer=peer, for_s=SHUT_OUT_S)

    def delivered(self, frames) -> None:
        """The worker took a whole message off the client socket."""
        try:
            self.fresh.add(frames[-1].get(zmq.SRCFD))
        except (zmq.ZMQError, AttributeError):
            pass

    def check(self, drained: bool) -> None:
        now = self.clock()
        if self.shut_out:
            self._shut_out_new(now)
        if now < self.next_check or not drained:
            return
        self.next_check = now + INTERVAL_S
        open_fds = self.cap.open
        for fd in [fd for fd in self.base if fd not in open_fds]:
            del self.base[fd]
        worst, worst_fd = 0, None
        for fd in open_fds:
            got = bytes_received(fd)
            if got is None:
                continue
            if fd in self.fresh:
                self.base[fd] = got
                continue
            arriving = got - self.base.setdefault(fd, 0)  # new: all since the connection began
            if arriving > self.limit:
                self._shut(fd, arriving)
            elif arriving > worst:
                worst, worst_fd = arriving, fd
        self.fresh.clear()
        self._note_suspect(worst_fd if worst >= SUSPECT_MIN_BYTES else None)

    def _shut(self, fd: int, arriving: int) -> None:
        peer = peer_address(fd)
        if self.cap.shut(fd):
            self.shut_total += 1
            self.base.pop(fd, None)
            if self.shut_total <= 10 or self.shut_total % 1000 == 0:
                self.log("connection shut: a message over the add size limit still arriving",
                         level="warning", peer=peer or "-", arriving_bytes=arriving,
                         limit_bytes=self.limit, shut_total=self.shut_total)

    def _note_suspect(self, fd: int | None) -> None:
        peer = peer_address(fd) if fd is not None else None
        if peer == self.suspect:
            return
        self.suspect = peer
        if peer is None:
            try:
                os.unlink(self.suspect_path)
            except FileNotFoundError:
                pass
            return
        tmp = self.suspect_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(peer)
        os.replace(tmp, self.suspect_path)

    def _shut_out_new(self, now: float) -> None:
        for peer, until in list(self.shut_out.items()):
            if now >= until:
                del self.shut_out[peer]
        if not self.shut_out:
            self.seen.clear()
            return
        for fd in self.cap.open - self.seen:
            self.seen.add(fd)
            if peer_address(fd) in self.shut_out and self.cap.shut(fd):
                self.shut_total += 1
        self.seen &= self.cap.open

    def close(self) -> None:
        """A clean stop: nobody to suspect."""
        try:
            os.unlink(self.suspect_path)
        except FileNotFoundError:
            pass
