"""Ledger storage: the add worker's (and replay's) writes into the entry logs and the index."""

from __future__ import annotations

import collections

import numpy as np

from bookie.core.ledgers import LedgerTable, StoredLedger
from bookie.storage.entrylog import EntryLogs
from bookie.storage.index import LEDGER_KEY, Index


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
