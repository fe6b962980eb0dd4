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

LOC = struct.Struct("<IQI")
LOC_DTYPE = np.dtype([("log", "<u4"), ("off", "<u8"), ("len", "<u4")])
KEY_DTYPE = np.dtype([("ledger", ">u8"), ("entry", ">u8")])
_V16 = np.dtype("V16")  # a key or a location as one 16-byte record
SMALL_BATCH = 16  # ``put_locations`` of fewer entries packs them with struct
assert KEY_DTYPE.itemsize == LOC_DTYPE.itemsize == _V16.itemsize
LEDGER_KEY = struct.Struct(">Q")
LOG_KEY = struct.Struct(">I")


_ENTRY_KEY = struct.Struct(">QQ")


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _ENTRY_KEY.pack(ledger_id, entry_id)


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
        self.logs = env.open_db(b"logs")
        self.meta = env.open_db(b"meta")

    # -- ledgers ---------------------------------------------------------------------------------
    def get_ledger(self, txn, ledger_id: int) -> dict | None:
        raw = txn.get(LEDGER_KEY.pack(ledger_id), db=self.ledgers)
        return None if raw is None else orjson.loads(raw)

    def has_record(self, txn, ledger_id: int) -> bool:
        return txn.get(LEDGER_KEY.pack(ledger_id), db=self.ledgers) is not None

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
        if n < SMALL_BATCH:  # a few entries: struct beats numpy's fixed cost per call
            items = [(_ENTRY_KEY.pack(ledger_id, e), LOC.pack(log_id, o, ln)) for e, o, ln
                     in zip(entry_ids.tolist(), offsets.tolist(), lengths.tolist())]
            with txn.cursor(db=self.entries) as cur:
                cur.putmulti(items, dupdata=False, overwrite=True, append=False)
            return
        keys = np.empty(n, dtype=KEY_DTYPE)
        keys["ledger"] = ledger_id
        keys["entry"] = entry_ids
        locs = np.empty(n, dtype=LOC_DTYPE)
        locs["log"] = log_id
        locs["off"] = offsets
        locs["len"] = lengths
        # each record as bytes through numpy's void view (a C loop): a slice per key and value
        # in Python was 12% of the add worker at 10,000 adds in flight (3x slower, measured)
        items = zip(keys.view(_V16).tolist(), locs.view(_V16).tolist())
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
        stores nothing more of it (see bookie.core.ledgers, rule 5).

        Returns how many entries were deleted (call again while it returns ``limit``).
        """
        txn.put(LEDGER_KEY.pack(ledger_id), b"", db=self.deleted)
        return self.delete_entries(txn, ledger_id, limit, drop_record=True)

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

    def indexed_ledger_ids(self, txn) -> list[int]:
        """Ledgers with at least one indexed entry (one cursor seek per ledger), ascending."""
        out = []
        with txn.cursor(db=self.entries) as cur:
            found = cur.first()
            while found:
                lid = LEDGER_KEY.unpack(cur.key()[:8])[0]
                out.append(lid)
                if lid + 1 >= (1 << 64):
                    break
                found = cur.set_range(entry_key(lid + 1, 0))
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
            with txn.cursor(db=self.logs) as cur:
                changed = []
                for k, v in cur:
                    m = orjson.loads(v)
                    if m.get(name):
                        m[name] = 0
                        changed.append((bytes(k), orjson.dumps(m)))
            for k, v in changed:
                txn.put(k, v, db=self.logs)
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
