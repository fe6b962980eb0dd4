"""Reading the last-add-confirmed (optionally fencing) and recovering a ledger.

Theory of operation
-------------------
``LacQuorumOp`` asks every bookie of the last fragment for its LAC (with ``fence`` it first
fences the ledger there).  It is conclusive once ``Coverage`` says (Qw - Qa) + 1 positions of
every write set answered; "no such ledger / entry" counts as an answer with LAC -1 (the
bookie holds nothing, so it can confirm nothing).  The result is the highest LAC seen.  A
plain (non-fencing) read also finishes when every bookie answered or failed, as long as one
answered: a LAC is a lower bound and a reader may use a low one.

``RecoveryOp`` is the reader's close of a ledger whose writer may be gone:

1. fence with ``LacQuorumOp(fence=True)``; the highest LAC ``L`` is then final for the old
   writer (no ack quorum can form any more);
2. start at ``S = max(L, first entry of the last fragment - 1)``: every entry up to S was
   confirmed (a fragment starts at the writer's first unconfirmed entry), so S is read only
   for its running length and not re-written;
3. read forward one entry at a time from S + 1, one replica after another.  An entry exists
   when a replica returns it with a good digest; it does not exist once (Qw - Qa) + 1 replicas
   of its write set said "no entry" (a confirmed entry is missing from at most Qw - Qa of
   them).  Every entry found is re-added with the recovery flag to its whole write set and
   must be acked by at least Qa of it;
4. report (last entry found, ledger length); the caller closes the ledger with CAS.
"""

from __future__ import annotations

from typing import Callable

from bookie.client.errors import (BookKeeperError, DigestMismatchError, LedgerRecoveryError,
                                  UnauthorizedError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import Coverage, fence_quorum, write_set
from bookie.wire import Status

_NOTHING_THERE = (int(Status.NO_LEDGER), int(Status.NO_ENTRY))

Decoder = Callable[[bytes], object]  # formatted entry -> LedgerEntry; raises DigestMismatchError


class LacQuorumOp:
    """Read (and with ``fence``, fence) the LAC from the last fragment's ensemble."""

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
        if event.status == Status.OK or event.status in _NOTHING_THERE:
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



class RecoveryOp:
    """Fence, find the last entry, re-replicate the tail.  Finishes with (last_entry_id, length)."""

    FENCING, READING, DRAINING, DONE = "fencing", "reading", "draining", "done"

    def __init__(self, info: LedgerInfo, decode: Decoder):
        self.info = info
        self.decode = decode
        self.phase = self.FENCING
        self.fence_op = LacQuorumOp(info, fence=True)
        self.last_found = -1
        self.last_length = 0
        self._anchor = -1  # S: read for its length only
        self._entry = -1  # entry being read
        self._replicas: tuple[str, ...] = ()
        self._tried = 0
        self._missing = 0
        self._problems: list[str] = []
        self._adds: dict[int, list[int]] = {}  # entry id -> [acks, failures] of its re-add

    def start(self) -> list:
        return self.fence_op.start()

    def handle(self, event, now: float = 0.0) -> list:
        if self.phase == self.DONE:
            return []
        if isinstance(event, A.LacResponse):
            return self._on_fenced(self.fence_op.handle(event, now))
        if isinstance(event, A.ReadResponse):
            return self._on_read(event)
        if isinstance(event, A.AddResponse):
            return self._on_add(event)
        return []

    # -- 1. fencing ----------------------------------------------------------------------------

    def _on_fenced(self, out: list) -> list:
        if not out:
            return []
        finished = out[0]
        if finished.error is not None:
            return self._finish(error=finished.error)
        self.phase = self.READING
        start = max(finished.result, self.info.last_fragment_first - 1)
        self._anchor = start
        self.last_found = start
        if start < 0:
            return self._read(0)
        return self._read(start)

    # -- 2./3. reading forward -----------------------------------------------------------------

    def _read(self, entry_id: int) -> list:
        info = self.info
        ensemble = info.ensemble_for(entry_id)
        self._entry = entry_id
        self._replicas = tuple(ensemble[p] for p in
                               write_set(entry_id, info.ensemble_size, info.write_quorum))
        self._tried = 0
        self._missing = 0
        self._problems = []
        return [A.SendRead(self._replicas[0], entry_id, 1)]

    def _on_read(self, event: A.ReadResponse) -> list:
        req = event.request
        if self.phase != self.READING or req.first_entry_id != self._entry:
            return []
        entry_id = self._entry
        self._tried += 1
        if event.status == Status.OK:
            for raw in event.entries:
                try:
                    entry = self.decode(raw)
                except DigestMismatchError as exc:
                    self._problems.append(f"{req.bookie}: {exc}")
                    break
                if entry.entry_id == entry_id:
                    return self._found(entry, raw)
            else:
                self._missing += 1  # answered, but not with this entry
        elif event.status in _NOTHING_THERE:
            self._missing += 1
        elif event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {req.bookie} refused the master key of ledger {self.info.ledger_id}",
                ledger_id=self.info.ledger_id))
        else:
            self._problems.append(f"{req.bookie}: {A.status_name(event.status)}")
        if self._missing >= fence_quorum(self.info.write_quorum, self.info.ack_quorum):
            if entry_id <= self._anchor:
                return self._finish(error=LedgerRecoveryError(
                    f"ledger {self.info.ledger_id}: entry {entry_id} was confirmed but "
                    f"{self._missing} of its replicas do not hold it; the ledger lost data",
                    ledger_id=self.info.ledger_id))
            return self._end_reached()
        if self._tried >= len(self._replicas):
            return self._finish(error=LedgerRecoveryError(
                f"ledger {self.info.ledger_id}: cannot tell whether entry {entry_id} exists "
                f"({'; '.join(self._problems) or 'no replica answered'}); retry opening when "
                f"its bookies are back", ledger_id=self.info.ledger_id))
        return [A.SendRead(self._replicas[self._tried], entry_id, 1)]

    def _found(self, entry, raw) -> list:
        entry_id = entry.entry_id
        self.last_length = entry.length
        self.last_found = max(self.last_found, entry_id)
        out: list = []
        if entry_id > self._anchor:
            self._adds[entry_id] = [0, 0]
            out += [A.SendAdd(b, [entry_id], [raw], recovery=True) for b in self._replicas]
        return out + self._read(entry_id + 1)

    def _end_reached(self) -> list:
        self.phase = self.DRAINING
        return self._maybe_done()

    # -- re-replication ------------------------------------------------------------------------

    def _on_add(self, event: A.AddResponse) -> list:
        if event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {event.request.bookie} refused the master key of ledger "
                f"{self.info.ledger_id}", ledger_id=self.info.ledger_id))
        ok = event.status == Status.OK
        for entry_id in event.request.entry_ids:  # the I/O layer may have merged re-adds
            counts = self._adds.get(entry_id)
            if counts is None:
                continue
            counts[0 if ok else 1] += 1
            if counts[0] + counts[1] < self.info.write_quorum:
                continue
            if counts[0] < self.info.ack_quorum:
                return self._finish(error=LedgerRecoveryError(
                    f"ledger {self.info.ledger_id}: could re-replicate entry {entry_id} to only "
                    f"{counts[0]} bookies of its write quorum (need {self.info.ack_quorum}); "
                    f"retry opening when its bookies are back", ledger_id=self.info.ledger_id))
            del self._adds[entry_id]
        return self._maybe_done()

    def _maybe_done(self) -> list:
        if self.phase == self.DRAINING and not self._adds:
            return self._finish(result=(self.last_found, self.last_length))
        return []

    def _finish(self, result=None, error: BookKeeperError | None = None) -> list:
        self.phase = self.DONE
        return [A.Finished(result=result, error=error)]


class LongPollLacOp:
    """Wait until some bookie of the last fragment reports a LAC above ``after``.

    Every bookie of the last ensemble is asked with a long poll; the first answer above
    ``after`` finishes the op, otherwise it finishes with the highest LAC seen once every bookie
    answered or timed out (possibly not above ``after``: the caller's wait ran out).
    """

    def __init__(self, info: LedgerInfo, after: int, timeout_s: float):
        self.info = info
        self.after = after
        self.timeout_s = timeout_s
        self.max_lac = -1
        self.pending = set(info.last_ensemble)
        self.done = False

    def start(self) -> list:
        return [A.SendReadLac(b, long_poll_after=self.after, timeout_s=self.timeout_s)
                for b in self.info.last_ensemble]

    def handle(self, event, now: float = 0.0) -> list:
        if self.done or not isinstance(event, A.LacResponse):
            return []
        self.pending.discard(event.request.bookie)
        if event.status == Status.OK:
            self.max_lac = max(self.max_lac, event.lac)
        if self.max_lac > self.after or not self.pending:
            self.done = True
            return [A.Finished(result=self.max_lac)]
        return []
