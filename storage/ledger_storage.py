"""Ledger storage: the add worker's (and replay's) writes into the entry logs and the index.

Every record the ledger table lets through goes to the entry log of its ledger's directory:
ADD_BATCH records (their entries are indexed at ``commit``), and FENCE and LAC records too
(``store_record``: nothing to index, but their bytes are in the log's ledger map, so the log
lives as long as the ledger and compaction restates them).  Then the entry logs alone hold the
ledger table's state, and a rebuild from them reaches it (``bookie.core.ledgers``).

Entries are write-once: ``held_entries`` tells the add worker which entries of a batch this
bookie already holds, and with which bytes, from what is committed to the index and what was
stored since the last commit.  A per-ledger high mark (the highest entry id stored, read once
from the index) keeps an ordinary add, whose ids are all above it, to one dictionary lookup.
"""

from __future__ import annotations

import collections

import numpy as np

from bookie.core.ledgers import LedgerTable, StoredLedger
from bookie.storage.entrylog import EntryLogReader, EntryLogs
from bookie.storage.index import SMALL_BATCH, Index

HIGH_MARKS = 100_000  # ledgers whose highest stored entry id is kept in memory


class LedgerStorage:
    """The add worker's writes: entries to the entry log at once, their index locations and the
    ledger table's changes in one LMDB write transaction per ``commit``.  Replay and the live
    path both store through it."""

    def __init__(self, index: Index, logs: EntryLogs, key_salt: bytes = b""):
        self.index = index
        self.logs = logs
        self.table = LedgerTable(self.load_ledger, key_salt)  # key_salt: layout.key_salt
        # bytes stored per (log, ledger) since the last commit: the logs' ledger maps
        self.log_counts: dict[int, dict[int, int]] = collections.defaultdict(lambda: collections.defaultdict(int))
        self._batches: list = []  # (ledger_id, entry_ids, log_id, offsets, lengths)
        self.entries_total = 0
        self._high: dict[int, int] = {}  # ledger_id -> highest entry id stored (write-once)
        self._reader: EntryLogReader | None = None

    def load_ledger(self, ledger_id: int) -> StoredLedger | None:
        with self.index.begin() as txn:
            raw = self.index.get_ledger(txn, ledger_id)
            if raw is None and self.index.is_deleted(txn, ledger_id):
                return StoredLedger.tombstone()
        return None if raw is None else StoredLedger.from_dict(raw)

    # -- writes ----------------------------------------------------------------------------------
    def _writer(self, ledger_id: int, size: int):
        elog = self.logs.writer_for(ledger_id)
        if elog.needs_roll(size):
            elog.roll()
            self._batches.append(("current_logs", self.logs.current_ids()))
        return elog

    def store_batch(self, ledger_id: int, parts, size: int, data_offset: int,
                    entry_ids: np.ndarray, lengths: np.ndarray, offsets: np.ndarray) -> None:
        """Append one ADD_BATCH record to the entry log; its index update waits for commit().

        ``offsets`` are the entries' offsets inside the record's data.
        """
        elog = self._writer(ledger_id, size)
        start = elog.append(parts)
        self._batches.append((ledger_id, entry_ids, elog.log_id, offsets + (start + data_offset), lengths))
        small = len(entry_ids) < SMALL_BATCH  # a few entries: Python beats numpy's fixed cost
        self.log_counts[elog.log_id][ledger_id] += sum(lengths.tolist()) if small else int(lengths.sum())
        self.entries_total += len(entry_ids)
        if len(entry_ids):
            top = max(entry_ids.tolist()) if small else int(entry_ids.max())
            # against the known mark, never a default: a ledger the memory does not hold yet
            # (after a restart, the journal's replay stores before any add asks) may hold
            # higher entries already, and a mark lowered to ``top`` would let them be written
            # again (write-once, core/ledgers.py invariant 7)
            if top > self._high_mark(ledger_id):
                self._high[ledger_id] = top

    def store_record(self, ledger_id: int, record: bytes) -> None:
        """Append a FENCE or LAC record to the ledger's entry log (nothing to index)."""
        elog = self._writer(ledger_id, len(record))
        elog.append([record])
        self.log_counts[elog.log_id][ledger_id] += len(record)

    # -- write-once ------------------------------------------------------------------------------
    def _high_mark(self, ledger_id: int) -> int:
        high = self._high.get(ledger_id)
        if high is None:
            with self.index.begin() as txn:
                last = self.index.last_entry(txn, ledger_id)
            high = -1 if last is None else last[0]
            for item in self._batches:  # stored, not yet committed to the index
                if item[0] == ledger_id and len(item[1]):
                    high = max(high, int(item[1].max()))
            if len(self._high) >= HIGH_MARKS:
                self._high.clear()
            self._high[ledger_id] = high
        return high

    def uncommitted(self, ledger_id: int) -> bool:
        """Whether an entry of ``ledger_id`` was stored since the last commit (not yet in the
        index)."""
        return any(item[0] == ledger_id for item in self._batches)

    def held_entries(self, ledger_id: int, entry_ids: np.ndarray) -> dict[int, bytes]:
        """{position in ``entry_ids``: the bytes held} for the entries this bookie already holds
        (committed to the index, or stored since the last commit).  Empty, after one dictionary
        lookup, when every id is above the ledger's highest stored entry."""
        if not len(entry_ids) or (min(entry_ids.tolist()) if len(entry_ids) < SMALL_BATCH
                                  else int(entry_ids.min())) > self._high_mark(ledger_id):
            return {}
        wanted = {int(e): i for i, e in enumerate(entry_ids.tolist())}
        where: dict[int, tuple[int, int, int]] = {}
        for item in reversed(self._batches):  # stored since the last commit: the newest wins
            if item[0] != ledger_id:
                continue
            _, ids, log_id, offs, lens = item
            for k, e in enumerate(ids.tolist()):
                if e in wanted and e not in where:
                    where[e] = (log_id, int(offs[k]), int(lens[k]))
        missing = [e for e in wanted if e not in where]
        if missing:
            with self.index.begin() as txn:
                for e in missing:
                    loc = self.index.locate(txn, ledger_id, e)
                    if loc is not None:
                        where[e] = loc
        if not where:
            return {}
        if self._reader is None:
            self._reader = EntryLogReader(self.logs.directories)
        return {wanted[e]: bytes(self._reader.read(*loc)) for e, loc in where.items()}

    # -- the index -------------------------------------------------------------------------------
    def _flush_log_counts(self) -> None:
        for log_id, counts in self.log_counts.items():
            self._batches.append(("log_map", log_id, dict(counts)))
        self.log_counts.clear()

    def commit(self) -> set[int]:
        """One LMDB write transaction for everything stored since the last commit.

        Ledgers the GC deleted meanwhile (a tombstone seen inside this very transaction, which
        LMDB orders against the GC's) get nothing written: their entries stay unindexed and the
        table marks them deleted.

        Returns:
            the ids of those ledgers (their pending answers must say NO_LEDGER).
        """
        table = self.table
        if not self._batches and not table.dirty and not self.log_counts:
            return set()
        self._flush_log_counts()
        with self.index.begin(write=True) as txn:
            touched = {item[0] for item in self._batches if isinstance(item[0], int)} | table.dirty
            gone = {lid for lid in touched if self.index.is_deleted(txn, lid)}
            for item in self._batches:
                if item[0] == "current_logs":
                    self.index.set_current_logs(txn, item[1])
                elif item[0] == "log_map":
                    self.index.add_to_log_map(txn, item[1], item[2])
                elif item[0] not in gone:
                    self.index.put_locations(txn, *item)
            indexed = {item[0] for item in self._batches if isinstance(item[0], int)} - gone
            # invariant 9 (core/ledgers.py): entries indexed always have their ledger's record,
            # also when the GC's over-replicated drop (or an older bookie's) left none
            for lid in table.records_to_write(indexed, lambda lid: self.index.has_record(txn, lid)) - gone:
                self.index.put_ledger(txn, lid, table.ledgers[lid].as_dict())
        self._batches.clear()
        table.dirty.clear()
        for lid in gone:
            table.mark_deleted(lid)
        return gone

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
