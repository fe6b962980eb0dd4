"""Adds in flight and their acknowledgement to the caller, strictly in entry order.

Theory of operation
-------------------
``PendingAdds`` holds the entries after the last-add-confirmed (LAC): ``lac + 1`` up to the
last entry id handed out.  For each it keeps the formatted bytes (for re-sending after an
ensemble change) and a bit mask of the ensemble positions that acknowledged it.

An entry is *quorum-acked* when Qa positions of its write set acked it.  The LAC advances over
a prefix of quorum-acked entries only, so an entry is confirmed to the caller when it is
quorum-acked AND every lower entry was confirmed; ``ack`` returns the range newly confirmed,
which the caller completes in that order.

An ack is a fact "the bookie at position p holds entry e".  It counts only while p is not
marked failed: ``fail_position`` clears p's bits and ignores its acks until ``revive_position``
(called once a replacement bookie sits at p).  This keeps every confirmed entry at Qa copies
*in the ensemble recorded for it*, even when entries are confirmed while an ensemble change
is still being written to the metadata store.

Per run, not per entry: the formatted entries are kept as the runs the writer handed over
(``extend``: an ``EntryBatch`` stays one object, found again by bisect), and an ADD answer for
a run of consecutive ids to a bookie in every entry's write set (``range`` ids, Qw = E) is
counted with C-level ``map`` over slices of the masks and counts, the LAC moved over the run
the same way.  Anything else (striped write sets, ids in a list) is counted entry by entry.
Both ways give the same masks, counts and answers (tests/unit/test_pending_runs.py checks them
against the entry-by-entry count).
"""

from __future__ import annotations

import bisect
from itertools import compress, repeat
from operator import add, and_, ge, or_


class PendingAdds:
    __slots__ = ("ensemble_size", "write_quorum", "ack_quorum", "lac", "next_entry_id",
                 "_runs", "_run_firsts", "_masks", "_counts", "_head", "_failed_mask")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int, lac: int = -1):
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.lac = lac
        self.next_entry_id = lac + 1
        # The formatted entries, as the runs handed over: _runs[i] holds the entries from id
        # _run_firsts[i] on; runs wholly confirmed are dropped.
        self._runs: list = []
        self._run_firsts: list[int] = []
        # Parallel lists; index (entry_id - lac - 1 + _head).  Popped from the front by moving
        # _head, compacted now and then, so advancing the LAC costs O(1) per entry.
        self._masks: list[int] = []
        self._counts: list[int] = []
        self._head = 0
        self._failed_mask = 0

    def __len__(self) -> int:
        return self.next_entry_id - self.lac - 1

    def append(self, data) -> int:
        """Record the next entry (already formatted); returns its entry id."""
        return self.extend([data])

    def extend(self, datas) -> int:
        """Record the next ``len(datas)`` entries (already formatted, a sequence kept as it
        is: not to be changed after); returns the first id."""
        entry_id = self.next_entry_id
        n = len(datas)
        if not n:
            return entry_id
        self.next_entry_id += n
        self._runs.append(datas)
        self._run_firsts.append(entry_id)
        zeros = [0] * n
        self._masks.extend(zeros)
        self._counts.extend(zeros)
        return entry_id

    def data(self, entry_id: int):
        """The formatted entry ``entry_id`` (pending: after the LAC, before next_entry_id)."""
        i = bisect.bisect_right(self._run_firsts, entry_id) - 1
        return self._runs[i][entry_id - self._run_firsts[i]]

    def ack(self, position: int, entry_ids) -> tuple[int, int] | None:
        """Count acks from ``position`` for ``entry_ids``.

        Returns:
            (first, last) entry ids newly confirmed in order, or None when the LAC did not move.
        """
        bit = 1 << position
        if self._failed_mask & bit:
            return None
        base = self.lac + 1 - self._head
        masks, counts = self._masks, self._counts
        e_size, qw = self.ensemble_size, self.write_quorum
        n = len(masks)
        if type(entry_ids) is range and entry_ids.step == 1 and qw == e_size:
            lo = max(entry_ids.start - base, self._head)
            hi = min(entry_ids.stop - base, n)
            if lo < hi:
                run = masks[lo:hi]
                if not any(map(and_, run, repeat(bit))):  # no duplicate in it: the whole run
                    masks[lo:hi] = map(or_, run, repeat(bit))
                    counts[lo:hi] = map(add, counts[lo:hi], repeat(1))
                    return self._advance()
            entry_ids = range(base + lo, base + hi)  # some acked already: one by one
        for entry_id in entry_ids:
            i = entry_id - base
            if i < self._head or i >= n:
                continue  # already confirmed, or not ours
            m = masks[i]
            if m & bit or (position - entry_id) % e_size >= qw:
                continue  # duplicate ack, or a bookie outside the entry's write set
            masks[i] = m | bit
            counts[i] += 1
        return self._advance()

    def _advance(self) -> tuple[int, int] | None:
        counts, qa = self._counts, self.ack_quorum
        head = self._head
        n = len(counts)
        start = head
        if head < n and counts[head] >= qa:
            # the first entry short of its quorum, looked for in growing steps with C-level
            # maps (an answer confirms a run; most of the window is often unconfirmed)
            step = 64
            while head < n:
                window = counts[head:head + step]
                short = next(compress(range(len(window)), map(ge, repeat(qa - 1), window)), None)
                if short is not None:
                    head += short
                    break
                head += len(window)
                step *= 4
        if head == start:
            return None
        first = self.lac + 1
        self.lac += head - start
        self._head = head
        firsts = self._run_firsts
        done = bisect.bisect_right(firsts, self.lac + 1) - 1  # runs before it are confirmed
        if done > 0:
            del self._runs[:done], firsts[:done]
        if firsts and firsts[0] + len(self._runs[0]) <= self.lac + 1:
            self._runs.clear()
            firsts.clear()
        if head > 4096 and head * 2 > n:
            del self._masks[:head], self._counts[:head]
            self._head = 0
        return first, self.lac

    def fail_position(self, position: int) -> None:
        """Forget the acks of ``position`` for every pending entry and ignore its future acks."""
        bit = 1 << position
        self._failed_mask |= bit
        masks, counts = self._masks, self._counts
        for i in range(self._head, len(masks)):
            if masks[i] & bit:
                masks[i] &= ~bit
                counts[i] -= 1

    def revive_position(self, position: int) -> list[int]:
        """Count acks of ``position`` again (a new bookie sits there).

        Returns:
            the pending entry ids whose write set includes ``position`` (to be re-sent there).
        """
        self._failed_mask &= ~(1 << position)
        return [e for e in range(self.lac + 1, self.next_entry_id)
                if (position - e) % self.ensemble_size < self.write_quorum]

    def position_failed(self, position: int) -> bool:
        return bool(self._failed_mask & (1 << position))

    @property
    def failed_positions(self) -> list[int]:
        return [p for p in range(self.ensemble_size) if self._failed_mask & (1 << p)]

    def drain(self) -> tuple[int, int] | None:
        """Drop every pending entry (the ledger failed); returns their (first, last) or None.

        The LAC stays what was really confirmed; the dropped ids are handed out again only if
        the caller keeps adding, which a failed writer does not.
        """
        if self.next_entry_id == self.lac + 1:
            return None
        first, last = self.lac + 1, self.next_entry_id - 1
        self._runs, self._run_firsts, self._masks, self._counts, self._head = [], [], [], [], 0
        self.next_entry_id = self.lac + 1
        return first, last
