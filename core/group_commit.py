"""Group commit policy: when the journal force-writes what the add worker has placed in the ring.

Records of DEFERRED_SYNC adds are grouped and synced as any other: what differs is only when
their answers leave (``bookie.core.adds`` invariant 6: once stored, not once synced), and a
FORCE_LEDGER's answer waits for this policy's next sync like a normal add's.

Pure: facts in, yes/no and a wait out.  ``bookie.storage.journal_groups.GroupCommitter`` is one
step of the journal's loop built on it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class GroupCommitPolicy:
    """When to force-write what is queued.  Pure: the worker loop feeds it facts.

    With ``flush_when_queue_empty`` a group is written as soon as nothing more is waiting;
    otherwise it waits for more until ``max_group_wait_s`` has passed since the oldest queued
    byte or ``buffered_threshold`` bytes are queued.  Without adaptive group writes every
    wake-up is written on its own.
    """

    max_group_wait_s: float
    buffered_threshold: int
    flush_when_queue_empty: bool
    adaptive: bool

    def should_flush(self, queued_bytes: int, oldest_age_s: float, more_waiting: bool) -> bool:
        if queued_bytes <= 0:
            return False
        if not self.adaptive:
            return True
        if queued_bytes >= self.buffered_threshold:
            return True
        if oldest_age_s >= self.max_group_wait_s:
            return True
        return self.flush_when_queue_empty and not more_waiting

    def wait_s(self, oldest_age_s: float) -> float:
        """How long to wait for more before the group must go."""
        return max(0.0, self.max_group_wait_s - oldest_age_s)
