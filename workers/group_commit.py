"""Group commit: when the journal force-writes what the add worker has placed in the ring.

``GroupCommitPolicy`` is the decision, pure (facts in, yes/no and a wait out);
``GroupCommitter`` is one step of the journal's loop built on it, shared by the journal worker
and ``bench journal``: it reads the ring's cursors, asks the policy, writes one group through
``JournalWriter`` and publishes DURABLE.
"""

from __future__ import annotations

import dataclasses

from bookie.workers.journal import JournalWriter
from bookie.workers.ring import DURABLE, WRITE


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


class GroupCommitter:
    """One step of the journal's loop, shared by the journal worker and ``bench journal``:
    look at the ring's WRITE cursor and, when the policy says so, write everything from the
    journal's position up to it as one durable group and publish DURABLE.

    Invariant: DURABLE is published only after ``JournalWriter.append`` (fdatasync) returned.
    """

    def __init__(self, writer: JournalWriter, ring, policy: GroupCommitPolicy):
        self.writer = writer
        self.ring = ring
        self.policy = policy
        self.groups = 0
        self._first_seen: float | None = None

    def step(self, now_s: float) -> tuple[bool, float | None]:
        """Returns (a group was written, seconds to wait for more before the next step; None
        when nothing is queued).  Raises OSError from the write or fdatasync."""
        write = self.ring.get(WRITE)
        pending = write - self.writer.position
        if pending <= 0:
            return False, None
        if self._first_seen is None:
            self._first_seen = now_s
        age_s = now_s - self._first_seen
        # The journal takes everything up to WRITE in one group, so once WRITE is read nothing
        # queued is left behind: the queue is empty.  (WRITE having moved since the last look
        # only says adds came, not that more are coming; waiting on it cost an idle journal the
        # whole group wait before its first fdatasync.)  Groups form by themselves while an
        # fdatasync runs: what arrives meanwhile is the next group.
        if not self.policy.should_flush(pending, age_s, more_waiting=False):
            return False, self.policy.wait_s(age_s)
        self.writer.append(self.ring.slices(self.writer.position, write))
        self.ring.set(DURABLE, self.writer.position)
        self.groups += 1
        self._first_seen = None
        return True, 0.0

