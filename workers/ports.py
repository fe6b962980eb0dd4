"""Free ports for a bookie that was given none: a pair P, P+1 (client port, read port) that no
other process on this host is about to take.

A bind test alone ("both are free right now") is not enough where several processes pick ports
at once, as a pytest-xdist run of ``bookie.testing`` ensembles does: two processes can both find
the same pair free, and the second bookie to bind fails to start.  So a chosen pair is also
*reserved*: an exclusive ``flock`` on a file named after it in a per-user directory under the
temp dir.  Every chooser on the host skips a reserved pair, this process included (a lock taken
through another open file conflicts with its own), and the lock goes with its holder: released
by ``PortReservation.release`` or, if the holder dies, by the kernel.

Rules:
- chosen pairs start at an even port, so two chosen pairs never overlap in part;
- they lie below the kernel's ephemeral range (ip_local_port_range), where every process's
  outgoing connections take their ports: a port from that range can be taken by someone's
  connect() between the check and the bookie's bind;
- a reservation's file is removed on release; a chooser that locked a file which was removed
  meanwhile (its inode is no longer the path's) treats the pair as taken and moves on, so two
  holders of one pair cannot both come out of the race between an unlink and a lock;
- where the directory cannot be made (a read-only temp dir), choosing falls back to the bind
  test alone.
"""

from __future__ import annotations

import collections
import fcntl
import os
import random
import socket
import tempfile
import threading

# free_port_pair's reservations, held for this process's life (a caller of it has no handle to
# release them), the oldest dropped past this many: by then its bookie has bound the ports (which
# keeps every other chooser off them) or will never run.
_KEPT = 64
_kept: collections.deque[PortReservation] = collections.deque()
_kept_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _reservation_dir() -> str | None:
    path = os.path.join(tempfile.gettempdir(), f"bookie-ports-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path


class PortReservation:
    """Ports ``port`` and ``port + 1`` chosen for one bookie, kept from every other chooser on
    this host until ``release()`` (or this process's exit)."""

    def __init__(self, port: int, path: str | None, fd: int | None):
        self.port = port
        self._path = path
        self._fd = fd

    def release(self) -> None:
        """Let other choosers have the pair again.  Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.unlink(self._path)  # while still locked: see the module's rules
        except OSError:
            pass
        os.close(fd)

    def __repr__(self) -> str:
        return f"PortReservation({self.port}, held={self._fd is not None})"


def _lock(directory: str, port: int) -> tuple[str, int] | None:
    """Take pair ``port``'s reservation, or None if someone holds it."""
    path = os.path.join(directory, str(port))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino != os.fstat(fd).st_ino:
            raise OSError("removed by its last holder meanwhile")
    except OSError:
        os.close(fd)
        return None
    return path, fd


def _bindable(host: str, port: int) -> bool:
    try:
        with socket.socket() as s1, socket.socket() as s2:
            s1.bind((host, port))
            s2.bind((host, port + 1))
        return True
    except OSError:
        return False


def reserve_port_pair(host: str) -> PortReservation:
    """Choose and reserve a pair P, P+1 that is free on ``host`` and reserved by no one.

    Raises:
        RuntimeError: no such pair was found in 500 tries.
    """
    lo, _ = _ephemeral_range()
    top = lo - 2 if lo > 12_000 else 65_533
    directory = _reservation_dir()
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(10_000, top) & ~1
        held = _lock(directory, port) if directory else (None, None)
        if held is None:
            continue
        if _bindable(host, port):
            return PortReservation(port, *held)
        PortReservation(port, *held).release()
    raise RuntimeError("no free pair of ports found")


def free_port_pair(host: str) -> int:
    """A port P such that P and P+1 are free on ``host`` and no other chooser on this host will
    hand them out while this process keeps the reservation (its last 64 choices)."""
    reservation = reserve_port_pair(host)
    with _kept_lock:
        _kept.append(reservation)
        while len(_kept) > _KEPT:
            _kept.popleft().release()
    return reservation.port
