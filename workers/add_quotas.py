"""The add worker's storage quotas on disk (``ledgerStorageQuotaBytes``): the writer identities
bound to ledgers (``storage/writers.py``) and the usage read back from the index.  The rule -
who an add's bytes count to, which add is refused, when usage is read again - is the add
machine's (bookie.core.adds invariant 8, bookie.core.quotas); this object only does its I/O.

- at start, after the journal's replay: identities from ``storage/writers.py``, usage from the
  index (core/quotas.py invariant 1);
- ``save``, after each iteration's commit: persist the identities bound since (before their
  adds are answered, which happens at the next iteration); then, when the machine says so
  (``resync_due``: every ``RESYNC_S``, only with everything placed in the index), usage again
  from the index: deletes after the GC, the over-replicated drop, compaction.
"""

from __future__ import annotations

import time

from bookie.core.adds import AddMachine
from bookie.core.quotas import Quotas
from bookie.storage.writers import Writers, held_bytes


class QuotaStore:
    """The quota's identities and usage on disk, for the add machine (module docstring)."""

    def __init__(self, machine: AddMachine, storage, limit_bytes: int, index_dir: str, enrolled: bool):
        self.machine = machine
        self.storage = storage
        machine.quotas = Quotas(limit_bytes)
        machine.quota_enrolled = enrolled
        self.writers: Writers | None = None
        if not limit_bytes:
            return  # no quota: nothing kept, nothing read (the default)
        self.writers = Writers(index_dir)
        machine.quotas.identities = self.writers.load()
        self.save(time.monotonic(), False, force=True)

    def save(self, now: float, held: bool, force: bool = False) -> None:
        """Persist the identities bound since the last call; read usage again from the index
        when the machine says it is due (``held``: records wait for room on the ledger disks)."""
        if self.writers is None:
            return
        quotas = self.machine.quotas
        if quotas.unsaved:
            self.writers.save(quotas.unsaved)
            quotas.unsaved = {}
        if not self.machine.resync_due(now, held, force):
            return
        held_now, deleted = held_bytes(self.storage.index)
        quotas.reset(held_now)
        self.writers.save({}, quotas.forgotten(deleted & quotas.identities.keys()))
        self.writers.sync()

    def stats(self, s: dict) -> None:
        quotas = self.machine.quotas
        s["add_quota_refused_total"] = quotas.refused_total
        s["quota_identities_over"] = quotas.over()

    def close(self) -> None:
        if self.writers is not None:
            self.save(time.monotonic(), False, force=True)
            self.writers.close()
            self.writers = None
