"""Reading a range of entries, each from one replica of its write set, falling back in order.

Theory of operation
-------------------
Every wanted entry starts at the first replica of its write set (the write sets rotate, so
consecutive entries spread over the ensemble).  Entries wanted from the same bookie are asked
for together with one READ from the lowest of them; the bookie returns the entries it holds
from there on (at most ``max_count``, at most MAX_READ_BYTES), possibly fewer than asked:

* an entry returned with a good digest is done;
* an entry returned with a bad digest, or skipped by an answer that returned higher ids, or
  the first entry of a NO_ENTRY answer, is missing there: it moves to its next replica;
* entries after the last one returned are asked for again from the same bookie;
* any other error or a timeout moves every entry of that request to its next replica.

An entry with no replica left fails the read: DigestMismatchError if some replica returned it
with a bad digest, NoSuchEntryError if every replica said it does not hold it, otherwise a
timeout / bookie error naming the replicas.  Entries are handed out in order as the prefix of
the range completes (``Deliver``), so a caller can stream a long range.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from bookie.client.errors import (BKTimeoutError, BookieError, BookKeeperError,
                                  DigestMismatchError, NoSuchEntryError, UnauthorizedError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import write_set
from bookie.wire import Status

MAX_COUNT = 4096  # entries asked for in one READ


@dataclasses.dataclass(slots=True)
class Deliver:
    """The next entries of the range, in order (decoded LedgerEntry objects)."""
    entries: list


class ReadOp:
    def __init__(self, info: LedgerInfo, first: int, last: int,
                 decode: Callable[[bytes], object], max_count: int = MAX_COUNT):
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        self.info = info
        self.first, self.last = first, last
        self.decode = decode
        self.max_count = max_count
        n = last - first + 1
        self._got: list = [None] * n
        self._replicas: list[tuple[str, ...]] = []
        for e in range(first, last + 1):
            ens = info.ensemble_for(e)
            self._replicas.append(tuple(ens[p] for p in
                                        write_set(e, info.ensemble_size, info.write_quorum)))
        self._choice = [0] * n  # index into the entry's replicas
        self._why: list[list[str] | None] = [None] * n  # per entry: what failed where
        self._delivered = 0  # entries first .. first+_delivered-1 handed out
        self._outstanding: dict[str, set[int]] = {}  # bookie -> entry ids asked for
        self.done = False

    def start(self) -> list:
        by_bookie: dict[str, list[int]] = {}
        for i, reps in enumerate(self._replicas):
            by_bookie.setdefault(reps[0], []).append(self.first + i)
        out = []
        for bookie, ids in by_bookie.items():
            out += self._ask(bookie, ids)
        return out

    def _ask(self, bookie: str, ids: list[int]) -> list:
        """READs for ``ids`` (ascending) from ``bookie``: one per run of consecutive ids (a
        bookie answers with consecutive entries only; striped ledgers leave gaps), at most
        max_count ids each, all sent at once."""
        out = []
        asked = self._outstanding.setdefault(bookie, set())
        i = 0
        while i < len(ids):
            lo = ids[i]
            j = i
            while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1 and ids[j + 1] - lo < self.max_count:
                j += 1
            out.append(A.SendRead(bookie, lo, ids[j] - lo + 1))
            asked.update(ids[i:j + 1])
            i = j + 1
        return out

    def handle(self, event, now: float = 0.0) -> list:
        if self.done or not isinstance(event, A.ReadResponse):
            return []
        req = event.request
        bookie = req.bookie
        lo, hi = req.first_entry_id, req.first_entry_id + req.max_count - 1
        asked = self._outstanding.get(bookie, set())
        mine = sorted(e for e in asked if lo <= e <= hi and self._got[e - self.first] is None)
        asked.difference_update(mine)
        moved: list[int] = []  # entries to try on their next replica
        again: list[int] = []  # entries to ask this bookie for again
        if event.status == Status.OK:
            highest = lo - 1
            for raw in event.entries:
                try:
                    entry = self.decode(raw)
                except DigestMismatchError as exc:
                    e = getattr(exc, "entry_id", None)
                    if e is not None and e in mine:
                        self._note(e, f"{bookie}: digest mismatch")
                        moved.append(e)
                        highest = max(highest, e)
                    continue
                e = entry.entry_id
                highest = max(highest, e)
                if e in mine and self._got[e - self.first] is None:
                    self._got[e - self.first] = entry
            for e in mine:
                if self._got[e - self.first] is not None or e in moved:
                    continue
                if e < highest or (not event.entries and e == lo):
                    self._note(e, f"{bookie}: no entry")
                    moved.append(e)
                elif event.entries:
                    again.append(e)
                else:
                    self._note(e, f"{bookie}: empty answer")
                    moved.append(e)
        elif event.status in (Status.NO_ENTRY, Status.NO_LEDGER):
            for e in mine:
                if e == lo or event.status == Status.NO_LEDGER:
                    self._note(e, f"{bookie}: no entry")
                    moved.append(e)
                else:
                    again.append(e)
        elif event.status == Status.UNAUTHORIZED:
            return self._fail(UnauthorizedError(
                f"bookie {bookie} refused to read ledger {self.info.ledger_id}: unauthorized",
                ledger_id=self.info.ledger_id))
        else:
            for e in mine:
                self._note(e, f"{bookie}: {A.status_name(event.status)}")
                moved.append(e)
        out: list = []
        if again:
            out += self._ask(bookie, again)
        by_bookie: dict[str, list[int]] = {}
        for e in sorted(moved):
            i = e - self.first
            self._choice[i] += 1
            if self._choice[i] >= len(self._replicas[i]):
                return self._fail(self._exhausted(e))
            by_bookie.setdefault(self._replicas[i][self._choice[i]], []).append(e)
        for b, ids in by_bookie.items():
            out += self._ask(b, ids)
        return self._deliver() + out

    def _note(self, entry_id: int, why: str) -> None:
        i = entry_id - self.first
        if self._why[i] is None:
            self._why[i] = []
        self._why[i].append(why)

    def _exhausted(self, entry_id: int) -> BookKeeperError:
        why = self._why[entry_id - self.first] or []
        lid = self.info.ledger_id
        detail = "; ".join(why)
        if any("digest mismatch" in w for w in why):
            return DigestMismatchError(
                f"ledger {lid} entry {entry_id}: no replica returned it with a matching digest "
                f"({detail}); the data is corrupt or the digest type/password is wrong",
                ledger_id=lid)
        if all("no entry" in w for w in why):
            return NoSuchEntryError(f"ledger {lid} entry {entry_id} is on none of its replicas "
                                    f"({detail}); it is past the ledger's end", ledger_id=lid)
        if any("timeout" in w for w in why):
            return BKTimeoutError(f"ledger {lid} entry {entry_id}: no replica answered in time "
                                  f"({detail}); are its bookies up?", ledger_id=lid)
        return BookieError(f"ledger {lid} entry {entry_id}: every replica failed ({detail})",
                           ledger_id=lid)

    def _deliver(self) -> list:
        start = self._delivered
        n = len(self._got)
        i = start
        while i < n and self._got[i] is not None:
            i += 1
        if i == start:
            return []
        self._delivered = i
        batch = self._got[start:i]
        for k in range(start, i):
            self._got[k] = True  # keep "done" without holding the entry
        out: list = [Deliver(batch)]
        if i == n:
            self.done = True
            out.append(A.Finished(result=self.last))
        return out

    def _fail(self, error: BookKeeperError) -> list:
        self.done = True
        return [A.Finished(error=error)]

