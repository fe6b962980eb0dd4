"""One step of the journal's group commit: read the ring's cursors, ask the policy
(bookie.core.group_commit), write one group through ``JournalWriter`` and publish DURABLE.
Shared by the journal worker and ``bench journal``.
"""

from __future__ import annotations

import time

from bookie.core.group_commit import GroupCommitPolicy
from bookie.storage.journal import JournalWriter
from bookie.storage.ring import DURABLE, WRITE


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
        self.last_group_s = 0.0  # write + fdatasync of the last group (metrics)
        self.last_group_bytes = 0
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
        started = time.perf_counter()
        self.writer.append(self.ring.slices(self.writer.position, write))
        self.last_group_s = time.perf_counter() - started
        self.last_group_bytes = pending
        self.ring.set(DURABLE, self.writer.position)
        self.groups += 1
        self._first_seen = None
        return True, 0.0
