"""Reading the last-add-confirmed (LAC) of a ledger, optionally fencing it first.

Theory of operation
-------------------
``LacQuorumOp`` asks every bookie of the last fragment for its LAC (with ``fence`` it first
fences the ledger there).  It is conclusive once ``Coverage`` says (Qw - Qa) + 1 positions of
every write set answered; "no such ledger / entry" counts as an answer with LAC -1 (the
bookie holds nothing, so it can confirm nothing) - except a fence's "no such ledger": a bookie
the metadata names fences a ledger it holds nothing of (and answers LAC -1), so NO_LEDGER to a
fence means the bookie did not fence (the ledger's metadata does not name it: another bookie on
that address, or the ledger deleted) and that position failed, as an unreachable one would.  The result is the highest LAC seen.  A
plain (non-fencing) read also finishes when every bookie answered or failed, as long as one
answered: a LAC is a lower bound and a reader may use a low one.  A fence that finished holds
for good: once fenced, a ledger never takes a normal add again on that bookie, so no ack
quorum of the old writer can form any more.

``LongPollLacOp`` waits until some bookie of the last fragment reports a LAC above a given
entry (the bookies hold the request until then, or until its timeout).  Asked for entries
(``max_entries``), it asks one bookie of them to answer with the entries after that entry up to
its LAC (wire.py WITH_ENTRIES, BookKeeper's piggybacked read-LAC-and-entry): the one at the
next entry's first write-set position, which holds the next entry when the last fragment does.
The others are polled plain: every replica sending the same entries would multiply the bytes
for nothing.  The answer that finishes the op leaves its entries in ``entries`` (unchecked: the
caller verifies them as any read's, and reads what they do not cover).  A bookie that refuses
the flag (BAD_REQUEST: it predates it) is polled again without it, and named in ``refused`` so
the caller polls it plain from then on (``plain``).
"""

from __future__ import annotations

from bookie.client.errors import BookKeeperError, LedgerRecoveryError, UnauthorizedError
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import Coverage, fence_quorum
from bookie.wire import Status

NOTHING_THERE = (int(Status.NO_LEDGER), int(Status.NO_ENTRY))


class LacQuorumOp:
    """Read (and with ``fence``, fence) the LAC from the last fragment's ensemble.  Finishes
    with the highest LAC seen; ``coverage`` then says which positions answered."""

    def __init__(self, info: LedgerInfo, fence: bool):
        self.info = info
        self.fence = fence
        self.ensemble = info.last_ensemble
        self.coverage = Coverage(info.ensemble_size, info.write_quorum, info.ack_quorum)
        self.max_lac = -1
        self.max_last_entry_id = -1
        self.done = False
        self._errors: list[str] = []

    def start(self) -> list:
        return [A.SendReadLac(b, fence=self.fence) for b in self.ensemble]

    def handle(self, event: A.LacResponse, now: float = 0.0) -> list:
        if self.done or not isinstance(event, A.LacResponse):
            return []
        bookie = event.request.bookie
        pos = self.ensemble.index(bookie)
        if event.status == Status.OK or (event.status in NOTHING_THERE and not (
                self.fence and event.status == Status.NO_LEDGER)):  # a fence it did not make
            self.coverage.answer(pos)
            if event.status == Status.OK:
                self.max_lac = max(self.max_lac, event.lac)
                self.max_last_entry_id = max(self.max_last_entry_id, event.last_entry_id)
        elif event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {bookie} refused the master key of ledger {self.info.ledger_id}: "
                f"wrong password", ledger_id=self.info.ledger_id))
        else:
            self.coverage.fail(pos)
            self._errors.append(f"{bookie}: {A.status_name(event.status)}")
        if self.coverage.covered:
            return self._finish(result=self.max_lac)
        if self.coverage.hopeless and (self.fence or not self.coverage.answered):
            what = "fence" if self.fence else "read the last-add-confirmed of"
            return self._finish(error=LedgerRecoveryError(
                f"could not {what} ledger {self.info.ledger_id}: too many bookies of its last "
                f"ensemble failed ({'; '.join(self._errors)}); need (Qw-Qa)+1="
                f"{fence_quorum(self.info.write_quorum, self.info.ack_quorum)} answers from "
                f"every write quorum - bring bookies back and retry",
                ledger_id=self.info.ledger_id))
        if not self.fence and self.coverage.all_done and self.coverage.answered:
            return self._finish(result=self.max_lac)
        return []

    def _finish(self, result=None, error: BookKeeperError | None = None) -> list:
        self.done = True
        return [A.Finished(result=result, error=error)]


class LongPollLacOp:
    """Wait until some bookie of the last fragment reports a LAC above ``after``.

    Every bookie of the last ensemble is asked with a long poll; the first answer above
    ``after`` finishes the op, otherwise it finishes with the highest LAC seen once every bookie
    answered or timed out (possibly not above ``after``: the caller's wait ran out).

    With ``max_entries`` > 0 one bookie not in ``plain`` is asked for the entries too (module
    doc); ``entries`` then holds those of the answer that finished the op (a ``RawEntries``,
    unchecked), or None.  ``refused``: bookies that refused to send entries.
    """

    def __init__(self, info: LedgerInfo, after: int, timeout_s: float, max_entries: int = 0,
                 max_bytes: int = 0, plain: frozenset | set = frozenset()):
        self.info = info
        self.after = after
        self.timeout_s = timeout_s
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.max_lac = -1
        self.pending = set(info.last_ensemble)
        self.done = False
        self.entries = None
        self.refused: set[str] = set()
        ensemble = info.last_ensemble
        carrier = ensemble[(after + 1) % len(ensemble)]
        self.carrier = carrier if max_entries > 0 and carrier not in plain else None

    def start(self) -> list:
        return [self._poll(b, b == self.carrier) for b in self.info.last_ensemble]

    def _poll(self, bookie: str, with_entries: bool) -> A.SendReadLac:
        if with_entries:
            return A.SendReadLac(bookie, long_poll_after=self.after, timeout_s=self.timeout_s,
                                 max_entries=self.max_entries, max_bytes=self.max_bytes)
        return A.SendReadLac(bookie, long_poll_after=self.after, timeout_s=self.timeout_s)

    def handle(self, event, now: float = 0.0) -> list:
        if self.done or not isinstance(event, A.LacResponse):
            return []
        bookie = event.request.bookie
        if event.status == Status.BAD_REQUEST and event.request.max_entries:
            self.refused.add(bookie)  # a bookie that predates WITH_ENTRIES: poll it plain
            return [self._poll(bookie, False)]
        self.pending.discard(bookie)
        if event.status == Status.OK:
            self.max_lac = max(self.max_lac, event.lac)
        if self.max_lac > self.after or not self.pending:
            self.done = True
            if event.status == Status.OK and event.lac > self.after:
                self.entries = event.entries
            return [A.Finished(result=self.max_lac)]
        return []


class FirstLacOp:
    """BookKeeper's ``tryReadLastAddConfirmed``: ask every bookie of the last fragment for its
    LAC without fencing, and finish with the first OK answer (no quorum is waited for: a LAC
    is a lower bound, and a reader may use a low one).  When no bookie answers OK, it finishes
    with -1 if some answered that they hold nothing, else with a LedgerRecoveryError naming
    each bookie's failure."""

    def __init__(self, info: LedgerInfo):
        self.info = info
        self.pending = set(info.last_ensemble)
        self.nothing_there = False
        self.done = False
        self._errors: list[str] = []

    def start(self) -> list:
        return [A.SendReadLac(b, fence=False) for b in self.info.last_ensemble]

    def handle(self, event, now: float = 0.0) -> list:
        if self.done or not isinstance(event, A.LacResponse):
            return []
        bookie = event.request.bookie
        self.pending.discard(bookie)
        if event.status == Status.OK:
            return self._finish(result=event.lac)
        if event.status in NOTHING_THERE:
            self.nothing_there = True
        elif event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {bookie} refused the master key of ledger {self.info.ledger_id}: "
                f"wrong password", ledger_id=self.info.ledger_id))
        else:
            self._errors.append(f"{bookie}: {A.status_name(event.status)}")
        if self.pending:
            return []
        if self.nothing_there:
            return self._finish(result=-1)
        return self._finish(error=LedgerRecoveryError(
            f"could not read the last-add-confirmed of ledger {self.info.ledger_id}: no bookie "
            f"of its last ensemble answered ({'; '.join(self._errors)})",
            ledger_id=self.info.ledger_id))

    def _finish(self, result=None, error: BookKeeperError | None = None) -> list:
        self.done = True
        return [A.Finished(result=result, error=error)]
