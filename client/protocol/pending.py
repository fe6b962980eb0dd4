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
"""

from __future__ import annotations


class PendingAdds:
    __slots__ = ("ensemble_size", "write_quorum", "ack_quorum", "lac", "next_entry_id",
                 "_data", "_masks", "_counts", "_head", "_failed_mask")

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int, lac: int = -1):
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self.lac = lac
        self.next_entry_id = lac + 1
        # Parallel lists; index (entry_id - lac - 1 + _head).  Popped from the front by moving
        # _head, compacted now and then, so advancing the LAC costs O(1) per entry.
        self._data: list = []
        self._masks: list[int] = []
        self._counts: list[int] = []
        self._head = 0
        self._failed_mask = 0

    def __len__(self) -> int:
        return self.next_entry_id - self.lac - 1

    def append(self, data) -> int:
        """Record the next entry (already formatted); returns its entry id."""
        entry_id = self.next_entry_id
        self.next_entry_id += 1
        self._data.append(data)
        self._masks.append(0)
        self._counts.append(0)
        return entry_id

    def extend(self, datas) -> int:
        """Record the next ``len(datas)`` entries (already formatted); returns the first id."""
        entry_id = self.next_entry_id
        n = len(datas)
        self.next_entry_id += n
        self._data.extend(datas)
        zeros = [0] * n
        self._masks.extend(zeros)
        self._counts.extend(zeros)
        return entry_id

    def data(self, entry_id: int):
        return self._data[self._head + entry_id - self.lac - 1]

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
        while head < n and counts[head] >= qa:
            head += 1
        if head == start:
            return None
        first = self.lac + 1
        self.lac += head - start
        self._data[start:head] = [None] * (head - start)  # drop confirmed entries' bytes now
        self._head = head
        if head > 4096 and head * 2 > n:
            del self._data[:head], self._masks[:head], self._counts[:head]
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
        self._data, self._masks, self._counts, self._head = [], [], [], 0
        self.next_entry_id = self.lac + 1
        return first, last
