"""Reading a range of entries, each from one replica of its write set, falling back in order.

Theory of operation
-------------------
Every wanted entry starts at the first replica of its write set (the write sets rotate, so
consecutive entries spread over the ensemble), or at the first one not in ``avoid`` (bookies
that failed to answer lately: they are tried last).  Entries wanted from the same bookie are asked
for together: the ids of one write-set position of a fragment are every E-th entry, so each
arithmetic run of ids (consecutive with E = 1, every E-th with a striped ensemble) is one READ
from its lowest id, with flag STRIDE when the step is not 1.  The bookie returns the entries it
holds of that run (at most ``max_count``, at most MAX_READ_BYTES), possibly fewer than asked; the
i-th entry of an answer stands for ``first + i * stride``:

* an entry returned intact (good digest, this ledger's id, the entry id its place in the answer
  stands for) is done;
* a bad copy - bad digest, another ledger's entry, or an entry id other than the one asked
  for - is no use: that entry moves to its next replica (a corrupt replica is skipped, never
  asked again for the same entry);
* an entry skipped by an answer that returned higher ids, or the first entry of a NO_ENTRY
  answer, is missing there: it moves to its next replica;
* entries after the last one returned are asked for again from the same bookie (each such
  READ starts past the previous one's first entry, so a bookie's answers always progress);
* any other error or a timeout moves every entry of that request to its next replica.

Speculative reads (``speculative_timeout_s`` > 0, BookKeeper's ``speculativeReadTimeout``): a
READ that a bookie has not answered that long after it was sent - the bookie is stopped, dead or
swamped - does not wait for the read timeout.  On the next ``Tick`` its entries still wanted are
asked of their next replica, and the op says ``Suspect(bookie)`` so that later reads start
elsewhere (the I/O thread forgets the suspicion at the bookie's next answer).  The first request
stays in flight: if its answer still comes, the intact entries it brings are taken (whichever
copy arrives first wins), and whatever else it says about them is ignored, since they have
moved on already.  An entry whose replicas are all asked waits for them.

An entry with no replica left fails the read: DigestMismatchError if some replica returned a
bad copy, NoSuchEntryError if every replica said it does not hold it, otherwise a timeout /
bookie error naming the replicas.  Once finished (done or failed) the op asks for nothing
more.  Entries are handed out in order as the prefix of
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
from bookie.wire import MAX_STRIDE, Status

MAX_COUNT = 4096  # entries asked for in one READ
# what a replica's answer said about an entry (kinds of ReadOp notes)
_CORRUPT, _MISSING, _TIMEOUT, _FAILED = "corrupt", "missing", "timeout", "failed"


@dataclasses.dataclass(slots=True)
class Deliver:
    """The next entries of the range, in order (decoded LedgerEntry objects)."""
    entries: list


def decode_each(decode: Callable[[bytes], object], raws) -> list:
    """``decode`` each formatted entry; a DigestMismatchError is returned in its place."""
    out = []
    for raw in raws:
        try:
            out.append(decode(raw))
        except DigestMismatchError as exc:
            out.append(exc)
    return out


class ReadOp:
    def __init__(self, info: LedgerInfo, first: int, last: int,
                 decode: Callable[[bytes], object], max_count: int = MAX_COUNT,
                 decode_many: Callable[[list], list] | None = None,
                 avoid: frozenset = frozenset(), speculative_timeout_s: float = 0.0):
        """
        Args:
            decode: formatted entry -> LedgerEntry; raises DigestMismatchError.
            decode_many: optional, entries of one answer -> a list holding, per entry, the
                LedgerEntry or the DigestMismatchError (returned, not raised).
            avoid: bookies that failed lately: each entry tries them after its other replicas
                (so one dead bookie does not cost a timeout per read).
            speculative_timeout_s: a READ unanswered this long moves its entries to their next
                replica at the next Tick (0: never; only a failure or timeout moves them).
        """
        self.avoid = avoid
        if first < 0 or last < first:
            raise ValueError(f"bad entry range {first}..{last}")
        self.info = info
        self.first, self.last = first, last
        self.decode = decode
        self.decode_many = decode_many or self._decode_each
        self.max_count = max_count
        n = last - first + 1
        self._got: list = [None] * n
        # Replicas are computed per entry only when needed (start, fallback): they depend on
        # the fragment and e % E alone, so each distinct tuple is built once.
        self._replica_cache: dict[tuple[int, int], tuple[str, ...]] = {}
        self._choice: dict[int, int] = {}  # entry id -> index into its replicas (0 if absent)
        self._why: dict[int, list[tuple[str, str]]] = {}  # entry id -> (kind, what) per replica
        self._delivered = 0  # entries first .. first+_delivered-1 handed out
        self._outstanding: dict[str, set[int]] = {}  # bookie -> entry ids asked for
        self.speculative_timeout_s = speculative_timeout_s
        # how often the driver should Tick this op (0: no ticks wanted)
        self.tick_s = speculative_timeout_s / 4
        self._now = 0.0  # the latest time seen (start or handle)
        self._sent: dict[int, tuple[float, A.SendRead]] = {}  # id(READ) -> (sent at, READ)
        # bookie -> entries asked of it that moved on speculatively (its late answer may bring them)
        self._speculated: dict[str, set[int]] = {}
        self._parked: set[int] = set()  # entries out of replicas, waiting for a late answer
        self.done = False

    def _fragments(self):
        """(lo, hi, fragment first, ensemble) for each fragment overlapping first..last."""
        frags = self.info.fragments
        for k, (ffirst, ens) in enumerate(frags):
            nxt = frags[k + 1][0] if k + 1 < len(frags) else self.last + 1
            lo, hi = max(ffirst, self.first), min(nxt - 1, self.last)
            if lo <= hi:
                yield lo, hi, ffirst, ens

    def _replicas(self, entry_id: int) -> tuple[str, ...]:
        frags = self.info.fragments
        k = len(frags) - 1
        while k > 0 and frags[k][0] > entry_id:
            k -= 1
        e_size = self.info.ensemble_size
        key = (k, entry_id % e_size)
        reps = self._replica_cache.get(key)
        if reps is None:
            ens = frags[k][1]
            reps = tuple(ens[p] for p in write_set(entry_id, e_size, self.info.write_quorum))
            if self.avoid:  # stable: the write-set order among the healthy, suspects last
                reps = tuple(sorted(reps, key=self.avoid.__contains__))
            self._replica_cache[key] = reps
        return reps

    def start(self, now: float = 0.0) -> list:
        self._now = now
        # Entry e starts at the first replica of its write set, position e % E: every E-th
        # entry of a fragment goes to one bookie, as one striped run.
        e_size = self.info.ensemble_size
        out = []
        for lo, hi, _, ens in self._fragments():
            for p in range(min(e_size, hi - lo + 1)):
                e0 = lo + p
                first_choice = self._replicas(e0)[0] if self.avoid else ens[e0 % e_size]
                out += self._ask(first_choice, list(range(e0, hi + 1, e_size)))
        return out

    def _ask(self, bookie: str, ids: list[int]) -> list:
        """READs for ``ids`` (ascending) from ``bookie``: one per arithmetic run of ids (a
        bookie answers a READ with every stride-th entry from its first), at most max_count
        ids each, all sent at once."""
        out = []
        self._outstanding.setdefault(bookie, set()).update(ids)
        i, n, max_count = 0, len(ids), self.max_count
        while i < n:
            lo = ids[i]
            step = ids[i + 1] - lo if i + 1 < n else 1
            if step > MAX_STRIDE:
                step = 1
            # ids[i..j] is one run when ids[j] - ids[i] == (j - i) * step (ascending, distinct)
            j = min(i + max_count, n) - 1
            if ids[j] - lo != (j - i) * step:
                j = i
                while j + 1 < n and ids[j + 1] == ids[j] + step and j + 1 - i < max_count:
                    j += 1
            out.append(A.SendRead(bookie, lo, j - i + 1, step))
            i = j + 1
        if self.speculative_timeout_s > 0:
            now, sent = self._now, self._sent
            for a in out:
                sent[id(a)] = (now, a)
        return out

    def handle(self, event, now: float = 0.0) -> list:
        if self.done:
            return []
        self._now = now
        if not isinstance(event, A.ReadResponse):
            return self._speculate(now) if isinstance(event, A.Tick) else []
        req = event.request
        if self._sent:
            self._sent.pop(id(req), None)
        bookie = req.bookie
        first, got = self.first, self._got
        lo, stride = req.first_entry_id, req.stride
        hi = min(lo + (req.max_count - 1) * stride, self.last)
        asked = self._outstanding.get(bookie, set())
        # The entries this request stood for: cost in the request's span, never in all that
        # is outstanding at the bookie.
        span = range(lo, hi + 1, stride)
        if lo >= first and asked.issuperset(span) and \
                got[lo - first:hi - first + 1:stride].count(None) == len(span):
            mine = list(span)  # the common case, in C: every entry of the span still wanted
        else:
            mine = [e for e in span if e >= first and e in asked and got[e - first] is None]
        asked.difference_update(mine)
        mine_set = set(mine)
        moved: list[int] = []  # entries to try on their next replica
        again: list[int] = []  # entries to ask this bookie for again
        late = self._speculated.get(bookie)
        gone: set = set()
        if late:  # a late answer: it may bring intact copies of entries that moved on meanwhile
            gone = {e for e in range(lo, hi + 1, stride) if e in late}
            late.difference_update(gone)
            gone = {e for e in gone if got[e - first] is None}
        if event.status == Status.OK:
            self._take_answer(bookie, lo, hi, stride, event.entries,
                              mine_set | gone if gone else mine_set, moved, again)
            if gone:  # what it says of those beyond an intact copy is moot: they moved on
                moved = [e for e in moved if e not in gone]
                again = [e for e in again if e not in gone]
        elif event.status in (Status.NO_ENTRY, Status.NO_LEDGER):
            for e in mine:
                if e == lo or event.status == Status.NO_LEDGER:
                    self._note(e, _MISSING, f"{bookie}: no entry")
                    moved.append(e)
                else:
                    again.append(e)
        elif event.status == Status.UNAUTHORIZED:
            return self._fail(UnauthorizedError(
                f"bookie {bookie} refused to read ledger {self.info.ledger_id}: unauthorized",
                ledger_id=self.info.ledger_id))
        else:
            kind = _TIMEOUT if event.status in (A.TIMEOUT, A.UNREACHABLE) else _FAILED
            for e in mine:
                self._note(e, kind, f"{bookie}: {A.status_name(event.status)}")
                moved.append(e)
        if gone and self._parked:  # entries that had only this late answer left to wait for
            for e in sorted(gone & self._parked):
                if got[e - first] is None and not self._still_asked(e):
                    return self._fail(self._exhausted(e))
        out: list = []
        if again:
            out += self._ask(bookie, again)
        by_bookie: dict[str, list[int]] = {}
        for e in sorted(moved):
            choice = self._choice.get(e, 0) + 1
            self._choice[e] = choice
            replicas = self._replicas(e)
            if choice >= len(replicas):
                if self._speculated and self._still_asked(e):
                    self._parked.add(e)  # a replica left behind speculatively may still answer
                    continue
                return self._fail(self._exhausted(e))
            by_bookie.setdefault(replicas[choice], []).append(e)
        for b, ids in by_bookie.items():
            out += self._ask(b, ids)
        return self._deliver() + out

    def _still_asked(self, entry_id: int) -> bool:
        """Whether a READ left behind speculatively may still bring ``entry_id``."""
        return any(entry_id in s for s in self._speculated.values())

    def _speculate(self, now: float) -> list:
        """READs unanswered for ``speculative_timeout_s``: their entries still wanted go to
        their next replica (those with none left keep waiting), and their bookies are
        suspects."""
        timeout_s = self.speculative_timeout_s
        if not self._sent or timeout_s <= 0:
            return []
        due = [k for k, (sent, _) in self._sent.items() if now - sent >= timeout_s]
        if not due:
            return []
        first, got = self.first, self._got
        by_bookie: dict[str, list[int]] = {}
        suspects: list[str] = []
        for k in due:
            _, req = self._sent.pop(k)
            bookie, lo, stride = req.bookie, req.first_entry_id, req.stride
            hi = min(lo + (req.max_count - 1) * stride, self.last)
            asked = self._outstanding.get(bookie, set())
            late = self._speculated.setdefault(bookie, set())
            wanted = False
            for e in range(lo, hi + 1, stride):
                if e not in asked or got[e - first] is not None:
                    continue
                wanted = True
                choice = self._choice.get(e, 0) + 1
                replicas = self._replicas(e)
                if choice >= len(replicas):
                    continue  # no other replica: wait for this one
                self._choice[e] = choice
                asked.discard(e)
                late.add(e)
                self._note(e, _TIMEOUT, f"{bookie}: no answer in "
                                        f"{timeout_s * 1000:g} ms (read speculatively elsewhere)")
                by_bookie.setdefault(replicas[choice], []).append(e)
            if wanted and bookie not in suspects:
                suspects.append(bookie)
        out: list = [A.Suspect(b) for b in suspects]
        for b, ids in by_bookie.items():
            out += self._ask(b, sorted(ids))
        return out

    def _take_answer(self, bookie: str, lo: int, hi: int, stride: int, entries, mine_set: set,
                     moved: list, again: list) -> None:
        """Sort the entries of an OK answer to a READ from ``lo``: each wanted entry is got,
        moved to its next replica, or asked for again (only entries after the answer's end).

        A bookie answers with the entries it holds of the run from ``lo``, so the i-th one
        stands for entry lo + i * stride.  A copy that does not check out (digest, ledger id, or an
        entry id that was not asked for) is a bad copy of the entry whose place it takes: that
        entry moves on.  Every entry up to the answer's end is settled here, so a bookie that
        keeps answering badly is never asked for the same entries twice.
        """
        got, first = self._got, self.first
        highest = lo + (len(entries) - 1) * stride  # the entry the answer's last place stands for
        decoded = self.decode_many(entries)
        if self._take_run(decoded, lo, highest, stride, mine_set):
            decoded = ()  # taken whole; what it did not bring is sorted below
        for i, entry in enumerate(decoded):
            place = lo + i * stride
            if isinstance(entry, DigestMismatchError):
                claimed = getattr(entry, "entry_id", None)
                e = claimed if claimed in mine_set else place
                if e in mine_set:
                    self._note(e, _CORRUPT, f"{bookie}: bad copy ({entry})")
                    moved.append(e)
                    mine_set.discard(e)
                continue
            e = entry.entry_id
            if e in mine_set and lo <= e <= hi:
                mine_set.discard(e)
                got[e - first] = entry
                if e > highest:  # an answer that skips entries it does not hold
                    highest = e
            elif place in mine_set:
                self._note(place, _CORRUPT, f"{bookie}: bad copy (entry {e} in the place of "
                                            f"entry {place})")
                moved.append(place)
                mine_set.discard(place)
        for e in sorted(mine_set):  # what this bookie did not return (well)
            if not entries:
                self._note(e, _FAILED, f"{bookie}: empty answer")
                moved.append(e)
            elif e <= highest:
                self._note(e, _MISSING, f"{bookie}: no entry")
                moved.append(e)
            else:
                again.append(e)

    def _take_run(self, decoded, lo: int, highest: int, stride: int, mine_set: set) -> bool:
        """The common answer in one step: every entry intact (a run decoded in one pass says
        so, ``EntryRun``), each the entry its place stands for, and each still wanted.  Takes
        them all (slice assignment) and returns True; anything else returns False and is
        sorted entry by entry."""
        ids = getattr(decoded, "entry_ids", None)
        if ids is None or not decoded.intact or not decoded:
            return False
        if ids != list(range(lo, highest + 1, stride)) or not mine_set.issuperset(ids):
            return False
        at = lo - self.first
        self._got[at:at + (len(ids) - 1) * stride + 1:stride] = decoded
        mine_set.difference_update(ids)
        return True

    def _decode_each(self, raws) -> list:
        return decode_each(self.decode, raws)

    def _note(self, entry_id: int, kind: str, why: str) -> None:
        self._why.setdefault(entry_id, []).append((kind, why))

    def _exhausted(self, entry_id: int) -> BookKeeperError:
        why = self._why.get(entry_id, [])
        kinds = {kind for kind, _ in why}
        lid = self.info.ledger_id
        detail = "; ".join(text for _, text in why)
        if _CORRUPT in kinds:
            return DigestMismatchError(
                f"ledger {lid} entry {entry_id}: no replica returned an intact copy "
                f"({detail}); the data is corrupt or the digest type/password is wrong",
                ledger_id=lid, entry_id=entry_id)
        if kinds == {_MISSING}:
            return NoSuchEntryError(f"ledger {lid} entry {entry_id} is on none of its replicas "
                                    f"({detail}); it is past the ledger's end", ledger_id=lid)
        if _TIMEOUT in kinds:
            return BKTimeoutError(f"ledger {lid} entry {entry_id}: no replica answered in time "
                                  f"({detail}); are its bookies up?", ledger_id=lid)
        return BookieError(f"ledger {lid} entry {entry_id}: every replica failed ({detail})",
                           ledger_id=lid)

    def _deliver(self) -> list:
        start, got = self._delivered, self._got
        n = len(got)
        i = start
        while i < n and got[i] is not None:  # (not list.index: that calls entries' __eq__)
            i += 1
        if i == start:
            return []
        self._delivered = i
        batch = got[start:i]
        got[start:i] = [True] * (i - start)  # keep "done" without holding the entries
        out: list = [Deliver(batch)]
        if i == n:
            self.done = True
            out.append(A.Finished(result=self.last))
        return out

    def _fail(self, error: BookKeeperError) -> list:
        self.done = True
        return [A.Finished(error=error)]

