"""Every replica's copy of a range of entries: what ``verifyledger``, the auditor's check of a
verifiable ledger and a reader that found a Merkle root mismatch compare (issue 43).

Theory of operation
-------------------
Unlike ``ReadOp`` (one good copy of each entry, from the first replica that has one),
``CopiesOp`` asks each bookie of each entry's write set for that entry - one READ of one entry
per (entry, bookie), at most ``window`` in flight - and keeps, per entry and bookie, the
RFC 9162 leaf hash of the payload it returned (a copy whose digest, ledger or entry id is wrong
is kept as a problem, as is a replica that does not hold it or did not answer).  ``only``
restricts it to one bookie.  It never fails: it finishes with the table, and the caller decides
(``bookie.client.verify.resolve_leaves``).
"""

from __future__ import annotations

import collections

from bookie.client.errors import DigestMismatchError
from bookie.client.merkle import leaf_hash
from bookie.client.protocol import actions as A
from bookie.client.protocol.lac import NOTHING_THERE
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import write_set
from bookie.wire import Status

WINDOW = 256  # READs in flight


def replicas(info: LedgerInfo, entry_id: int) -> tuple[str, ...]:
    """The bookies of ``entry_id``'s write set under ``info``."""
    ensemble = info.ensemble_for(entry_id)
    return tuple(ensemble[p] for p in write_set(entry_id, info.ensemble_size, info.write_quorum))


class CopiesOp:
    """Finishes with ``{entry_id: {bookie: leaf hash (bytes) or problem (str)}}``."""

    def __init__(self, info: LedgerInfo, first: int, last: int, decode, only: str | None = None,
                 window: int = WINDOW):
        self.info, self.decode, self.window = info, decode, window
        self.copies: dict[int, dict[str, bytes | str]] = {e: {} for e in range(first, last + 1)}
        self._todo = collections.deque(
            (e, b) for e in range(first, last + 1) for b in replicas(info, e)
            if only is None or b == only)
        self._in_flight = 0
        self.done = False

    def start(self, now: float = 0.0) -> list:
        return self._more()

    def handle(self, event, now: float = 0.0) -> list:
        if type(event) is not A.ReadResponse or self.done:
            return []
        req = event.request
        self._in_flight -= 1
        self.copies[req.first_entry_id][req.bookie] = self._copy(req.first_entry_id, event)
        return self._more()

    def _copy(self, entry_id: int, event) -> bytes | str:
        if event.status == Status.OK:
            if not len(event.entries):
                return "an empty answer"
            try:
                entry = self.decode(event.entries[0])
            except DigestMismatchError as exc:
                return f"bad digest ({exc})"
            if entry.entry_id != entry_id:
                return f"returned entry {entry.entry_id}"
            return leaf_hash(entry.data)
        if event.status in NOTHING_THERE:
            return "does not hold it"
        return A.status_name(event.status)

    def _more(self) -> list:
        out: list = []
        while self._todo and self._in_flight < self.window:
            entry_id, bookie = self._todo.popleft()
            self._in_flight += 1
            out.append(A.SendRead(bookie, entry_id, 1))
        if not self._todo and not self._in_flight and not self.done:
            self.done = True
            out.append(A.Finished(result=self.copies))
        return out
