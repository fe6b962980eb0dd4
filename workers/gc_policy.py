"""What scan-and-compare garbage collection deletes: the decision, as plain code (no I/O).

Theory of operation
-------------------
The GC worker takes one snapshot of this bookie's index (the ledgers it holds, each entry log's
ledger map, the logs being written) and *then* lists the ledgers in the metadata store.  From
those facts alone ``plan`` decides:

- **ledgers to drop**: held here and absent from the store.  A ledger exists in the store
  before its first add reaches any bookie, so one held in a snapshot taken before the listing
  and missing from the listing was deleted, never "not created yet".
- **dead entry logs**: logs whose ledger map names only ledgers absent from the store (each
  one dropped now or earlier).  For the same reason, a ledger in a map of the snapshot and
  missing from the later listing was deleted.
- never a log being written (in the snapshot's current logs) nor one newer than the newest of
  them (opened after the snapshot, so its map may be incomplete), and never a log without a map
  (its ledgers are unknown).

The worker carries the plan out in this order: ledgers leave the index, then dead log files are
unlinked, then their maps are forgotten; a crash anywhere in between leaves facts from which the
next plan finishes the job (a map whose file is gone is forgotten then).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping


@dataclasses.dataclass(frozen=True)
class GcPlan:
    drop_ledgers: list[int]  # leave the index (entries and ledger record)
    delete_logs: list[int]  # entry log files to unlink
    forget_maps: list[int]  # ledger maps to remove from the index (their logs are dead)

    @property
    def empty(self) -> bool:
        return not (self.drop_ledgers or self.delete_logs or self.forget_maps)


def plan(held_ledgers: Iterable[int], metadata_ledgers: Iterable[int],
         log_maps: Mapping[int, Mapping[int, int]], current_logs: Iterable[int],
         logs_on_disk: Iterable[int]) -> GcPlan:
    """Decide what one GC run deletes.

    Args:
        held_ledgers: ledger ids in this bookie's index, from the snapshot.
        metadata_ledgers: ledger ids in the metadata store, listed *after* the snapshot.
        log_maps: from the snapshot, log_id -> {ledger_id: bytes stored}.
        current_logs: from the snapshot, the logs being written.
        logs_on_disk: entry log ids found in the ledger directories.
    Returns:
        the plan, every list ascending.  Invariants: no ledger in ``metadata_ledgers`` is
        dropped; a log is deleted (or its map forgotten) only if it has a map and every ledger
        in it is absent from ``metadata_ledgers``; no current log, nor any log newer than the
        newest current one, is ever deleted.
    """
    in_store = set(metadata_ledgers)
    drop = sorted(set(held_ledgers) - in_store)
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
    return GcPlan(drop_ledgers=drop,
                  delete_logs=[log_id for log_id in dead_logs if log_id in on_disk],
                  forget_maps=dead_logs)
