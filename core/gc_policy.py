"""What scan-and-compare garbage collection deletes: the decision, as plain code (no I/O).

Theory of operation
-------------------
The GC worker takes one snapshot of this bookie's index (the ledgers it holds, each entry log's
ledger map, the logs being written), *then* reads the metadata store's ledger id high-water
mark (``MetadataStore.ledger_id_high_water``: every id handed out so far is at or below it),
*then* lists the ledgers in the store.  From those facts alone ``plan`` decides:

- **ledgers to drop** (deleted): held here, absent from the store, and at or below the mark.
  A ledger exists in the store before its first add reaches any bookie, so one held in a
  snapshot taken before the listing and missing from the listing was deleted.  It leaves a
  tombstone in the index: a deleted ledger stays deleted (``bookie.core.ledgers`` invariant 6).
- **ledgers kept although absent**: held here, absent from the store, and *above* the mark.
  A bookie with a metadata store never holds such an id (it asks the store before it stores
  anything: ``bookie.core.ledgers`` invariant 1), so only data written while the bookie ran
  without a store can be there; it is left alone rather than guessed at.
- **dead entry logs**: logs whose ledger map names only ledgers absent from the store (each
  one dropped now, or earlier).  For the same reason, a ledger in a map of the
  snapshot and missing from the later listing is gone (deleted, or never created); its bytes
  count as dead for compaction too, which works from the index after the plan is carried out.
- never a log being written (in the snapshot's current logs) nor one newer than the newest of
  them (opened after the snapshot, so its map may be incomplete), and never a log without a map
  (its ledgers are unknown).

Why the mark is read *before* the listing: a ledger created between two reads has an id above
a mark read before it.  Read before the listing, the mark can only be too low, never too high:
an id at or below it was handed out before the listing began, so its absence from the listing
means it was deleted.  Read after the listing, a ledger created in between would be at or below
the mark and missing from the listing, and would be tombstoned as "deleted" on the eve of its
first add.  An id above the mark that the store *has* handed out by the listing is in the
listing and kept; one handed out after the listing is above the mark and kept.

An empty listing (issue 21, defect 6): a store that answers "no ledgers at all" while this bookie
holds some is either a cluster whose ledgers were all deleted, or a store answering by mistake (a
wrong root, a wiped store, one restored empty from a backup).  The high-water mark tells them
apart: the real store handed out every id this bookie holds (a ledger exists in the store before
its first add reaches a bookie), so its mark is at or above all of them; a wrong, wiped or
restored store has not handed those ids out (its counter starts again, or stops at the backup),
so its mark is below at least one.  ``empty_listing_trusted`` is that rule: an empty listing is
acted on only when the mark, read before it, covers every held id; otherwise nothing is
deleted (and a held id above the mark - data written while the bookie ran without a store -
keeps the guard on until the store hands that id out).  The GC worker adds a second condition the plan does not see: the
store must still hold this bookie's cookie (on ZooKeeper the mark's own probe advances the id
sequence, so a wiped store's mark soon passes small held ids).

The worker carries the plan out in this order: dropped ledgers are appended to the durable list
of deletes, then leave the index (a tombstone each), then dead log files are unlinked, then their maps are forgotten; a crash anywhere in between
leaves facts from which the next plan finishes the job (a map whose file is gone is forgotten
then).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class GcPlan:
    drop_ledgers: list[int]  # deleted: leave the index (entries, ledger record), tombstone left
    delete_logs: list[int]  # entry log files to unlink
    forget_maps: list[int]  # ledger maps to remove from the index (their logs are dead)

    @property
    def empty(self) -> bool:
        return not (self.drop_ledgers or self.delete_logs or self.forget_maps)


def plan(held_ledgers: Iterable[int], metadata_ledgers: Iterable[int],
         log_maps: Mapping[int, Mapping[int, int]], current_logs: Iterable[int],
         logs_on_disk: Iterable[int], high_water: int | None = None) -> GcPlan:
    """Decide what one GC run deletes.

    Args:
        held_ledgers: ledger ids in this bookie's index, from the snapshot.
        metadata_ledgers: ledger ids in the metadata store, listed *after* the snapshot.
        log_maps: from the snapshot, log_id -> {ledger_id: bytes stored}.
        current_logs: from the snapshot, the logs being written.
        logs_on_disk: entry log ids found in the ledger directories.
        high_water: the store's ledger id high-water mark, read after the snapshot and
            *before* the listing; None: unknown (every ledger absent from the store is then
            taken as deleted, as before there was a mark).
    Returns:
        the plan, every list ascending.  Invariants: no ledger in ``metadata_ledgers`` is
        dropped; a ledger absent from it is dropped (tombstoned) when at or below
        ``high_water`` and kept when above it; a log is deleted (or its
        map forgotten) only if it has a map and every ledger in it is absent from
        ``metadata_ledgers``; no current log, nor any log newer than the newest current one,
        is ever deleted.
    """
    in_store = set(metadata_ledgers)
    gone = set(held_ledgers) - in_store
    # above the mark: created after the listing began, or never created (only a bookie that ran
    # without a metadata store holds such an id): not deleted
    never_created = {lid for lid in gone if high_water is not None and lid > high_water}
    current = set(current_logs)
    newest_current = max(current, default=0)

    def dead(log_id: int) -> bool:
        if log_id in current or log_id > newest_current:
            return False  # being written, or opened after the snapshot
        ledgers = log_maps.get(log_id)
        if ledgers is None:
            return False  # no map: its ledgers are unknown, keep it
        return all(lid not in in_store for lid in ledgers)

    dead_logs = sorted(log_id for log_id in set(logs_on_disk) | set(log_maps) if dead(log_id))
    on_disk = set(logs_on_disk)
    return GcPlan(drop_ledgers=sorted(gone - never_created),
                  delete_logs=[log_id for log_id in dead_logs if log_id in on_disk],
                  forget_maps=dead_logs)


def empty_listing_trusted(held_ledgers: Iterable[int], high_water: int | None) -> bool:
    """Whether a listing with no ledgers may be acted on while this bookie holds
    ``held_ledgers`` (theory of operation: "An empty listing").

    Returns:
        True when nothing is held, or when the store's high-water mark (read after the
        snapshot, before the listing) is known and at or above every held ledger id: the
        store handed each of them out and lists none, so all were deleted.  False otherwise
        (an unknown mark, or a held id the store has not handed out): a store answering an
        empty list by mistake must not empty the bookie.
    """
    top = max(held_ledgers, default=None)
    if top is None:
        return True
    return high_water is not None and top <= high_water
