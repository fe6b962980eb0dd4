"""Recovering a ledger whose writer may be gone: one operation, from marking the metadata
IN_RECOVERY to writing it CLOSED.

Theory of operation
-------------------
``RecoveryOp`` is a reader's close of a ledger (protocol: "Closing a ledger as a reader").  Its
metadata writes are ``WriteMetadata`` actions, as the writer's are, answered by
MetadataWritten, MetadataConflict (with the re-read record) or MetadataFailed:

1. **mark**: an OPEN ledger is CAS'd to IN_RECOVERY, so the writer's ensemble changes and its
   close fail from then on.  A lost CAS decides again on the re-read record
   (``ledger.recovery_start``): CLOSED - that close is the result; OPEN - write again;
   IN_RECOVERY - another recovery marked it first: go on with the re-read record.
2. **fence** the last fragment's ensemble (``LacQuorumOp(fence=True)``); the highest LAC ``L``
   is then final for the old writer (no ack quorum of it can form any more).
3. **where the writer wrote**: every read of the old writer's entries uses the fragments as
   they were when fencing began.  Recovery writes no fragment before its close (step 6), so the
   metadata of a ledger IN_RECOVERY always shows the writer's own ensembles - also to a
   recovery retried after another failed half way, whose replacement bookie never held the
   writer's entries and must not be asked for them.
4. **read forward** from ``S = max(L, first entry of the last fragment - 1)`` (every entry up to
   S was confirmed, since a fragment starts at the writer's first unconfirmed entry; S is read
   for its running length only and not re-written), one entry at a time, one replica of its
   write set after another (bookies that had not answered the fence when it held, or failed,
   are asked last).  An entry exists when a replica returns it with a good digest and the
   right ledger and entry id; an answer that does not match is a bad copy, never evidence of
   absence.  It does not exist once (Qw - Qa) + 1 replicas said "no entry" (a confirmed entry
   is missing from at most Qw - Qa of them) and every other replica said so too or is
   unreachable (timed out), so recovery never ends below an entry that a bookie it can reach
   holds.  Each entry found after S is re-added
   with the recovery flag to its whole write set - only now, after the fence held, so the old
   writer cannot complete an add behind our back.
5. **replace** a bookie whose re-add fails, as a writer would (BookKeeper's recovery does the
   same): list the writable bookies, put one that is neither in the ensemble nor failed before
   in its place (chosen by the client's placement policy, and refused as the writer's change
   is when it misses ``enforceMinNumRacksPerWriteQuorum``: then no bookie can take over, and
   the error names the policy) in a fragment starting at max(S + 1, first entry of the last
   fragment), and
   re-send every entry found to the bookies that joined its write set.  The fragment lives in
   ``info`` only until the close.  An entry is re-replicated once its whole write set (under
   ``info``) acked it; only when no bookie can take over do Qa acks suffice, and fewer fail
   recovery with ``LedgerRecoveryError`` - nothing is written then: the ledger stays
   IN_RECOVERY with the writer's ensembles, and a later recovery starts over from them.
6. **close**: one CAS writes state CLOSED, the last entry found, the length and the fragments
   recovery added (and for a verifiable ledger the Merkle root of entries 0 .. the last found,
   read and hashed first: ``recovery_root``).  A lost CAS re-reads: CLOSED - another recovery's close wins and is the
   result (so concurrent recoveries converge on the first close); otherwise the same close is
   written again at the re-read version.

The op finishes with ``(last_entry_id, length)`` of the closed ledger; ``info`` and ``version``
are then the metadata as closed (by this op, or by another client whose close it adopted).
"""

from __future__ import annotations

import random
from typing import Callable

from bookie.client.errors import (BookKeeperError, DigestMismatchError, LedgerRecoveryError,
                                  UnauthorizedError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.lac import NOTHING_THERE, LacQuorumOp
from bookie.client.protocol.ledger import (Decision, LedgerInfo, LedgerState, recovery_start,
                                           replace_bookies)
from bookie.client.protocol.quorum import fence_quorum, write_set
from bookie.client.protocol.recovery_root import RootReading
from bookie.wire import Status

Decoder = Callable[[bytes], object]  # formatted entry -> LedgerEntry; raises DigestMismatchError

_MARK, _CLOSE = "recovery", "close"  # purposes of this op's WriteMetadata actions


class RecoveryOp:
    """Mark, fence, find the last entry, re-replicate the tail (replacing failed bookies) and
    close.  Finishes with (last_entry_id, length); ``info`` / ``version`` are then the closed
    metadata."""

    MARKING, FENCING, READING, DRAINING, HASHING, CLOSING, DONE = (
        "marking", "fencing", "reading", "draining", "hashing", "closing", "done")

    def __init__(self, info: LedgerInfo, decode: Decoder, version,
                 rng: random.Random | None = None, placement=None, lost=(), avoid=()):
        """
        Args:
            info: the ledger's metadata as read, at ``version`` (any state).
            decode: checks and unpacks a formatted entry (raises DigestMismatchError).
            placement: the client's rack- or region-aware ``Placement`` for replacements
                (None: at random).
            lost: bookies known gone (``bookie shell recover``, autorecovery: the bookies being
                healed around): never read from or re-added to, replaced at once.  Without
                it each one cost a read and an add timeout per ledger (issue 32 item 6).
            avoid: bookies that still run and hold entries but must not be written (a
                decommissioned, read-only bookie): read from (asked last), never re-added
                to, replaced at once.
        """
        self.placement = placement
        self.info = info  # where re-adds go (gains the fragments of ensemble changes)
        self.version = version
        self._written = info  # where the old writer wrote: reads always follow this
        self.decode = decode
        self.phase = self.MARKING
        self.fence_op = LacQuorumOp(info, fence=True)
        self.last_found = -1
        self.last_length = 0
        self._rng = rng or random.Random()
        self._anchor = -1  # S: read for its length only
        # the entry being read: its replicas in asking order, how many were asked, what they said
        self._entry = -1
        self._replicas: tuple[str, ...] = ()
        self._asked = 0
        self._missing = 0
        self._problems: list[str] = []
        self._add_problems: list[str] = []  # failed re-adds and changes
        self._late: set[str] = set()  # had not answered the fence when it held: asked last
        self._unreachable: set[str] = set()  # timed out or unreachable: not waited for
        # re-replication of every entry found after S (kept until the ledger is closed, since
        # an ensemble change must re-send entries to the bookie that joins)
        self._raw: dict[int, bytes] = {}
        self._sent: dict[int, set[str]] = {}
        self._acked: dict[int, set[str]] = {}
        self._unsettled: set[int] = set()
        self._lost = frozenset(lost)
        # bookies whose recovery add failed (or that must not get one): never used again
        self._failed: set[str] = set(lost) | set(avoid)
        self._changing = False  # an ensemble change is being listed
        self._no_spare = False  # the last change found no writable bookie to take over
        self.ensemble_changes = 0
        self._rooting: RootReading | None = None  # a verifiable ledger's root, before the close

    def start(self) -> list:
        decision = recovery_start(self.info)
        if decision == Decision.NO_RECOVERY_NEEDED:
            return self._adopt_close(self.info, self.version)
        if decision == Decision.RETRY:
            return [A.WriteMetadata(self.info.replace(state=LedgerState.IN_RECOVERY),
                                    self.version, _MARK)]
        return self._fence(self.info, self.version)

    def handle(self, event, now: float = 0.0) -> list:
        if self.phase == self.DONE:
            return []
        kind = type(event)
        if self.phase == self.HASHING and kind in (A.ReadResponse, A.Tick):
            return self._hashed(self._rooting.handle(event, now))
        if kind is A.LacResponse:
            if self.phase == self.FENCING:
                return self._on_fenced(self.fence_op.handle(event, now))
            self._late_fence_answer(event)
            return []
        if kind is A.ReadResponse:
            return self._on_read(event)
        if kind is A.AddResponse:
            return self._on_add(event)
        if kind is A.BookiesListed:
            return self._on_bookies(event.writable)
        if kind is A.MetadataWritten:
            return self._on_written(event)
        if kind is A.MetadataConflict:
            return self._on_conflict(event)
        if kind is A.MetadataFailed:
            return self._finish(error=event.error)
        return []

    # -- 1. marking, and the metadata answers -------------------------------------------------

    def _on_written(self, event: A.MetadataWritten) -> list:
        if event.request.purpose == _MARK and self.phase == self.MARKING:
            return self._fence(event.request.info, event.version)
        if event.request.purpose == _CLOSE and self.phase == self.CLOSING:
            self.info, self.version = event.request.info, event.version
            return self._finish(result=(self.last_found, self.last_length))
        return []

    def _on_conflict(self, event: A.MetadataConflict) -> list:
        reread, version = event.info, event.version
        if event.request.purpose == _MARK and self.phase == self.MARKING:
            decision = recovery_start(reread)
            if decision == Decision.NO_RECOVERY_NEEDED:
                return self._adopt_close(reread, version)
            if decision == Decision.RETRY:
                return [A.WriteMetadata(reread.replace(state=LedgerState.IN_RECOVERY), version,
                                        _MARK)]
            return self._fence(reread, version)  # another recovery marked it: go on
        if event.request.purpose == _CLOSE and self.phase == self.CLOSING:
            if reread.state is LedgerState.CLOSED:
                return self._adopt_close(reread, version)
            self.version = version
            return [A.WriteMetadata(event.request.info, version, _CLOSE)]
        return []

    def _adopt_close(self, closed: LedgerInfo, version) -> list:
        """Someone closed the ledger: that close is the result (how recoveries converge)."""
        self.info, self.version = closed, version
        return self._finish(result=(closed.last_entry_id, closed.length))

    # -- 2. fencing ----------------------------------------------------------------------------

    def _fence(self, info: LedgerInfo, version) -> list:
        self.info = self._written = info
        self.version = version
        self.phase = self.FENCING
        self.fence_op = LacQuorumOp(info, fence=True)
        return self.fence_op.start()

    def _on_fenced(self, out: list) -> list:
        if not out:
            return []
        finished = out[0]
        if finished.error is not None:
            return self._finish(error=finished.error)
        self.phase = self.READING
        answered = {self.fence_op.ensemble[p] for p in self.fence_op.coverage.answered}
        self._late = set(self.fence_op.ensemble) - answered
        self._unreachable = {self.fence_op.ensemble[p] for p in self.fence_op.coverage.failed} | self._lost
        start = max(finished.result, self._written.last_fragment_first - 1)
        self._anchor = start
        self.last_found = start
        return self._read(max(start, 0))

    def _late_fence_answer(self, event: A.LacResponse) -> None:
        """A bookie answered the fence after it held: it is reachable, or known not to be."""
        bookie = event.request.bookie
        if event.status in (A.TIMEOUT, A.UNREACHABLE):
            self._unreachable.add(bookie)
        else:
            self._late.discard(bookie)

    # -- 4. reading forward --------------------------------------------------------------------

    def _read(self, entry_id: int) -> list:
        """Ask the first replica of ``entry_id`` in the writer's ensemble for it."""
        written = self._written
        ensemble = written.ensemble_for(entry_id)
        replicas = [ensemble[p] for p in
                    write_set(entry_id, written.ensemble_size, written.write_quorum)]
        late = self._late | self._unreachable | self._failed
        # bookies that answered so far first: a dead one costs a timeout per entry otherwise
        self._replicas = tuple(sorted(replicas, key=lambda b: b in late))
        self._entry = entry_id
        self._asked = 1
        self._missing = 0
        self._problems = []
        return [A.SendRead(self._replicas[0], entry_id, 1)]

    def _on_read(self, event: A.ReadResponse) -> list:
        req = event.request
        if self.phase != self.READING or req.first_entry_id != self._entry \
                or req.bookie != self._replicas[self._asked - 1]:
            return []
        entry_id = self._entry
        if event.status == Status.OK:
            found = self._check_copy(req.bookie, entry_id, event.entries)
            if found is not None:
                return self._found(*found)
        elif event.status in NOTHING_THERE:
            self._missing += 1
        elif event.status == Status.UNAUTHORIZED:
            return self._finish(error=UnauthorizedError(
                f"bookie {req.bookie} refused the master key of ledger {self.info.ledger_id}",
                ledger_id=self.info.ledger_id))
        else:
            self._problems.append(f"{req.bookie}: {A.status_name(event.status)}")
            if event.status in (A.TIMEOUT, A.UNREACHABLE):
                self._unreachable.add(req.bookie)
        return self._next_replica_or_decide()

    def _check_copy(self, bookie: str, entry_id: int, entries):
        """(entry, raw) when the answer's first entry is a good copy of ``entry_id``; else the
        problem is noted (a bad copy is no evidence that the entry does not exist)."""
        if not len(entries):
            self._problems.append(f"{bookie}: an empty answer")
            return None
        raw = entries[0]
        try:
            entry = self.decode(raw)
        except DigestMismatchError as exc:
            self._problems.append(f"{bookie}: bad copy ({exc})")
            return None
        if entry.entry_id != entry_id:
            self._problems.append(f"{bookie}: bad copy (returned entry {entry.entry_id})")
            return None
        return entry, raw

    def _next_replica_or_decide(self) -> list:
        entry_id = self._entry
        waiting = [b for b in self._replicas[self._asked:] if b not in self._unreachable]
        enough = self._missing >= fence_quorum(self.info.write_quorum, self.info.ack_quorum)
        if enough and not waiting:
            if entry_id <= self._anchor:
                return self._finish(error=LedgerRecoveryError(
                    f"ledger {self.info.ledger_id}: entry {entry_id} was confirmed but "
                    f"{self._missing} of its replicas do not hold it; the ledger lost data",
                    ledger_id=self.info.ledger_id))
            return self._end_reached()
        if self._asked < len(self._replicas):
            self._asked += 1
            return [A.SendRead(self._replicas[self._asked - 1], entry_id, 1)]
        return self._finish(error=LedgerRecoveryError(
            f"ledger {self.info.ledger_id}: cannot tell whether entry {entry_id} exists "
            f"({'; '.join(self._problems) or 'no replica answered'}); retry opening when "
            f"its bookies are back", ledger_id=self.info.ledger_id))

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
        """The bookies that must hold ``entry_id`` under the metadata recovery will close with."""
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
        if self.phase not in (self.READING, self.DRAINING):
            return []
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
            if event.status in (A.TIMEOUT, A.UNREACHABLE):
                self._unreachable.add(bookie)
            self._add_problems.append(f"{bookie}: {A.status_name(event.status)}")
            out += self._want_change()
        return out + self._settle(event.request.entry_ids)

    def _entry_state(self, entry_id: int) -> str:
        """"done", "pending" or "failed" for one entry's re-replication.

        Done once every bookie of its write set acked.  A bookie of the write set that failed
        is replaced by an ensemble change (every entry recovery re-adds lies in the last
        fragment); when no bookie can take over, Qa acks are enough: the same as a writer's
        confirmation."""
        ws = self._write_set(entry_id)
        acked = self._acked[entry_id]
        n_acked = sum(b in acked for b in ws)
        if n_acked == len(ws):
            return "done"
        if any(b not in acked and b not in self._failed for b in ws):
            return "pending"  # an answer is still due
        if self._changing or not self._no_spare:
            return "pending"
        return "done" if n_acked >= self.info.ack_quorum else "failed"

    def _settle(self, entry_ids) -> list:
        if self.phase not in (self.READING, self.DRAINING):
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
            return self._close()
        return []

    # -- 5. ensemble changes (kept until the close) --------------------------------------------

    def _failed_positions(self) -> list[int]:
        return [p for p, b in enumerate(self.info.last_ensemble) if b in self._failed]

    def _want_change(self) -> list:
        """Start replacing the last ensemble's failed bookies, unless already doing so."""
        if self._changing or self._no_spare or not self._failed_positions():
            return []
        self._changing = True
        return [A.ListBookies()]

    def _on_bookies(self, writable) -> list:
        if not self._changing or self.phase not in (self.READING, self.DRAINING):
            return []
        self._changing = False
        first = max(self._anchor + 1, self._written.last_fragment_first)
        candidates = [b for b in writable if b not in self._failed]
        new = replace_bookies(self.info, self.info.last_ensemble, self._failed_positions(),
                              candidates, first, self._rng, self.placement)
        short = new is not None and self.placement is not None and self.placement.short_of(
            new.last_ensemble, self.info.write_quorum)
        if short:  # the placement policy refuses it, as it refuses a writer's ensemble change
            new = None
            self._add_problems.append(f"no replacement keeps the placement policy: {short}"
                                      f"{self.placement.domains_of(candidates)}")
        elif new is None:
            self._add_problems.append(f"no spare among {len(writable)} writable bookies")
        if new is None:  # nobody can take over: settle for Qa acks where there are enough
            self._no_spare = True
            return self._settle(list(self._unsettled))
        # The fragment joins the metadata with the close; re-send what the new bookies lack.
        self.info = new
        self.ensemble_changes += 1
        out: list = []
        for entry_id in sorted(self._raw):
            sends = self._send(entry_id)
            if sends:
                self._unsettled.add(entry_id)
                out += sends
        out += self._want_change()
        return out + self._settle(list(self._unsettled))

    # -- 6. closing ----------------------------------------------------------------------------

    def _close(self) -> list:
        if self.info.verifiable and self._rooting is None:
            self.phase = self.HASHING
            self._rooting = RootReading(self._written, self.last_found, self.decode,
                                        self._failed | self._unreachable)
            return self._hashed(self._rooting.start())
        self.phase = self.CLOSING
        closed = self.info.replace(state=LedgerState.CLOSED, last_entry_id=self.last_found,
                                   length=self.last_length)
        if self._rooting is not None:
            closed = closed.replace(merkle_root=self._rooting.root_hex)
        return [A.WriteMetadata(closed, self.version, _CLOSE)]

    def _hashed(self, out: list) -> list:
        rooting = self._rooting
        if not rooting.done:
            return out
        if rooting.error is not None:
            return out + self._finish(error=LedgerRecoveryError(
                f"ledger {self.info.ledger_id}: cannot read its entries back to compute the "
                f"Merkle root its close needs ({rooting.error}); retry opening when its "
                f"bookies are back", ledger_id=self.info.ledger_id))
        return out + self._close()

    def _finish(self, result=None, error: BookKeeperError | None = None) -> list:
        self.phase = self.DONE
        return [A.Finished(result=result, error=error)]
