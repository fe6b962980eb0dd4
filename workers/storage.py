"""Ledger storage: interleaved entry logs and the LMDB index.

Entry log format
----------------
Files ``{log_id:08x}.log`` in the ledger directories; ids are unique across all of them and
grow by one.  A ledger's entries go to directory ``ledger_id % len(ledgerDirectories)`` (one
current log per directory).  A 64-byte header, then
ADD_BATCH records (bookie.workers.records) exactly as they went through the ring and the
journal, then zeros when preallocated::

    0   8  magic     b"BKELOG01"
    8   4  log_id    u32
    12  4  crc32 of bytes 0..12
    16  48 zero

An entry's bytes are found through the index, never by scanning; the log is rolled once it
passes ``logSizeLimit``.  Entry logs are synced at checkpoints only: until then the journal
holds what they hold.

Index (LMDB environment ``index`` in the first index directory)
-----------------------------------------------------------------
``entries``  key ledger_id u64 BE | entry_id u64 BE  ->  log_id u32 | offset u64 | length u32 (LE)
``ledgers``  key ledger_id u64 BE  ->  orjson {"key": hex master key, "fenced": bool, "lac": int}
``deleted``  key ledger_id u64 BE  ->  b"" (tombstone: the GC deleted the ledger; ids are never
             reused, so it is kept for good and nothing of the ledger is stored again)
``purged``   key ledger_id u64 BE  ->  b"" (the GC purged a ledger the metadata store never created:
             entries, record and its bytes in the log maps gone, no tombstone; the add worker
             takes the marker in: forgets what it cached of the ledger and moves the marker to
             ``purged_at``, so that the ledger that later gets the id starts clean)
``purged_at`` key ledger_id u64 BE ->  u64 BE journal position where the add worker took the purge
             in: replay skips the ledger's records that start before it (they were placed on
             the squatter's binding); forgotten once LastLogMark has passed it
``logs``     key log_id u32 BE     ->  orjson {ledger_id: bytes stored} (the log's ledger map)
``meta``     b"current_logs" -> orjson list of the logs being written (GC leaves them alone)
             b"next_log_id" -> u32 BE, the next entry log id to hand out (``allocate_log_id``:
             the add worker's rolls and the GC worker's compaction share one sequence)
             b"compaction" -> orjson, the compaction step in progress (bookie.workers.compaction)

Keys are big-endian so that LMDB's byte order is (ledger, entry) order: the last entry of a
ledger is one cursor step back from the first key of the next ledger.
"""

from __future__ import annotations

import collections
import os
import struct
import threading
import zlib

import lmdb
import numpy as np
import orjson

from bookie.workers.journal import fsync_dir
from bookie.workers.ledgers import LedgerTable, StoredLedger

LOG_MAGIC = b"BKELOG01"
LOG_HEADER_SIZE = 64
LOC = struct.Struct("<IQI")
LOC_DTYPE = np.dtype([("log", "<u4"), ("off", "<u8"), ("len", "<u4")])
KEY_DTYPE = np.dtype([("ledger", ">u8"), ("entry", ">u8")])
LEDGER_KEY = struct.Struct(">Q")
LOG_KEY = struct.Struct(">I")


_ENTRY_KEY = struct.Struct(">QQ")


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _ENTRY_KEY.pack(ledger_id, entry_id)


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


def open_index(directory: str, map_size: int, readonly: bool = False) -> lmdb.Environment:
    """Open the index environment in the calling process (never carry one across fork).

    sync=False: a commit reaches the page cache (enough for every other process of this
    bookie, and for process crashes); the checkpoint calls ``env.sync(True)`` before it
    persists LastLogMark, and the journal covers whatever a machine crash takes back.
    """
    path = os.path.join(directory, "index")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return lmdb.open(path, map_size=map_size, max_dbs=8, sync=False, metasync=False,
                     readonly=readonly, max_readers=64, lock=True, mode=0o600)


class Index:
    def __init__(self, env: lmdb.Environment):
        self.env = env
        self.entries = env.open_db(b"entries")
        self.ledgers = env.open_db(b"ledgers")
        self.deleted = env.open_db(b"deleted")
        try:
            self.purged = env.open_db(b"purged")
            self.purged_at = env.open_db(b"purged_at")
        except lmdb.Error:  # an index from before purges, opened read-only: it holds no marker
            self.purged = self.purged_at = None
        self.logs = env.open_db(b"logs")
        self.meta = env.open_db(b"meta")

    # -- ledgers ---------------------------------------------------------------------------------
    def get_ledger(self, txn, ledger_id: int) -> dict | None:
        raw = txn.get(LEDGER_KEY.pack(ledger_id), db=self.ledgers)
        return None if raw is None else orjson.loads(raw)

    def put_ledger(self, txn, ledger_id: int, state: dict) -> None:
        txn.put(LEDGER_KEY.pack(ledger_id), orjson.dumps(state), db=self.ledgers)

    def is_deleted(self, txn, ledger_id: int) -> bool:
        return txn.get(LEDGER_KEY.pack(ledger_id), db=self.deleted) is not None

    def ledger_ids(self, txn) -> list[int]:
        with txn.cursor(db=self.ledgers) as cur:
            return [LEDGER_KEY.unpack(k)[0] for k in cur.iternext(keys=True, values=False)]

    # -- entries ---------------------------------------------------------------------------------
    def put_locations(self, txn, ledger_id: int, entry_ids: np.ndarray, log_id: int,
                      offsets: np.ndarray, lengths: np.ndarray) -> None:
        n = len(entry_ids)
        keys = np.empty(n, dtype=KEY_DTYPE)
        keys["ledger"] = ledger_id
        keys["entry"] = entry_ids
        locs = np.empty(n, dtype=LOC_DTYPE)
        locs["log"] = log_id
        locs["off"] = offsets
        locs["len"] = lengths
        kb = keys.tobytes()
        vb = locs.tobytes()
        items = [(kb[i * 16:i * 16 + 16], vb[i * 16:i * 16 + 16]) for i in range(n)]
        with txn.cursor(db=self.entries) as cur:
            cur.putmulti(items, dupdata=False, overwrite=True, append=False)

    def locate(self, txn, ledger_id: int, entry_id: int):
        raw = txn.get(entry_key(ledger_id, entry_id), db=self.entries)
        return None if raw is None else LOC.unpack(raw)

    def locate_range(self, txn, ledger_id: int, first: int, max_count: int):
        """Locations of consecutive entries from ``first`` (stops at the first gap)."""
        out = []
        with txn.cursor(db=self.entries) as cur:
            if not cur.set_key(entry_key(ledger_id, first)):
                return out
            expect = first
            for k, v in cur.iternext():
                lid, eid = struct.unpack(">QQ", k)
                if lid != ledger_id or eid != expect:
                    break
                out.append(LOC.unpack(v))
                expect += 1
                if len(out) >= max_count:
                    break
        return out

    def locate_strided(self, txn, ledger_id: int, first: int, max_count: int, stride: int):
        """Locations of entries first, first + stride, ... (stops at the first one missing)."""
        out = []
        get, db, unpack, pack = txn.get, self.entries, LOC.unpack, _ENTRY_KEY.pack
        last = min(first + (max_count - 1) * stride, (1 << 63) - 1)
        for eid in range(first, last + 1, stride):
            v = get(pack(ledger_id, eid), db=db)
            if v is None:
                break
            out.append(unpack(v))
        return out

    def last_entry(self, txn, ledger_id: int):
        """(entry_id, location) of the ledger's highest entry, or None."""
        with txn.cursor(db=self.entries) as cur:
            if ledger_id + 1 < (1 << 64) and cur.set_range(entry_key(ledger_id + 1, 0)):
                if not cur.prev():
                    return None
            elif not cur.last():
                return None
            k, v = cur.item()
            lid, eid = struct.unpack(">QQ", k)
            if lid != ledger_id:
                return None
            return eid, LOC.unpack(v)

    def delete_ledger(self, txn, ledger_id: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` entries of a ledger, and its record once none are left.

        The first call leaves the ledger's tombstone: from that transaction on, the add worker
        stores nothing more of it (see bookie.workers.ledgers, rule 5).

        Returns how many entries were deleted (call again while it returns ``limit``).
        """
        txn.put(LEDGER_KEY.pack(ledger_id), b"", db=self.deleted)
        return self.delete_entries(txn, ledger_id, limit, drop_record=True)

    def purge_markers(self, txn) -> set[int]:
        """The ledgers the GC purged whose markers the add worker has not consumed yet."""
        if self.purged is None:
            return set()
        with txn.cursor(db=self.purged) as cur:
            return {LEDGER_KEY.unpack(k)[0] for k in cur.iternext(keys=True, values=False)}

    def purges_taken_in(self, txn) -> dict[int, int]:
        """ledger_id -> journal position where the add worker took the ledger's purge in."""
        if self.purged_at is None:
            return {}
        with txn.cursor(db=self.purged_at) as cur:
            return {LEDGER_KEY.unpack(k)[0]: LEDGER_KEY.unpack(v)[0] for k, v in cur}

    def delete_entries(self, txn, ledger_id: int, limit: int, drop_record: bool) -> int:
        """Delete up to ``limit`` entries of a ledger, and its record too when ``drop_record``
        and none are left.  Returns how many entries were deleted."""
        n = 0
        with txn.cursor(db=self.entries) as cur:
            if cur.set_range(entry_key(ledger_id, 0)):
                while n < limit:
                    k = cur.key()
                    if not k or LEDGER_KEY.unpack(k[:8])[0] != ledger_id:
                        break
                    if not cur.delete():
                        break
                    n += 1
        if n < limit and drop_record:
            txn.delete(LEDGER_KEY.pack(ledger_id), db=self.ledgers)
        return n

    # -- entry-log maps --------------------------------------------------------------------------
    def add_to_log_map(self, txn, log_id: int, counts: dict[int, int]) -> None:
        key = LOG_KEY.pack(log_id)
        raw = txn.get(key, db=self.logs)
        cur = orjson.loads(raw) if raw else {}
        for lid, nbytes in counts.items():
            cur[str(lid)] = cur.get(str(lid), 0) + nbytes
        txn.put(key, orjson.dumps(cur), db=self.logs)

    def log_maps(self, txn) -> dict[int, dict[int, int]]:
        out = {}
        with txn.cursor(db=self.logs) as cur:
            for k, v in cur:
                out[LOG_KEY.unpack(k)[0]] = {int(a): b for a, b in orjson.loads(v).items()}
        return out

    def set_current_logs(self, txn, log_ids) -> None:
        txn.put(b"current_logs", orjson.dumps(sorted(log_ids)), db=self.meta)

    def current_logs(self, txn) -> set[int]:
        raw = txn.get(b"current_logs", db=self.meta)
        return set(orjson.loads(raw)) if raw else set()

    def allocate_log_id(self, directories: list[str]) -> int:
        """A new entry log id, never handed out before (one short write transaction).

        The add worker (rolling) and the GC worker (compaction) create logs from different
        processes; LMDB's one writer at a time makes this the shared sequence.  The files on
        disk are a floor too: a counter lost with an unsynced commit is never behind them.
        """
        floor = max((i for d in directories for i in list_logs(d)), default=0) + 1
        with self.env.begin(write=True) as txn:
            raw = txn.get(b"next_log_id", db=self.meta)
            log_id = max(floor, LOG_KEY.unpack(raw)[0] if raw else 0)
            txn.put(b"next_log_id", LOG_KEY.pack(log_id + 1), db=self.meta)
        return log_id


class LedgerStorage:
    """The add worker's writes: entries to the entry log at once, their index locations and the
    ledger table's changes in one LMDB write transaction per ``commit``.  Replay and the live
    path both store through it."""

    def __init__(self, index: Index, logs: "EntryLogs", key_salt: bytes = b""):
        self.index = index
        self.logs = logs
        self.table = LedgerTable(self.load_ledger, key_salt)  # key_salt: layout.key_salt
        # bytes stored per (log, ledger) since the last commit: the logs' ledger maps
        self.log_counts: dict[int, dict[int, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
        self._batches: list = []  # (ledger_id, entry_ids, log_id, offsets, lengths)
        self.entries_total = 0
        self.purged_at: dict[int, int] = {}  # ledger_id -> position the purge was taken in at

    def load_purges(self) -> None:
        """Read the purges taken in (before a replay: see ``placed_before_purge``)."""
        with self.index.env.begin() as txn:
            self.purged_at = self.index.purges_taken_in(txn)

    def placed_before_purge(self, ledger_id: int, position: int) -> bool:
        """True for a journal record of a purged ledger placed before the purge was taken in:
        placed on the squatter's binding, so replay must not bring it back."""
        at = self.purged_at.get(ledger_id)
        return at is not None and position < at

    def forget_purges_before(self, mark: int) -> None:
        """LastLogMark is now ``mark``: no replay reads a record before it again."""
        with self.index.env.begin(write=True) as txn:
            for ledger_id, at in self.index.purges_taken_in(txn).items():
                if at <= mark:
                    txn.delete(LEDGER_KEY.pack(ledger_id), db=self.index.purged_at)
        self.purged_at = {lid: at for lid, at in self.purged_at.items() if at > mark}

    def load_ledger(self, ledger_id: int) -> StoredLedger | None:
        with self.index.env.begin() as txn:
            raw = self.index.get_ledger(txn, ledger_id)
            if raw is None and self.index.is_deleted(txn, ledger_id):
                return StoredLedger.tombstone()
        return None if raw is None else StoredLedger.from_dict(raw)

    def store_batch(self, ledger_id: int, parts, size: int, data_offset: int,
                    entry_ids: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> None:
        """Append one ADD_BATCH record to the entry log; its index update waits for commit().

        ``offsets`` are the entries' offsets inside the record's data.
        """
        elog = self.logs.writer_for(ledger_id)
        if elog.needs_roll(size):
            elog.roll()
            self._batches.append(("current_logs", self.logs.current_ids()))
        start = elog.append(parts)
        self._batches.append((ledger_id, entry_ids, elog.log_id, offsets + (start + data_offset), lengths))
        self.log_counts[elog.log_id][ledger_id] += int(lengths.sum())
        self.entries_total += len(entry_ids)

    def _flush_log_counts(self) -> None:
        for log_id, counts in self.log_counts.items():
            self._batches.append(("log_map", log_id, dict(counts)))
        self.log_counts.clear()

    def commit(self, position: int | None = None) -> set[int]:
        """One LMDB write transaction for everything stored since the last commit.

        Ledgers the GC deleted meanwhile (a tombstone seen inside this very transaction, which
        LMDB orders against the GC's) get nothing written: their entries stay unindexed and the
        table marks them deleted.  Ledgers the GC purged (never created in the metadata store;
        a purge marker) get nothing written either, and the table forgets them: the next
        request for the id starts a new ledger.  When nothing is pending, one read transaction
        looks for purge markers, so an idle add worker takes a purge in at its next iteration.

        Args:
            position: the journal position up to which records have been placed (the ring's
                WRITE; a replay's end).  A purge is taken in only with one: it is recorded
                (``purged_at``) so that a replay skips the records placed before it.  Without
                one the purged ledgers' batches are still dropped, the markers kept.

        Returns:
            the ids of those ledgers (their pending answers must say NO_LEDGER).
        """
        table = self.table
        if not self._batches and not table.dirty and not self.log_counts:
            with self.index.env.begin() as txn:  # idle: only the GC's purges to take in
                if not txn.stat(self.index.purged)["entries"]:
                    return set()
        self._flush_log_counts()
        with self.index.env.begin(write=True) as txn:
            touched = {item[0] for item in self._batches if isinstance(item[0], int)} | table.dirty
            gone = {lid for lid in touched if self.index.is_deleted(txn, lid)}
            # Purged by the GC (never created in the store): everything placed for them so
            # far was placed on the squatter's binding; none of it is stored, and the markers
            # go in this transaction, with the cached binding right after it.
            purged = self.index.purge_markers(txn)
            skip = gone | purged
            for item in self._batches:
                if item[0] == "current_logs":
                    self.index.set_current_logs(txn, item[1])
                elif item[0] == "log_map":
                    # a purged ledger's bytes are dead: out of the map (which is written
                    # even if empty, so that the GC knows the log and may delete it)
                    self.index.add_to_log_map(txn, item[1], {lid: n for lid, n in item[2].items()
                                                             if lid not in purged})
                elif item[0] not in skip:
                    self.index.put_locations(txn, *item)
            for lid in table.dirty - skip:
                self.index.put_ledger(txn, lid, table.ledgers[lid].as_dict())
            if position is not None:
                for lid in purged:
                    txn.delete(LEDGER_KEY.pack(lid), db=self.index.purged)
                    txn.put(LEDGER_KEY.pack(lid), LEDGER_KEY.pack(position), db=self.index.purged_at)
        self._batches.clear()
        table.dirty.clear()
        for lid in gone:
            table.mark_deleted(lid)
        if position is not None:
            for lid in purged:
                table.forget(lid)
                self.purged_at[lid] = position
        return skip


class EntryLogWriter:
    """Appends ADD_BATCH records to the current entry log; rolls at ``size_limit``."""

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
        self._directories = list(directories)
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

    def prune(self) -> None:
        """Close cached logs that were deleted (GC, compaction): an open fd would keep their
        disk space taken.  Only a reader with an index snapshot older than the deletion could
        still want one, and the GC waits for those to end before it deletes (compaction.py)."""
        for log_id, fd in list(self._fds.items()):
            try:
                gone = os.fstat(fd).st_nlink == 0
            except OSError:
                gone = True
            if gone:
                self.forget(log_id)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
