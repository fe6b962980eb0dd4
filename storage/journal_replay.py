"""Journal replay at the add worker's start: every journal from its own LastLogMark, through the
ledger rule book, into the entry logs and the index (DESIGN invariant 2).

Theory of operation
-------------------
Each record after a journal's LastLogMark (and before the DURABLE its journal published: what
the journal made durable) goes through ``LedgerTable.apply`` exactly as the live path's record
did (bookie.core.ledgers invariant 8: apply is idempotent, so records the entry logs and the
index already hold change nothing), and what ``apply`` lets through is stored as the live path
stored it: an ADD_BATCH's entries, or a FENCE or LAC record itself, in the entry log.  The index
is committed after each group.  A ledger's records are all in one journal
(storage/journal_set.py), so the order the journals are replayed in does not matter.  Then one
checkpoint persists every journal's mark at the end replayed.

The index rebuild (bookie.storage.index_rebuild) applies the same records through the same
table; this is the start-up's, which also stores.
"""

from __future__ import annotations

import time

from bookie.storage import records
from bookie.storage.checkpoint import checkpoint
from bookie.storage.journal import lastmark_of, scan
from bookie.storage.ledger_storage import LedgerStorage

PROGRESS_EVERY_S = 2.0


def store_replayed(storage: LedgerStorage, rec: records.Record, buf, pos: int) -> None:
    """Store a record read back from the journal: an ADD_BATCH's entries, or a FENCE or LAC
    record itself, in the entry log (as the live path did)."""
    if rec.type != records.ADD_BATCH:
        storage.store_record(rec.ledger_id, bytes(buf[pos:pos + rec.size]))
        return
    offsets, _, entry_ids = records.batch_entries(rec, buf, pos)
    storage.store_batch(rec.ledger_id, [buf[pos:pos + rec.size]], rec.size,
                        rec.data_offset, entry_ids, rec.lengths, offsets)


def replay(log, ends: list[int], storage: LedgerStorage, jdirs: list[str],
           ledger_dirs: list[str]) -> int:
    """Replay journal ``i`` (directory ``jdirs[i]``) from its own LastLogMark to ``ends[i]``
    (its ring's DURABLE), then checkpoint (one mark per journal).  ``log(event, **fields)``
    reports progress.  Returns the records replayed.  Raises what the disks raise (want of
    space included: the caller retries with a fresh table)."""
    n_records = sum(replay_journal(log, i, ends[i], storage, jdir, ledger_dirs)
                    for i, jdir in enumerate(jdirs))
    checkpoint(storage, ledger_dirs, ends)
    return n_records


def replay_journal(log, journal: int, end: int, storage: LedgerStorage, jdir: str,
                   ledger_dirs: list[str]) -> int:
    """Replay one journal from its LastLogMark to ``end``; returns the records read."""
    mark = lastmark_of(ledger_dirs, journal)
    t0 = time.monotonic()
    log("replaying journal", journal=journal, at=mark, to=end, bytes=end - mark, percent="0.0")
    n_records = 0
    last_report = t0
    for group in scan(jdir, mark):
        if group.start >= end:
            break
        for off, rec in records.iter_records(group.body):
            if group.start + off + rec.size <= mark:
                continue
            if storage.table.apply(rec):
                store_replayed(storage, rec, group.body, off)
            n_records += 1
        storage.commit()
        now = time.monotonic()
        if now - last_report > PROGRESS_EVERY_S:
            last_report = now
            done = group.end - mark
            log("replaying journal", journal=journal, at=group.end, to=end, records=n_records,
                percent=f"{100.0 * done / max(1, end - mark):.1f}",
                mb_per_s=f"{done / max(1e-9, now - t0) / 1e6:.1f}")
    log("replay done", journal=journal, from_mark=mark, to=end, records=n_records,
        seconds=f"{time.monotonic() - t0:.2f}")
    return n_records
