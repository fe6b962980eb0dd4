"""Entry logs: the interleaved files that hold every ADD_BATCH record of a ledger directory.

Entry log format
----------------
Files ``{log_id:08x}.log`` in the ledger directories; ids are unique across all of them and
grow by one.  A ledger's entries go to directory ``ledger_id % len(ledgerDirectories)`` (one
current log per directory).  A 64-byte header, then
records (bookie.storage.records) exactly as they went through the ring and the
journal, then zeros when preallocated::

    0   8  magic     b"BKELOG01"
    8   4  log_id    u32
    12  4  crc32 of bytes 0..12
    16  48 zero

An entry's bytes are found through the index (bookie.storage.index), never by scanning; the log
is rolled once it passes ``logSizeLimit``.  Entry logs are synced at checkpoints only: until then
the journal holds what they hold.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from typing import TYPE_CHECKING

from bookie.storage.journal import fsync_dir

if TYPE_CHECKING:
    from bookie.storage.index import Index

LOG_MAGIC = b"BKELOG01"
LOG_HEADER_SIZE = 64


def log_name(log_id: int) -> str:
    return f"{log_id:08x}.log"


def list_logs(directory: str) -> list[int]:
    out = []
    for name in os.listdir(directory):
        if name.endswith(".log") and len(name) == 12:
            try:
                out.append(int(name[:8], 16))
            except ValueError:
                pass
    return sorted(out)


class EntryLogWriter:
    """Appends records to the current entry log; rolls at ``size_limit``."""

    def __init__(self, directory: str, size_limit: int, preallocate: bool, new_log_id):
        self.directory = directory
        self.size_limit = size_limit
        self.preallocate = preallocate
        self.log_id = 0
        self._new_log_id = new_log_id  # ids are unique across every ledger directory
        self._fd = -1
        self.offset = 0
        self._unsynced: list[int] = []  # rolled-away logs not yet synced (closed once synced)
        self._lock = threading.Lock()

    def needs_roll(self, incoming: int) -> bool:
        return self._fd < 0 or self.offset + incoming > self.size_limit

    def roll(self) -> None:
        """Open the next log; the current one is synced and closed at the next sync()."""
        log_id = self._new_log_id()
        fd = create_log(self.directory, log_id,
                        min(self.size_limit, 64 * 1024 * 1024) if self.preallocate else 0)
        with self._lock:
            if self._fd >= 0:
                self._unsynced.append(self._fd)
            self._fd = fd
        self.log_id = log_id
        self.offset = LOG_HEADER_SIZE

    def append(self, parts) -> int:
        """Write one record's parts at the end; returns its start offset in the log."""
        start = self.offset
        total = sum(len(p) for p in parts)
        n = os.pwritev(self._fd, list(parts), start)
        if n != total:
            data = b"".join(bytes(p) for p in parts)
            while n < total:
                n += os.pwrite(self._fd, data[n:], start + n)
        self.offset = start + total
        return start

    def sync(self) -> None:
        """fdatasync everything written so far (checkpoint step 1).

        May run on the checkpoint thread while the add path appends: rolled-away logs are
        taken off the list atomically; the current fd is only synced, never closed, here.
        """
        with self._lock:  # one snapshot of (rolled logs, current log) against roll()
            rolled, self._unsynced = self._unsynced, []
            fd = self._fd
        for fd_old in rolled:
            os.fdatasync(fd_old)
            os.close(fd_old)
        if fd >= 0:
            os.fdatasync(fd)

    def close(self) -> None:
        self.sync()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def create_log(directory: str, log_id: int, preallocate_bytes: int = 0) -> int:
    """Create entry log ``log_id`` with its header, its directory fsynced; returns its fd."""
    path = os.path.join(directory, log_name(log_id))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        head = LOG_MAGIC + struct.pack("<I", log_id)
        head += struct.pack("<I", zlib.crc32(head))
        os.pwrite(fd, head.ljust(LOG_HEADER_SIZE, b"\0"), 0)
        if preallocate_bytes:
            try:
                os.posix_fallocate(fd, 0, preallocate_bytes)
            except OSError:
                pass
        fsync_dir(directory)
    except BaseException:
        os.close(fd)
        raise
    return fd


class EntryLogs:
    """The entry logs of every ledger directory: one writer per directory, ledgers mapped to
    directories by id, log ids unique across directories.

    With ``index`` (the bookie's add worker), log ids come from ``Index.allocate_log_id``, the
    sequence the GC worker's compaction shares; without it (tools, tests) from a counter here.
    """

    def __init__(self, directories: list[str], size_limit: int, preallocate: bool,
                 index: "Index | None" = None):
        existing = [i for d in directories for i in list_logs(d)]
        self._next = max(existing, default=0) + 1
        self._directories = self.directories = list(directories)
        self._index = index
        self.writers = [EntryLogWriter(d, size_limit, preallocate, self._new_log_id)
                        for d in directories]

    def _new_log_id(self) -> int:
        if self._index is not None:
            return self._index.allocate_log_id(self._directories)
        log_id = self._next
        self._next += 1
        return log_id

    def writer_for(self, ledger_id: int) -> EntryLogWriter:
        return self.writers[ledger_id % len(self.writers)]

    def current_ids(self) -> list[int]:
        return [w.log_id for w in self.writers if w.log_id]

    def sync(self) -> None:
        for w in self.writers:
            w.sync()

    def close(self) -> None:
        for w in self.writers:
            w.close()


def find_log(directories: list[str], log_id: int) -> str:
    """Path of an entry log, whichever ledger directory holds it."""
    name = log_name(log_id)
    for d in directories:
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"entry log {name} is in none of {', '.join(directories)}")


class EntryLogReader:
    """Reads entry bytes by location; keeps a small cache of open log files."""

    def __init__(self, directories: list[str], max_open: int = 64):
        self.directories = directories
        self.max_open = max_open
        self._fds: dict[int, int] = {}

    def _fd(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        if fd is None:
            if len(self._fds) >= self.max_open:
                old_id, old_fd = next(iter(self._fds.items()))
                del self._fds[old_id]
                os.close(old_fd)
            fd = os.open(find_log(self.directories, log_id), os.O_RDONLY)
            self._fds[log_id] = fd
        return fd

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        data = os.pread(self._fd(log_id), length, offset)
        if len(data) != length:
            raise OSError(f"entry log {log_name(log_id)}: short read at {offset}")
        return data

    def read_run(self, locs) -> list[bytes]:
        """Read several locations, merging neighbours in one log into one pread."""
        out: list[bytes] = []
        i = 0
        n = len(locs)
        while i < n:
            log_id, off, ln = locs[i]
            j = i + 1
            end = off + ln
            while j < n and locs[j][0] == log_id and locs[j][1] >= end and locs[j][1] - end < 4096 \
                    and locs[j][1] + locs[j][2] - off <= 8 * 1024 * 1024:
                end = locs[j][1] + locs[j][2]
                j += 1
            if j == i + 1:
                out.append(self.read(log_id, off, ln))
            else:
                blob = self.read(log_id, off, end - off)
                mv = memoryview(blob)
                for k in range(i, j):
                    _, o, l2 = locs[k]
                    out.append(mv[o - off:o - off + l2])
            i = j
        return out

    def forget(self, log_id: int) -> None:
        fd = self._fds.pop(log_id, None)
        if fd is not None:
            os.close(fd)

    def prune(self) -> list[int]:
        """Close cached logs that were deleted (GC, compaction): an open fd would keep their
        disk space taken.  Only a reader with an index snapshot older than the deletion could
        still want one, and the GC waits for those to end before it deletes (compaction.py).
        Returns the ids of the logs closed."""
        closed = []
        for log_id, fd in list(self._fds.items()):
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:
                self.forget(log_id)
                closed.append(log_id)
        return closed

    def gone(self, log_id: int) -> bool:
        """Whether entry log ``log_id`` was deleted (its open fd unlinked, or no file)."""
        fd = self._fds.get(log_id)
        if fd is not None:
            try:
                return os.fstat(fd).st_nlink == 0
            except OSError:
                return True
        try:
            find_log(self.directories, log_id)
        except FileNotFoundError:
            return True
        return False

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
