"""The shared-memory ring between the add worker and the journal worker.

Theory of operation
-------------------
Shared memory without a name: the supervisor makes it with ``memfd_create`` (``create_memfd``),
sizes it, seals its size, and keeps the descriptor; each worker that maps it (journal, add,
read) inherits that descriptor across its fork+exec and is told its number as the ring's
address, ``fd:N`` (``address``, ``attach``).  Nothing of it is in /dev/shm or any other
directory: no name to guess, plant or link, no file another user could open, and nothing left
behind when the bookie is killed (the memory goes with the last process that maps it or holds
the descriptor; the workers die with the supervisor, ``PR_SET_PDEATHSIG``).  Sealed
``F_SEAL_SHRINK | F_SEAL_GROW``: no process can truncate it under the others' mappings.
``create(path)`` / ``attach(path)`` map a ring file instead (tests), created with
``O_EXCL | O_NOFOLLOW`` and mode 0600.  Its first page holds the control words; the rest is the
data ring.

Positions are *logical journal offsets*: u64 byte counts that only ever grow, over the whole
life of the bookie's journal (they continue across restarts; the journal stores them in every
group header).  Byte ``p`` lives at ``DATA_OFFSET + p % capacity``.

Control words (u64, native endianness, plain stores; one writer each)::

    WRITE     end of the records the add worker has placed   (writer: add worker)
    DURABLE   end of what the journal has fdatasync'd         (writer: journal worker)
    BASE      logical offset the ring started at this boot    (writer: journal worker at start)
    READONLY  1 when the bookie must refuse adds               (writer: supervisor)
    JOURNAL_EPOCH / ADD_EPOCH  bumped by each start of that worker (for logs and tests)
    NO_ROOM   1 while the ledger disks had no room for the add worker's writes (writer: add
              worker; the supervisor turns the bookie read-only while it is set)
    JOURNAL_NO_ROOM  in each journal's ring: 1 while that journal's disk had no room for its
              writes (writer: that journal worker; the supervisor turns the bookie read-only)

Publication order: write the data, then store the cursor; a reader loads the cursor first,
then reads the data up to it.  Each worker then rings the other's ``Doorbell`` (a named pipe
in the bookie's run directory): a wake-up only, never a carrier of facts, so a lost or extra
ring costs at most a poll timeout or a spurious look at the cursors.  The add worker never writes over bytes the journal has not made
durable: a record may be placed only while ``WRITE + size - DURABLE <= capacity``.
"""

from __future__ import annotations

import fcntl
import mmap
import os

import numpy as np

PAGE = 4096
DATA_OFFSET = PAGE

WRITE, DURABLE, BASE, READONLY, JOURNAL_EPOCH, ADD_EPOCH, NO_ROOM, JOURNAL_NO_ROOM = range(8)


FD_PREFIX = "fd:"


class Ring:
    """A mapping of the ring.  ``create_memfd`` (supervisor) or ``attach`` (workers);
    ``create`` / ``attach`` of a path for tests and tools."""

    def __init__(self, path: str | None, mm: mmap.mmap, capacity: int, fd: int | None = None):
        self.path = path  # the ring file, or None for a memfd ring
        self.fd = fd  # the memfd, kept open by its creator for the workers to inherit
        self._mm = mm
        self.capacity = capacity
        self.ctl = np.ndarray((PAGE // 8,), dtype=np.uint64, buffer=mm, offset=0)
        self.data = memoryview(mm)[DATA_OFFSET:DATA_OFFSET + capacity]
        self._np = np.ndarray((capacity,), dtype=np.uint8, buffer=mm, offset=DATA_OFFSET)

    @classmethod
    def create(cls, path: str, capacity: int) -> "Ring":
        # never an existing file, never through a symbolic link someone planted
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, DATA_OFFSET + capacity)
            mm = mmap.mmap(fd, DATA_OFFSET + capacity)
        finally:
            os.close(fd)
        return cls(path, mm, capacity)

    @classmethod
    def create_memfd(cls, name: str, capacity: int) -> "Ring":
        """A ring in anonymous shared memory (module doc); ``fd`` stays open (close-on-exec:
        pass it to a worker with ``pass_fds``) until ``close``."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, DATA_OFFSET + capacity)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                        fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            mm = mmap.mmap(fd, DATA_OFFSET + capacity)
        except BaseException:
            os.close(fd)
            raise
        return cls(None, mm, capacity, fd=fd)

    @property
    def address(self) -> str:
        """What ``attach`` takes, in a process that inherited ``fd`` (or the ring file's path)."""
        return f"{FD_PREFIX}{self.fd}" if self.fd is not None else str(self.path)

    @classmethod
    def attach(cls, where: str) -> "Ring":
        """Map the ring at ``where``: ``fd:N``, a descriptor this process inherited (it is
        closed once mapped), or the path of a ring file."""
        if where.startswith(FD_PREFIX):
            fd = int(where[len(FD_PREFIX):])
            path = None
        else:
            fd = os.open(where, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            path = where
        try:
            size = os.fstat(fd).st_size
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, mm, size - DATA_OFFSET)

    def get(self, word: int) -> int:
        return int(self.ctl[word])

    def set(self, word: int, value: int) -> None:
        self.ctl[word] = value

    def free_bytes(self) -> int:
        return self.capacity - (self.get(WRITE) - self.get(DURABLE))

    def put(self, pos: int, parts) -> int:
        """Copy ``parts`` (bytes-like) into the ring from logical ``pos``; returns the end.

        The caller has checked there is room; the cursor is not moved here.
        """
        cap = self.capacity
        data = self.data
        for part in parts:
            # a memoryview copy: the same memcpy as numpy's, without its fixed cost per call
            # (four parts per ADD record: most of a lone add's copy)
            src = memoryview(part).cast("B")
            n = len(src)
            if n == 0:
                continue
            start = pos % cap
            first = min(n, cap - start)
            data[start:start + first] = src[:first]
            if first < n:
                data[0:n - first] = src[first:]
            pos += n
        return pos

    def slices(self, start: int, end: int) -> list[memoryview]:
        """Memoryviews (one, or two when wrapping) of logical bytes [start, end)."""
        if end <= start:
            return []
        cap = self.capacity
        a = start % cap
        n = end - start
        if a + n <= cap:
            return [self.data[a:a + n]]
        return [self.data[a:cap], self.data[0:n - (cap - a)]]

    def close(self) -> None:
        # Views must go before the mapping can close; ignore "exported pointers" at exit.
        self.data.release()
        del self.ctl, self._np
        try:
            self._mm.close()
        except BufferError:
            pass
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Doorbell:
    """A wake-up from one worker to another of the same bookie, without ZeroMQ.

    A named pipe (FIFO) at ``path``, opened read-write and non-blocking by both sides (so
    neither open waits for the other, and either side may restart on its own).  The ringer
    writes one byte; the rung polls ``fileno()`` and ``drain``s.  A full pipe already holds a
    wake-up, so ``ring`` never blocks.  A ZeroMQ PUSH/PULL pair over ipc costs two more thread
    hand-offs per wake-up (each side's I/O thread); on the lone-add path there are two wake-ups.
    """

    def __init__(self, path: str):
        try:
            os.mkfifo(path, 0o600)
        except FileExistsError:
            pass
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def fileno(self) -> int:
        return self.fd

    def ring(self) -> None:
        try:
            os.write(self.fd, b"\0")
        except BlockingIOError:
            pass

    def drain(self) -> None:
        drain_fd(self.fd)

    def close(self) -> None:
        os.close(self.fd)


def drain_fd(fd: int) -> None:
    """Read a non-blocking descriptor empty (a doorbell's, or a signal wakeup pipe's)."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
