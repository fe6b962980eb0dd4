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
3. read forward one entry at a time from S + 1, one replica after another (bookies that did
   not answer the fence, or timed out, are asked last), always in the fragments as they were
   when recovery began - that is where the old writer wrote.  An entry exists when a replica
   returns it with a good digest; it does not exist once (Qw - Qa) + 1 replicas of its write
   set said "no entry" (a confirmed entry is missing from at most Qw - Qa of them).  Every
   entry found is re-added with the recovery flag to its whole write set - only now, after
   the fence held, so the old writer cannot complete an add behind our back;
4. a bookie whose re-add fails is replaced as a writer would (BookKeeper's recovery does the
   same): list the writable bookies, put one that is neither in the ensemble nor failed
   before in its place in a fragment starting at max(S + 1, first entry of the last
   fragment), CAS that onto the IN_RECOVERY metadata, and re-send every found entry to the
   bookies that joined its write set.  A lost CAS adopts the re-read metadata (a concurrent
   recovery's change) and goes on; if that recovery already closed the ledger, its close is
   the result.  An entry is re-replicated once its whole write set acked it; only when no
   bookie can take over (or without a metadata version to CAS with) Qa acks suffice, and
   fewer fail recovery with ``LedgerRecoveryError``;
5. report (last entry found, ledger length); the caller closes the ledger with CAS.
"""

from __future__ import annotations

import random
from typing import Callable

from bookie.client.errors import (BookKeeperError, DigestMismatchError, LedgerRecoveryError,
                                  UnauthorizedError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import CLOSED, IN_RECOVERY, LedgerInfo, replace_bookies
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
    """Fence, find the last entry, re-replicate the tail (replacing failed bookies).  Finishes
    with (last_entry_id, length); ``info`` / ``version`` are then the metadata as this op last
    wrote or read it (with any fragment it added)."""

    FENCING, READING, DRAINING, DONE = "fencing", "reading", "draining", "done"

    def __init__(self, info: LedgerInfo, decode: Decoder, version=None,
                 rng: random.Random | None = None):
        self.info = info  # where re-adds go (gains the fragments of ensemble changes)
        self.version = version  # None: no ensemble change (a dead bookie then fails recovery)
        self._read_info = info  # where the old writer wrote: reads always follow this
        self.decode = decode
        self.phase = self.FENCING
        self.fence_op = LacQuorumOp(info, fence=True)
        self.last_found = -1
        self.last_length = 0
        self._rng = rng or random.Random()
        self._anchor = -1  # S: read for its length only
        self._entry = -1  # entry being read
        self._replicas: tuple[str, ...] = ()
        self._tried = 0
        self._missing = 0
        self._problems: list[str] = []  # of the entry being read
        self._add_problems: list[str] = []  # failed re-adds and changes
        self._suspects: set[str] = set()  # did not answer in time: read from them last
        # re-replication of every entry found after S (kept until the ledger is closed, since
        # an ensemble change must re-send entries to the bookie that joins)
        self._raw: dict[int, bytes] = {}
        self._sent: dict[int, set[str]] = {}
        self._acked: dict[int, set[str]] = {}
        self._unsettled: set[int] = set()
        self._failed: set[str] = set()  # bookies whose recovery add failed: never used again
        self._changing = False  # an ensemble change is being listed / written
        self._no_spare = False  # the last change found no writable bookie to take over
        self.ensemble_changes = 0

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
        if isinstance(event, A.BookiesListed):
            return self._on_bookies(event.writable)
        if isinstance(event, A.MetadataWritten):
            return self._on_metadata(event.request.info, event.version)
        if isinstance(event, A.MetadataConflict):
            return self._on_conflict(event)
        if isinstance(event, A.MetadataFailed):
            return self._finish(error=event.error)
        return []

    # -- 1. fencing ----------------------------------------------------------------------------

    def _on_fenced(self, out: list) -> list:
        if not out:
            return []
        finished = out[0]
        if finished.error is not None:
            return self._finish(error=finished.error)
        self.phase = self.READING
        answered = {self.fence_op.ensemble[p] for p in self.fence_op.coverage.answered}
        self._suspects = set(self.fence_op.ensemble) - answered
        start = max(finished.result, self.info.last_fragment_first - 1)
        self._anchor = start
        self.last_found = start
        if start < 0:
            return self._read(0)
        return self._read(start)

    # -- 2./3. reading forward -----------------------------------------------------------------

    def _read(self, entry_id: int) -> list:
        info = self._read_info
        ensemble = info.ensemble_for(entry_id)
        replicas = [ensemble[p] for p in
                    write_set(entry_id, info.ensemble_size, info.write_quorum)]
        suspect = self._suspects | self._failed
        # bookies that answered so far first: a dead one costs a timeout per entry otherwise
        self._replicas = tuple(sorted(replicas, key=lambda b: b in suspect))
        self._entry = entry_id
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
            if event.status in (A.TIMEOUT, A.UNREACHABLE):
                self._suspects.add(req.bookie)
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
            self._raw[entry_id] = raw
            self._sent[entry_id] = set()
            self._acked[entry_id] = set()
            self._unsettled.add(entry_id)
            out += self._send(entry_id)
            out += self._want_change()
        return out + self._read(entry_id + 1)

    def _end_reached(self) -> list:
        self.phase = self.DRAINING
        return self._settle(list(self._unsettled))

    # -- re-replication ------------------------------------------------------------------------

    def _write_set(self, entry_id: int) -> tuple[str, ...]:
        """The bookies that must hold ``entry_id`` under the current metadata."""
        info = self.info
        ensemble = info.ensemble_for(entry_id)
        return tuple(ensemble[p] for p in
                     write_set(entry_id, info.ensemble_size, info.write_quorum))

    def _send(self, entry_id: int) -> list:
        """Recovery adds of ``entry_id`` to each bookie of its write set not yet asked."""
        sent, raw = self._sent[entry_id], self._raw[entry_id]
        out = []
        for b in self._write_set(entry_id):
            if b not in sent and b not in self._failed:
                sent.add(b)
                out.append(A.SendAdd(b, [entry_id], [raw], recovery=True))
        return out

    def _on_add(self, event: A.AddResponse) -> list:
        bookie = event.request.bookie
        if event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {bookie} refused the master key of ledger {self.info.ledger_id}",
                ledger_id=self.info.ledger_id))
        out: list = []
        if event.status == Status.OK:
            for entry_id in event.request.entry_ids:  # the I/O layer may merge re-adds
                if entry_id in self._acked:
                    self._acked[entry_id].add(bookie)
        elif bookie not in self._failed:
            self._failed.add(bookie)
            self._add_problems.append(f"{bookie}: {A.status_name(event.status)}")
            out += self._want_change()
        return out + self._settle(event.request.entry_ids)

    def _entry_state(self, entry_id: int) -> str:
        """"done", "pending" or "failed" for one entry's re-replication.

        Done once every bookie of its write set acked.  A write set bookie that failed is
        replaced by an ensemble change when the entry lies in the last fragment; when no
        bookie can take over (or the entry lies in an earlier fragment, made by a concurrent
        recovery), Qa acks are enough: the same as a writer's confirmation."""
        ws = self._write_set(entry_id)
        acked = self._acked[entry_id]
        n_acked = sum(b in acked for b in ws)
        if n_acked == len(ws):
            return "done"
        if any(b not in acked and b not in self._failed for b in ws):
            return "pending"  # an answer is still due
        replaceable = entry_id >= self.info.last_fragment_first and self.version is not None
        if self._changing or (replaceable and not self._no_spare):
            return "pending"
        return "done" if n_acked >= self.info.ack_quorum else "failed"

    def _settle(self, entry_ids) -> list:
        if self.phase == self.DONE:
            return []
        for entry_id in entry_ids:
            if entry_id not in self._unsettled:
                continue
            state = self._entry_state(entry_id)
            if state == "done":
                self._unsettled.discard(entry_id)
            elif state == "failed":
                acked = sum(b in self._acked[entry_id] for b in self._write_set(entry_id))
                return self._finish(error=LedgerRecoveryError(
                    f"ledger {self.info.ledger_id}: could re-replicate entry {entry_id} to only "
                    f"{acked} bookies of its write quorum (need {self.info.ack_quorum}) and no "
                    f"bookie could replace the failed ones ({'; '.join(self._add_problems)}); "
                    f"start bookies (or bring these back) and retry opening",
                    ledger_id=self.info.ledger_id))
        if self.phase == self.DRAINING and not self._unsettled and not self._changing:
            return self._finish(result=(self.last_found, self.last_length))
        return []

    # -- ensemble changes ----------------------------------------------------------------------

    def _failed_positions(self) -> list[int]:
        return [p for p, b in enumerate(self.info.last_ensemble) if b in self._failed]

    def _want_change(self) -> list:
        """Start replacing the last ensemble's failed bookies, unless already doing so."""
        if self._changing or self._no_spare or self.version is None \
                or not self._failed_positions():
            return []
        self._changing = True
        return [A.ListBookies()]

    def _on_bookies(self, writable) -> list:
        if not self._changing:
            return []
        first = max(self._anchor + 1, self.info.last_fragment_first)
        candidates = [b for b in writable if b not in self._failed]
        new = replace_bookies(self.info, self.info.last_ensemble, self._failed_positions(),
                              candidates, first, self._rng)
        if new is None:  # nobody can take over: settle for Qa acks where there are enough
            self._changing = False
            self._no_spare = True
            self._add_problems.append(f"no spare among {len(writable)} writable bookies")
            return self._settle(list(self._unsettled))
        return [A.WriteMetadata(new.replace(state=IN_RECOVERY), self.version, "recovery")]

    def _on_metadata(self, info: LedgerInfo, version) -> list:
        """The metadata now is ``info`` at ``version``: re-send every found entry to the
        bookies that joined its write set, and replace any that failed meanwhile."""
        self.info, self.version = info, version
        self._changing = False
        self.ensemble_changes += 1
        out: list = []
        for entry_id in sorted(self._raw):
            sends = self._send(entry_id)
            if sends:
                self._unsettled.add(entry_id)
                out += sends
        out += self._want_change()
        return out + self._settle(list(self._unsettled))

    def _on_conflict(self, event: A.MetadataConflict) -> list:
        reread = event.info
        if reread.state == CLOSED:
            # Another recovery closed the ledger: its close wins (the caller adopts it).
            return self._finish(result=(reread.last_entry_id, reread.length))
        self.ensemble_changes -= 1  # adopting, not changing
        return self._on_metadata(reread, event.version)

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
