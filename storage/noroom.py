"""What the add worker does when a ledger disk has no room (ENOSPC in the entry log, the index
commit or a checkpoint): the bookie turns read-only instead of the worker dying.

Theory of operation.  A record is placed in the ring (so the journal will make it durable)
before it is written to the entry log and, at the iteration's commit, to the index.  If that
write fails for want of space:

- the record's bytes are copied out of the ring and held here, in order, with its pending
  answer; new adds are refused with READ_ONLY (the worker's own check, and ``NO_ROOM`` in the
  ring, on which the supervisor turns the whole bookie read-only: registration, INFO);
- ``safe_to``, the end of what is both in the entry log and committed to the index, stops
  moving.  An answer whose record is past it is refused READ_ONLY once its record is durable
  (a fence's is answered OK: core/adds.py invariant 5), so nothing is acknowledged that a
  reader could not find, and LastLogMark (``min(DURABLE, safe_to)``) never passes a record that
  is not stored: if the bookie stops or crashes meanwhile, replay from LastLogMark stores it;
- about once a second the held records are written again and the index committed; the
  checkpoint is retried too (the checkpointer remembers a failed one).  Once all of it
  succeeds the worker is writable again and clears ``NO_ROOM``.

Only want of space is handled so: any other disk error still ends the worker (the supervisor
restarts it and it replays the journal).
"""

from __future__ import annotations

import errno

import lmdb

RETRY_S = 1.0


def no_room(e: BaseException) -> bool:
    """A write failed for want of space: ENOSPC / EDQUOT, or LMDB's map or disk full."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(e, lmdb.MapFullError):
        return True
    return isinstance(e, lmdb.Error) and ("No space left" in str(e) or "quota" in str(e).lower())


class Held:
    """One ADD_BATCH record placed in the ring but not yet in the entry log."""

    __slots__ = ("ledger_id", "data", "size", "data_offset", "entry_ids", "lengths", "offsets")

    def __init__(self, ledger_id, slices, size, data_offset, entry_ids, lengths, offsets):
        self.ledger_id = ledger_id
        self.data = b"".join(bytes(s) for s in slices)  # the ring's bytes may be reused
        self.size = size
        self.data_offset = data_offset
        self.entry_ids = entry_ids
        self.lengths = lengths
        self.offsets = offsets

    def store(self, storage) -> None:
        storage.store_batch(self.ledger_id, [self.data], self.size, self.data_offset,
                            self.entry_ids, self.lengths, self.offsets)


class HeldRecord:
    """One FENCE or LAC record placed in the ring but not yet in the entry log."""

    __slots__ = ("ledger_id", "record")

    def __init__(self, ledger_id: int, record: bytes):
        self.ledger_id = ledger_id
        self.record = bytes(record)

    def store(self, storage) -> None:
        storage.store_record(self.ledger_id, self.record)
