"""The writer identity of each ledger, for storage quotas (``bookie.core.quotas``), and the
bytes the bookie holds per ledger, read from the index.

Format
------
An LMDB environment ``writers`` beside the index (``INDEX_DIR/current/writers``, not inside
``index``: an index rebuild replaces that directory and must keep these), one database:

``writers``  key ledger_id u64 BE  ->  the enrolled CURVE key (z85, ASCII) whose normal add
             first reached this bookie for the ledger

Written by the add worker only, after each commit that bound a ledger (page cache), synced at
its next quota pass (``bookie.core.quotas.RESYNC_S``); a machine crash in between loses the
newest identities, whose ledgers then count to their own owner (core/quotas.py invariant 4).
Identities of deleted ledgers are dropped at the quota pass that sees them deleted.
"""

from __future__ import annotations

import os
import struct

import lmdb

from bookie.storage.index import Index

MAP_SIZE_BYTES = 1 << 30  # sparse: ~100 bytes a ledger
_LEDGER_KEY = struct.Struct(">Q")  # this environment's own key (the format above)


def held_bytes(index: Index) -> tuple[dict[int, int], set[int]]:
    """(ledger -> bytes held, deleted ledger ids) from one index snapshot: the entry logs'
    ledger maps summed over logs, deleted ledgers left out (their bytes wait for compaction,
    but no longer count), dropped copies counting 0 (``Index.drop_copies``)."""
    with index.begin() as txn:
        maps = index.log_maps(txn)
        deleted = index.deleted_ids(txn)
    out: dict[int, int] = {}
    for counts in maps.values():
        for lid, n in counts.items():
            if lid not in deleted:
                out[lid] = out.get(lid, 0) + n
    return out, deleted


class Writers:
    """The ``writers`` environment, opened in the add worker (after fork)."""

    def __init__(self, index_dir: str):
        path = os.path.join(index_dir, "writers")
        os.makedirs(path, mode=0o700, exist_ok=True)
        self.env = lmdb.open(path, map_size=MAP_SIZE_BYTES, max_dbs=1, sync=False,
                             metasync=False, lock=True, mode=0o600)
        self.db = self.env.open_db(b"writers")
        self.dirty = False

    def load(self) -> dict[int, str]:
        with self.env.begin() as txn, txn.cursor(db=self.db) as cur:
            return {_LEDGER_KEY.unpack(k)[0]: bytes(v).decode("ascii") for k, v in cur}

    def save(self, bound: dict[int, str], dropped=()) -> None:
        """Write ``bound`` (ledger -> key) and drop ``dropped`` in one transaction."""
        if not bound and not dropped:
            return
        with self.env.begin(write=True, db=self.db) as txn:
            for lid, key in bound.items():
                txn.put(_LEDGER_KEY.pack(lid), key.encode("ascii"))
            for lid in dropped:
                txn.delete(_LEDGER_KEY.pack(lid))
        self.dirty = True

    def sync(self) -> None:
        if self.dirty:
            self.env.sync(True)
            self.dirty = False

    def close(self) -> None:
        self.env.close()


