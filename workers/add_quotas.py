"""The add worker's storage quotas (``ledgerStorageQuotaBytes``): it feeds the add machine's
quota rule (bookie.core.adds invariant 8, bookie.core.quotas) with each add's writer identity,
and keeps the usage true to what the bookie holds.  A part of ``AddServer``
(bookie.workers.add_worker), kept apart as one concept: it uses the server's ``storage``,
``gate``, ``machine``, ``pending``, ``current``, ``held`` and ``stats``.

- ``quota_start``: at start, after the journal's replay: identities from ``storage/writers.py``,
  usage from the index (core/quotas.py invariant 1).
- ``quota_principal``: the enrolled key of the message being handled, or its local uid (None
  otherwise: an ephemeral key, or an address, is no identity).
- ``recovery_principal``: whether the add is the recovery principal's (the credential, an
  admin key): exempt from the quota and binding no identity (core/quotas.py invariant 2).
- ``quota_pass``: after each iteration's commit: persist the identities bound since (before
  their adds are answered, which happens at the next iteration); every ``RESYNC_S``, and only
  when everything placed is in the index (no record held for want of room), usage again from
  the index: deletes after the GC, the over-replicated drop, compaction.
"""

from __future__ import annotations

import time

from bookie.core.quotas import RESYNC_S, Quotas
from bookie.storage.writers import Writers, held_bytes


class QuotaPasses:
    """The add worker's side of the quota rule (module docstring)."""

    quota_enrolled = False  # set by run(): the enrolled key is the identity (curveClientKeysDirectory)
    writers: Writers | None = None
    last_quota_pass = 0.0

    def quota_start(self, limit_bytes: int, index_dir: str, enrolled: bool) -> None:
        quotas = self.machine.quotas = Quotas(limit_bytes)
        self.quota_enrolled = enrolled
        if not limit_bytes:
            return  # no quota: nothing kept, nothing read (the default)
        self.writers = Writers(index_dir)
        quotas.identities = self.writers.load()
        self.quota_pass(force=True)

    def quota_principal(self):
        """The enrolled key of the message being handled, or its local uid (uid:N: the kernel
        named it), or None."""
        if self.writers is None:
            return None
        frames = self.current[1]
        principal = self.pending.queues[0].principal(frames[1], frames[0].bytes)
        if self.quota_enrolled or (isinstance(principal, str) and principal.startswith("uid:")):
            return principal
        return None

    def recovery_principal(self, credential: bool, principal) -> bool:
        """Whether the add comes from the recovery principal (core/quotas.py invariant 2): it
        carries the recovery credential, or its enrolled key's (or local uid's) role is admin
        (autorecovery's own key is one)."""
        return credential or (principal is not None and self.gate is not None
                              and self.gate.role(principal) == "admin")

    def quota_pass(self, force: bool = False) -> None:
        if self.writers is None:
            return
        quotas = self.machine.quotas
        if quotas.unsaved:
            self.writers.save(quotas.unsaved)
            quotas.unsaved = {}
        now = time.monotonic()
        if not force and (now - self.last_quota_pass < RESYNC_S or self.held or self.machine.full):
            return
        self.last_quota_pass = now
        held, deleted = held_bytes(self.storage.index)
        quotas.reset(held)
        self.writers.save({}, quotas.forgotten(deleted & quotas.identities.keys()))
        self.writers.sync()

    def quota_stats(self, s: dict) -> None:
        quotas = self.machine.quotas
        s["add_quota_refused_total"] = quotas.refused_total
        s["quota_identities_over"] = quotas.over()

    def quota_close(self) -> None:
        if self.writers is not None:
            self.quota_pass(force=True)
            self.writers.close()
            self.writers = None
