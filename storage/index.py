"""The entry -> location index: one LMDB environment, a cache of the entry logs.

Index (LMDB environment ``index`` in the first index directory)
-----------------------------------------------------------------
``entries``  key ledger_id u64 BE | entry_id u64 BE  ->  log_id u32 | offset u64 | length u32 (LE)
``ledgers``  key ledger_id u64 BE  ->  orjson ``StoredLedger.as_dict`` (bookie.core.ledgers): {"key":
             hex stored key, "kdf", "fenced": bool, "lac": int, "own": hex owner check}
``deleted``  key ledger_id u64 BE  ->  b"" (tombstone: the GC deleted the ledger; ids are never
             reused, so it is kept for good and nothing of the ledger is stored again; the
             durable list of deletes, bookie.storage.deletes, outlives the index)
``logs``     key log_id u32 BE     ->  orjson {ledger_id: bytes stored} (the log's ledger map)
``meta``     b"current_logs" -> orjson list of the logs being written (GC leaves them alone)
             b"next_log_id" -> u32 BE, the next entry log id to hand out (``allocate_log_id``:
             the add worker's rolls and the GC worker's compaction share one sequence)
             b"compaction" -> orjson, the compaction step in progress (bookie.storage.compaction)

Keys are big-endian so that LMDB's byte order is (ledger, entry) order: the last entry of a
ledger is one cursor step back from the first key of the next ledger.
"""


from __future__ import annotations

import os
import struct

import lmdb
import numpy as np
import orjson

from bookie.storage.entrylog import list_logs

_LOC = struct.Struct("<IQI")
_LOC_DTYPE = np.dtype([("log", "<u4"), ("off", "<u8"), ("len", "<u4")])
_KEY_DTYPE = np.dtype([("ledger", ">u8"), ("entry", ">u8")])
_V16 = np.dtype("V16")  # a key or a location as one 16-byte record
SMALL_BATCH = 16  # ``put_locations`` of fewer entries packs them with struct
assert _KEY_DTYPE.itemsize == _LOC_DTYPE.itemsize == _V16.itemsize
_LEDGER_KEY = struct.Struct(">Q")
_LOG_KEY = struct.Struct(">I")
_LOG_ID_LE = struct.Struct("<I")  # a location's first field


_ENTRY_KEY = struct.Struct(">QQ")


def open_index(directory: str, map_size: int, readonly: bool = False) -> lmdb.Environment:
    """Open the index environment in the calling process (never carry one across fork).

    sync=False: a commit reaches the page cache (enough for every other process of this
    bookie, and for process crashes); the checkpoint calls ``env.sync(True)`` before it
    persists LastLogMark, and the journal covers whatever a machine crash takes back.
    """
    return open_index_at(os.path.join(directory, "index"), map_size, readonly)


def open_index_at(path: str, map_size: int, readonly: bool = False) -> lmdb.Environment:
    """Open (create) an index environment at ``path`` itself (a rebuild's new one)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return lmdb.open(path, map_size=map_size, max_dbs=8, sync=False, metasync=False,
                     readonly=readonly, max_readers=64, lock=True, mode=0o600)


MAX_ENTRY_ID = (1 << 63) - 1
_CURRENT_LOGS = b"current_logs"
_NEXT_LOG_ID = b"next_log_id"
_COMPACTION = b"compaction"
_COMPACTION_SKIPPED = b"compaction_skipped"


class Index:
    """The one owner of the index's format: every database handle and key codec is private to
    this class; the add worker, the read worker, the GC, compaction, rebuild, check and inspect
    call its named operations, each inside a transaction they begin with ``begin``."""

    def __init__(self, env: lmdb.Environment):
        self.env = env
        self._entries = env.open_db(b"entries")
        self._ledgers = env.open_db(b"ledgers")
        self._deleted = env.open_db(b"deleted")
        self._logs = env.open_db(b"logs")
        self._meta = env.open_db(b"meta")

    # -- transactions ----------------------------------------------------------------------------
    def begin(self, write: bool = False):
        """A transaction (use it in a ``with``): a read snapshot sees every commit made before
        this call; a write one holds the environment's single writer until it ends."""
        return self.env.begin(write=write, buffers=False)

    def sync(self) -> None:
        """Make every committed transaction durable (the checkpoint's and compaction's step)."""
        self.env.sync(True)

    def has_reader_older_than(self, txn_id: int) -> bool:
        """Whether some process still holds a read snapshot older than write ``txn_id``
        (slots of dead processes are cleared first)."""
        self.env.reader_check()
        for line in self.env.readers().splitlines()[1:]:
            parts = line.split()
            if len(parts) == 3 and parts[2].isdigit() and int(parts[2]) < txn_id:
                return True
        return False

    # -- ledgers ---------------------------------------------------------------------------------
    def get_ledger(self, txn, ledger_id: int) -> dict | None:
        raw = txn.get(_LEDGER_KEY.pack(ledger_id), db=self._ledgers)
        return None if raw is None else orjson.loads(raw)

    def has_record(self, txn, ledger_id: int) -> bool:
        return txn.get(_LEDGER_KEY.pack(ledger_id), db=self._ledgers) is not None

    def put_ledger(self, txn, ledger_id: int, state: dict) -> None:
        txn.put(_LEDGER_KEY.pack(ledger_id), orjson.dumps(state), db=self._ledgers)

    def is_deleted(self, txn, ledger_id: int) -> bool:
        return txn.get(_LEDGER_KEY.pack(ledger_id), db=self._deleted) is not None

    def ledger_ids(self, txn) -> list[int]:
        with txn.cursor(db=self._ledgers) as cur:
            return [_LEDGER_KEY.unpack(k)[0] for k in cur.iternext(keys=True, values=False)]

    def deleted_ids(self, txn) -> set[int]:
        """Every ledger with a tombstone."""
        with txn.cursor(db=self._deleted) as cur:
            return {_LEDGER_KEY.unpack(k)[0] for k in cur.iternext(keys=True, values=False)}

    def mark_deleted(self, txn, ledger_id: int) -> None:
        """The ledger's tombstone alone (a rebuild writing what it found; the GC deletes with
        ``delete_ledger``)."""
        txn.put(_LEDGER_KEY.pack(ledger_id), b"", db=self._deleted)

    # -- entries ---------------------------------------------------------------------------------
    def put_locations(self, txn, ledger_id: int, entry_ids: np.ndarray, log_id: int,
                      offsets: np.ndarray, lengths: np.ndarray) -> None:
        n = len(entry_ids)
        if n < SMALL_BATCH:  # a few entries: struct beats numpy's fixed cost per call
            items = [(_ENTRY_KEY.pack(ledger_id, e), _LOC.pack(log_id, o, ln)) for e, o, ln
                     in zip(entry_ids.tolist(), offsets.tolist(), lengths.tolist())]
            with txn.cursor(db=self._entries) as cur:
                cur.putmulti(items, dupdata=False, overwrite=True, append=False)
            return
        keys = np.empty(n, dtype=_KEY_DTYPE)
        keys["ledger"] = ledger_id
        keys["entry"] = entry_ids
        locs = np.empty(n, dtype=_LOC_DTYPE)
        locs["log"] = log_id
        locs["off"] = offsets
        locs["len"] = lengths
        # each record as bytes through numpy's void view (a C loop): a slice per key and value
        # in Python was 12% of the add worker at 10,000 adds in flight (3x slower, measured)
        items = zip(keys.view(_V16).tolist(), locs.view(_V16).tolist())
        with txn.cursor(db=self._entries) as cur:
            cur.putmulti(items, dupdata=False, overwrite=True, append=False)

    def locate(self, txn, ledger_id: int, entry_id: int):
        raw = txn.get(_ENTRY_KEY.pack(ledger_id, entry_id), db=self._entries)
        return None if raw is None else _LOC.unpack(raw)

    def locate_range(self, txn, ledger_id: int, first: int, max_count: int):
        """Locations of consecutive entries from ``first`` (stops at the first gap)."""
        out = []
        with txn.cursor(db=self._entries) as cur:
            if not cur.set_key(_ENTRY_KEY.pack(ledger_id, first)):
                return out
            expect = first
            for k, v in cur.iternext():
                lid, eid = struct.unpack(">QQ", k)
                if lid != ledger_id or eid != expect:
                    break
                out.append(_LOC.unpack(v))
                expect += 1
                if len(out) >= max_count:
                    break
        return out

    def locate_strided(self, txn, ledger_id: int, first: int, max_count: int, stride: int):
        """Locations of entries first, first + stride, ... (stops at the first one missing)."""
        out = []
        get, db, unpack, pack = txn.get, self._entries, _LOC.unpack, _ENTRY_KEY.pack
        last = min(first + (max_count - 1) * stride, (1 << 63) - 1)
        for eid in range(first, last + 1, stride):
            v = get(pack(ledger_id, eid), db=db)
            if v is None:
                break
            out.append(unpack(v))
        return out

    def entries_of(self, txn, ledger_id: int, first: int = 0, last: int = MAX_ENTRY_ID):
        """(entry_id, (log_id, offset, length)) of the ledger's indexed entries first..last,
        ascending (a striped ledger's bookie holds only its share: ids may skip)."""
        with txn.cursor(db=self._entries) as cur:
            if not cur.set_range(_ENTRY_KEY.pack(ledger_id, max(first, 0))):
                return
            for k, v in cur:
                lid, entry_id = _ENTRY_KEY.unpack(k)
                if lid != ledger_id or entry_id > last:
                    return
                yield entry_id, _LOC.unpack(v)

    def entry_count(self, txn, ledger_id: int) -> int:
        """How many entries of the ledger are indexed."""
        n = 0
        with txn.cursor(db=self._entries) as cur:
            if cur.set_range(_ENTRY_KEY.pack(ledger_id, 0)):
                for k in cur.iternext(keys=True, values=False):
                    if _LEDGER_KEY.unpack(k[:8])[0] != ledger_id:
                        break
                    n += 1
        return n

    def iter_locations(self, txn):
        """(ledger_id, entry_id, (log_id, offset, length)) of every indexed entry, in (ledger,
        entry) order."""
        with txn.cursor(db=self._entries) as cur:
            for k, v in cur:
                lid, entry_id = _ENTRY_KEY.unpack(k)
                yield lid, entry_id, _LOC.unpack(v)

    def locations_in_log(self, txn, ledger_id: int, log_id: int) -> list[tuple[int, int, int]]:
        """(entry_id, offset, length) of the ledger's entries indexed in ``log_id``, ascending
        entry id."""
        return [(eid, off, ln) for eid, (lg, off, ln) in self.entries_of(txn, ledger_id)
                if lg == log_id]

    def move_locations(self, txn, old_log_id: int, new_log_id: int, moves) -> list[bool]:
        """Compaction's compare-and-set repoint: each of ``moves`` (ledger_id, entry_id,
        offset, length), an entry copied into ``new_log_id``, points there if the index still
        places it in ``old_log_id`` (one moved meanwhile, by a recovery add, keeps its place).

        Returns, for each move, whether the entry is now indexed at its copy.
        """
        old_prefix = _LOG_ID_LE.pack(old_log_id)  # a location starts with its log id
        get, put, db = txn.get, txn.put, self._entries
        out = []
        for ledger_id, entry_id, offset, length in moves:
            k = _ENTRY_KEY.pack(ledger_id, entry_id)
            new = _LOC.pack(new_log_id, offset, length)
            v = get(k, db=db)
            if v is not None and v[:4] == old_prefix:
                put(k, new, db=db)
                v = new
            out.append(v == new)
        return out

    def last_entry(self, txn, ledger_id: int):
        """(entry_id, location) of the ledger's highest entry, or None."""
        with txn.cursor(db=self._entries) as cur:
            if ledger_id + 1 < (1 << 64) and cur.set_range(_ENTRY_KEY.pack(ledger_id + 1, 0)):
                if not cur.prev():
                    return None
            elif not cur.last():
                return None
            k, v = cur.item()
            lid, eid = struct.unpack(">QQ", k)
            if lid != ledger_id:
                return None
            return eid, _LOC.unpack(v)

    def delete_ledger(self, txn, ledger_id: int, limit: int = 10_000) -> int:
        """Delete up to ``limit`` entries of a ledger, and its record once none are left.

        The first call leaves the ledger's tombstone: from that transaction on, the add worker
        stores nothing more of it (see bookie.core.ledgers, rule 5).

        Returns how many entries were deleted (call again while it returns ``limit``).
        """
        txn.put(_LEDGER_KEY.pack(ledger_id), b"", db=self._deleted)
        return self.delete_entries(txn, ledger_id, limit, drop_record=True)

    def delete_entries(self, txn, ledger_id: int, limit: int, drop_record: bool) -> int:
        """Delete up to ``limit`` entries of a ledger, and its record too when ``drop_record``
        and none are left.  Returns how many entries were deleted."""
        n = 0
        with txn.cursor(db=self._entries) as cur:
            if cur.set_range(_ENTRY_KEY.pack(ledger_id, 0)):
                while n < limit:
                    k = cur.key()
                    if not k or _LEDGER_KEY.unpack(k[:8])[0] != ledger_id:
                        break
                    if not cur.delete():
                        break
                    n += 1
        if n < limit and drop_record:
            txn.delete(_LEDGER_KEY.pack(ledger_id), db=self._ledgers)
        return n

    def indexed_ledger_ids(self, txn) -> list[int]:
        """Ledgers with at least one indexed entry (one cursor seek per ledger), ascending."""
        out = []
        with txn.cursor(db=self._entries) as cur:
            found = cur.first()
            while found:
                lid = _LEDGER_KEY.unpack(cur.key()[:8])[0]
                out.append(lid)
                if lid + 1 >= (1 << 64):
                    break
                found = cur.set_range(_ENTRY_KEY.pack(lid + 1, 0))
        return out

    def drop_copies(self, txn, ledger_id: int, limit: int) -> int:
        """The over-replicated drop (``bookie.core.ledgers`` invariant 9): delete up to
        ``limit`` of the ledger's entries and keep its record (binding, fence, explicit LAC);
        once none are left, its bytes in every log map count 0 (dead for compaction) while it
        stays named there (compaction restates its fence).  Returns how many entries were
        deleted (call again while it returns ``limit``)."""
        n = self.delete_entries(txn, ledger_id, limit, drop_record=False)
        if n < limit:
            name = str(ledger_id)
            with txn.cursor(db=self._logs) as cur:
                changed = []
                for k, v in cur:
                    m = orjson.loads(v)
                    if m.get(name):
                        m[name] = 0
                        changed.append((bytes(k), orjson.dumps(m)))
            for k, v in changed:
                txn.put(k, v, db=self._logs)
        return n

    # -- entry-log maps --------------------------------------------------------------------------
    def add_to_log_map(self, txn, log_id: int, counts: dict[int, int]) -> None:
        key = _LOG_KEY.pack(log_id)
        raw = txn.get(key, db=self._logs)
        cur = orjson.loads(raw) if raw else {}
        for lid, nbytes in counts.items():
            cur[str(lid)] = cur.get(str(lid), 0) + nbytes
        txn.put(key, orjson.dumps(cur), db=self._logs)

    def log_map(self, txn, log_id: int) -> dict[int, int] | None:
        """The log's ledger map (ledger -> bytes stored), None when it has none."""
        raw = txn.get(_LOG_KEY.pack(log_id), db=self._logs)
        return None if raw is None else {int(a): b for a, b in orjson.loads(raw).items()}

    def put_log_map(self, txn, log_id: int, counts: dict[int, int]) -> None:
        """Replace the log's ledger map."""
        txn.put(_LOG_KEY.pack(log_id), orjson.dumps({str(lid): n for lid, n in counts.items()}),
                db=self._logs)

    def drop_log_map(self, txn, log_id: int) -> None:
        txn.delete(_LOG_KEY.pack(log_id), db=self._logs)

    def log_maps(self, txn) -> dict[int, dict[int, int]]:
        out = {}
        with txn.cursor(db=self._logs) as cur:
            for k, v in cur:
                out[_LOG_KEY.unpack(k)[0]] = {int(a): b for a, b in orjson.loads(v).items()}
        return out

    def set_current_logs(self, txn, log_ids) -> None:
        txn.put(_CURRENT_LOGS, orjson.dumps(sorted(log_ids)), db=self._meta)

    def current_logs(self, txn) -> set[int]:
        raw = txn.get(_CURRENT_LOGS, db=self._meta)
        return set(orjson.loads(raw)) if raw else set()

    # -- bookkeeping (meta) -----------------------------------------------------------------------
    def compaction_state(self, txn) -> dict | None:
        """The compaction step in progress (bookie.storage.compaction), None when none is."""
        raw = txn.get(_COMPACTION, db=self._meta)
        return orjson.loads(raw) if raw else None

    def set_compaction_state(self, txn, state: dict | None) -> None:
        if state is None:
            txn.delete(_COMPACTION, db=self._meta)
        else:
            txn.put(_COMPACTION, orjson.dumps(state), db=self._meta)

    def compaction_skipped(self, txn) -> set[int]:
        """The logs compaction gave up on for good (a corrupt entry)."""
        raw = txn.get(_COMPACTION_SKIPPED, db=self._meta)
        return set(orjson.loads(raw)) if raw else set()

    def skip_compaction(self, txn, log_id: int) -> None:
        txn.put(_COMPACTION_SKIPPED, orjson.dumps(sorted(self.compaction_skipped(txn) | {log_id})),
                db=self._meta)

    def bookkeeping(self, txn) -> dict[str, str]:
        """The ``meta`` records but the current logs, opaque (hex key -> hex value): what a
        rebuild carries over from the old index (the log id sequence, compaction's records)."""
        with txn.cursor(db=self._meta) as cur:
            return {bytes(k).hex(): bytes(v).hex() for k, v in cur if k != _CURRENT_LOGS}

    def restore_bookkeeping(self, txn, kept: dict[str, str]) -> None:
        for k, v in kept.items():
            txn.put(bytes.fromhex(k), bytes.fromhex(v), db=self._meta)

    def allocate_log_id(self, directories: list[str]) -> int:
        """A new entry log id, never handed out before (one short write transaction).

        The add worker (rolling) and the GC worker (compaction) create logs from different
        processes; LMDB's one writer at a time makes this the shared sequence.  The files on
        disk are a floor too: a counter lost with an unsynced commit is never behind them.
        """
        floor = max((i for d in directories for i in list_logs(d)), default=0) + 1
        with self.begin(write=True) as txn:
            raw = txn.get(_NEXT_LOG_ID, db=self._meta)
            log_id = max(floor, _LOG_KEY.unpack(raw)[0] if raw else 0)
            txn.put(_NEXT_LOG_ID, _LOG_KEY.pack(log_id + 1), db=self._meta)
        return log_id
