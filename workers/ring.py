"""The shared-memory ring between the add worker and the journal worker.

Theory of operation
-------------------
One file, created and unlinked by the supervisor alone (workers only map it, so no resource
tracker ever unlinks it behind our back).  It lives in a directory of its own under /dev/shm
that the supervisor makes with a random name and mode 0700 (``private_dir``), and is created
there with ``O_EXCL | O_NOFOLLOW`` and mode 0600: another local user can neither guess, plant,
link nor open it.  Its first page holds the control words; the rest is the data ring.

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

Publication order: write the data, then store the cursor; a reader loads the cursor first,
then reads the data up to it.  Each worker then rings the other's ``Doorbell`` (a named pipe
in the bookie's run directory): a wake-up only, never a carrier of facts, so a lost or extra
ring costs at most a poll timeout or a spurious look at the cursors.  The add worker never writes over bytes the journal has not made
durable: a record may be placed only while ``WRITE + size - DURABLE <= capacity``.
"""

from __future__ import annotations

import mmap
import os
import tempfile

import numpy as np

PAGE = 4096
DATA_OFFSET = PAGE

WRITE, DURABLE, BASE, READONLY, JOURNAL_EPOCH, ADD_EPOCH, NO_ROOM = range(7)


def private_dir(prefix: str) -> str:
    """A new directory for the ring: in /dev/shm (memory) when there is one, else the temporary
    directory; random name, mode 0700, made by ``mkdir`` (fails rather than reuse a planted one)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return tempfile.mkdtemp(prefix=prefix, suffix=".ring", dir=base)


class Ring:
    """A mapping of the ring file.  ``create`` (supervisor) or ``attach`` (workers)."""

    def __init__(self, path: str, mm: mmap.mmap, capacity: int):
        self.path = path
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
    def attach(cls, path: str) -> "Ring":
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
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
        for part in parts:
            src = np.frombuffer(part, dtype=np.uint8)
            n = len(src)
            if n == 0:
                continue
            start = pos % cap
            first = min(n, cap - start)
            self._np[start:start + first] = src[:first]
            if first < n:
                self._np[0:n - first] = src[first:]
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
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        os.close(self.fd)
