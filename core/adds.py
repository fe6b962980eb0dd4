"""The add worker's decisions: which request is decided now and which waits, for what; what an
accepted request places; what the bookie answers while it cannot write.

Everything the add worker decides about a request lives here; ``bookie.workers.add_worker`` only
turns sockets and rings into calls of this machine and its actions into sends, as the journal
worker does over ``bookie.core.group_commit``.  The ledger rules themselves (owner, key, fence,
delete) are ``bookie.core.ledgers``; this module decides *when* they are asked and what follows.

Theory of operation
-------------------
A request of a ledger (an ADD, a WRITE_LAC, a fence from the read worker) goes through
``arrive(ledger_id, journal, request)``:

- ``GO``: decide it now (``decide_add`` / ``decide_fence`` / ``decide_write_lac`` on the
  ledger table, then place its record in journal ``journal``'s ring);
- ``WAIT``: the machine keeps it, behind a request of the same ledger waiting for its owner
  lookup, or behind the requests of the same journal waiting for ring room;
- a ``Rejected(TOO_MANY_REQUESTS)`` past ``max_waiting`` requests kept (nothing stored).

A decision that needs the metadata store's answer (``bookie.workers.claims``) parks the
request (``park``); a record that finds its journal's ring full stalls it (``stall``).  Events
bring them back, in order, as ``Decide`` actions (``handle``): ``OwnersAnswered(ledger_ids)``
and ``RingRoom(journal)``.  No room on the ledger disks (``NoRoom`` / ``RoomAgain``) turns the
bookie read-only for adds until a retry succeeds; fences and explicit LACs are still taken (their
records are held with the adds: storage/noroom.py).  ``Durable(positions, stored)`` gives the
held-back answers whose records their journal made durable (and that are stored: ``safe_to``;
while read-only, durable is enough: invariant 5) - the same rule as the loop's ``due``.

Invariants
----------
1. **Per ledger, requests are decided in the order they arrived.**  A request of a ledger with
   a request parked (owner lookup) waits behind it; a request of a journal with a request
   stalled (ring full) waits behind it (every record of a ledger is in one journal:
   storage/journal_set.py, so that keeps each ledger's order too).  Requests that wait come back
   in the order they waited.
2. **A journal that cannot take records holds back only its own ledgers.**  While journal J's
   ring is full, requests of every other journal's ledgers are read and decided as usual
   (docs/architecture.md: a slow journal holds back no answer of another).  Only when every
   journal is stalled does the loop stop reading (``all_stalled``): ZeroMQ's queue then pushes
   back on the clients, as with one journal.
3. **What waits is bounded.**  At most ``max_waiting`` requests are parked and stalled in all,
   plus at most one per journal (a request already decided whose record found its ring full,
   kept whatever the count); past that a request is refused TOO_MANY_REQUESTS before anything
   is stored.
4. **Entries are write-once** (bookie.core.ledgers invariant 7): an entry this bookie holds with
   identical bytes is dropped from the batch (answered OK, stored once); one held with other
   bytes refuses the whole batch ENTRY_EXISTS and nothing changes (``write_once``).
5. **No room: read-only, nothing lost.**  After a want of space (``NoRoom``) normal adds are
   refused READ_ONLY until a retry of the held records, the index commit and
   the checkpoint all succeed (``RoomAgain``); retries come at most once per ``retry_s``.  Fences
   and explicit LACs are still taken (a recovery must be able to fence; their records are held
   in order with the adds: storage/noroom.py).  While read-only, answers do not wait for room:
   each leaves, in its journal's order, once its journal made its record durable, and an add's
   or a LAC's whose record is not stored yet (past ``safe_to``) is refused READ_ONLY instead
   (never acknowledged: a reader could not find it; the writer hears why at once).  A fence's
   is answered OK: a recovery can fence a read-only bookie (issue 32 item 4), and no add of
   its ledger placed before it can be acknowledged later.  The held records are kept (they are
   in the journal; LastLogMark never passes one not stored: a restart replays them), so an
   entry refused so may still be found here later, as any unacknowledged entry may.  A recovery
   add whose every entry this bookie holds with the same bytes stores nothing and is answered
   OK, read-only or not (issue 39 item 7: a recovering reader re-adds what it read, and must
   be able to close a ledger whose only bookie went read-only on a full disk); one that would
   store anything is refused READ_ONLY like a normal add (``check_writable``,
   ``duplicate_answer``).
6. **An answer leaves only once its record is stored, and durable unless it is a deferred
   add's**: answers of journal J leave in J's order; a normal add's, a fence's, a LAC's and a
   FORCE_LEDGER's once ``min(DURABLE_J, safe_to_J)`` passed its record's end (DESIGN
   invariants 1 and 4; read-after-ack: storage/noroom.py); a DEFERRED_SYNC add's once
   ``safe_to_J`` passed it, synced or not (read-after-ack still holds: stored is readable).  A
   FORCE_LEDGER's "record" is the end of journal J when it came (it places nothing): every
   record of its ledger placed before it is then durable (all of a ledger's records are in J).
   Answers keep J's order, so a deferred answer behind a normal one not yet durable waits for
   it.  While read-only, durable is enough for a refusal, a fence and a force, which make no
   entry readable (invariant 5), and a deferred add waits for durable too.

The machine imports no I/O and reads no clock: ``now`` is passed in.  A request is an opaque
token (the loop's socket, frames and arrival time); the machine never looks inside it.

7. **Only a bookie the metadata names takes a ledger's normal adds and fences** (issue 30 item
   6: an address mix-up never turns into an ack).  Asked when the owner lookup is (an id the
   table holds nothing for: once per ledger, no metadata read per add): a normal add or a fence
   of a ledger whose metadata names this bookie in no fragment's ensemble is refused NO_LEDGER,
   but only after one more read of the metadata (``named_rule`` answers REREAD first: an
   ensemble change names this bookie *before* its adds come, so a kept "not named" is never
   enough).  Recovery adds and anything on the recovery credential always pass: a copy, or a
   recovery's re-add to a replacement, arrives before the metadata names its target.

8. **A writer over its storage quota is refused, and only it** (issue 33 item 6, issue 39 item
   2, ``ledgerStorageQuotaBytes``; the rule and what counts: ``bookie.core.quotas``).  An add
   whose bytes would take its ledger's writer identity (an enrolled key, else the ledger's
   owner) past the quota is refused OVER_QUOTA before anything is placed (``check_quota``,
   after the ledger rules passed it) - a RECOVERY_ADD too: the flag alone exempts nothing.
   Exempt (``quota_exempt``): the recovery principal's adds (the recovery credential, an
   admin key: autorecovery, the shell's recovery), recovery adds to a ledger this bookie holds
   fenced (a recovering reader closing it), fences and WRITE_LACs: healing never fails for a
   quota.  The first add of any kind from a writer key binds the ledger's identity, so a
   ledger written only with RECOVERY_ADD is charged to its writer.  Every placed add's bytes
   count at once (``placed``; fences' and LACs' at the next reset), and usage is reset from
   what the bookie holds (``bookie.core.quotas`` invariant 1), so replay, deletes, drops and
   restarts agree with the live path.

(A full journal disk turns the bookie read-only too, through the supervisor: the journal worker.)
"""

from __future__ import annotations

import collections
from typing import NamedTuple

from bookie import wire
from bookie.core.ledgers import LedgerTable, Placed, Rejected
from bookie.core.quotas import Quotas, quota_exempt
from bookie.wire import Status

GO, WAIT = 0, 1  # ``arrive``'s answers (plain ints: the hot path allocates nothing)
REREAD = 2  # ``named_rule``: read the metadata once more before deciding


# -- events ------------------------------------------------------------------------------------
class Arrived(NamedTuple):
    ledger_id: int
    journal: int
    request: object


class OwnersAnswered(NamedTuple):
    """The owner resolver answered for these ledgers (bookie.workers.claims)."""
    ledger_ids: frozenset


class RingRoom(NamedTuple):
    """Journal ``journal``'s ring may have room again (its DURABLE moved)."""
    journal: int


class Stalled(NamedTuple):
    """A decided request found journal ``journal``'s ring full; nothing was placed."""
    journal: int
    request: object


class NoRoom(NamedTuple):
    """A write to the ledger disks failed for want of space."""


class RoomAgain(NamedTuple):
    """The held records, the index commit and the checkpoint all succeeded."""


class Durable(NamedTuple):
    """Each journal's DURABLE, and ``safe_to`` (the end of what is stored; None: all of it)."""
    positions: tuple
    stored: tuple | None = None


# -- actions -----------------------------------------------------------------------------------
class Decide(NamedTuple):
    """Decide ``request`` now (it waited; it is next in its ledger's and journal's order).
    ``first_stalled``: pass it to ``arrive`` (it was its journal's first stalled request)."""
    request: object
    first_stalled: bool = False


class Answer(NamedTuple):
    """Send this held-back answer (a ``bookie.core.answers.Pending``)."""
    pending: object


class Refuse(NamedTuple):
    request: object
    status: Status


class ReadOnly(NamedTuple):
    """Tell the bookie whether it is read-only for want of space (ring NO_ROOM)."""
    on: bool


class AddMachine:
    """The add worker's decisions (module docstring).  ``table``: the ledger rule book;
    ``answers``: the held-back answers (``bookie.core.answers.JournalAnswers``), set by the
    worker once its refusal budget exists."""

    def __init__(self, table: LedgerTable, journals: int, max_waiting: int, max_entry_bytes: int,
                 retry_s: float = 1.0):
        self.table = table
        self.journals = journals
        self.max_waiting = max_waiting
        self.max_entry_bytes = max_entry_bytes
        self.retry_s = retry_s
        self.answers = None
        self.parked: dict[int, collections.deque] = {}  # ledger -> requests waiting, in order
        self.parked_count = 0
        self.stalled: list[collections.deque] = [collections.deque() for _ in range(journals)]
        self.stalled_count = 0
        self.full = False  # no room on the ledger disks (invariant 5)
        self.next_retry = 0.0
        self.quotas = Quotas(0)  # invariant 8; the worker sets ledgerStorageQuotaBytes

    # -- waiting (invariants 1-3) ----------------------------------------------------------------
    def arrive(self, ledger_id: int, journal: int, request, first_stalled: bool = False) -> int:
        """GO, or WAIT (kept: it comes back as a Decide action).  ``first_stalled``: the request
        is journal ``journal``'s first stalled one, taken by ``next_stalled`` (nothing of its
        journal is ahead of it).  Raises Rejected(TOO_MANY_REQUESTS) past ``max_waiting``.
        The hot path: two integer tests when nothing waits."""
        if self.parked_count and ledger_id in self.parked:  # first: it arrived before any stall
            self._count_one()
            self.parked[ledger_id].append(request)
            self.parked_count += 1
            return WAIT
        if self.stalled_count and not first_stalled and self.stalled[journal]:
            self._count_one()
            self.stalled[journal].append(request)
            self.stalled_count += 1
            return WAIT
        return GO

    def park(self, ledger_id: int, request) -> None:
        """``request`` waits for the owner resolver's answer about ``ledger_id`` (and every
        later request of the ledger behind it).  Raises Rejected(TOO_MANY_REQUESTS)."""
        self._count_one()
        self.parked.setdefault(ledger_id, collections.deque()).append(request)
        self.parked_count += 1

    def is_parked(self, ledger_id: int) -> bool:
        return ledger_id in self.parked

    def stall(self, journal: int, request, again: bool = False) -> None:
        """``request`` found journal ``journal``'s ring full.  ``again``: it was the first of
        the journal's stalled requests, retried: it stays first."""
        if again:
            self.stalled[journal].appendleft(request)
        else:
            self.stalled[journal].append(request)
        self.stalled_count += 1

    def all_stalled(self) -> bool:
        """Every journal waits for ring room: the loop stops reading (invariant 2)."""
        return self.stalled_count > 0 and all(self.stalled)

    def waiting(self) -> int:
        return self.parked_count + self.stalled_count

    def _count_one(self) -> None:
        if self.parked_count + self.stalled_count >= self.max_waiting:
            raise Rejected(Status.TOO_MANY_REQUESTS, "too many requests waiting")

    def next_stalled(self, journal: int):
        """Take journal ``journal``'s first stalled request (None: none).  Decide it; if the
        ring is still full, ``stall(journal, request, again=True)`` puts it back first."""
        q = self.stalled[journal]
        if not q:
            return None
        self.stalled_count -= 1
        return q.popleft()

    def unpark(self, ledger_id: int) -> collections.deque:
        """The requests parked for ``ledger_id``, in order, no longer kept.  Decide each through
        ``arrive`` again: one parked anew keeps the rest behind it."""
        waiting = self.parked.pop(ledger_id, None) or collections.deque()
        self.parked_count -= len(waiting)
        return waiting

    # -- decisions -------------------------------------------------------------------------------
    def check_batch(self, ledger_id: int, ledgers, entry_ids) -> None:
        """An ADD's batch names its own ledger in every entry, and no negative entry id (the
        ids and ledgers as ``wire.batch_ids`` reads them).  Raises Rejected(BAD_REQUEST)."""
        if len(entry_ids) < wire.SMALL_BATCH:  # a few entries: four numpy calls cost more than a loop
            if any(lid != ledger_id for lid in ledgers.tolist()):
                raise Rejected(Status.BAD_REQUEST, "an entry of the batch belongs to another ledger")
            if any(e < 0 for e in entry_ids.tolist()):
                raise Rejected(Status.BAD_REQUEST, "negative entry id")
            return
        if (ledgers != ledger_id).any():
            raise Rejected(Status.BAD_REQUEST, "an entry of the batch belongs to another ledger")
        if (entry_ids < 0).any():
            raise Rejected(Status.BAD_REQUEST, "negative entry id")

    def refusal(self, readonly: bool) -> Status | None:
        """The status every normal add gets now, or None (invariant 5)."""
        return Status.READ_ONLY if readonly or self.full else None

    def check_writable(self, readonly: bool, pending: int, recovery: bool = False) -> Status | None:
        """An ADD's first refusals, before anything is looked up: READ_ONLY (invariant 5), or
        TOO_MANY_REQUESTS with ``max_waiting`` answers held back already.  Raises Rejected;
        for a ``recovery`` add READ_ONLY is returned instead, to be raised only once the add
        turns out to store something (``duplicate_answer``: invariant 5's re-add)."""
        status = self.refusal(readonly)
        if status is not None and not recovery:
            raise Rejected(status)
        if pending >= self.max_waiting:
            raise Rejected(Status.TOO_MANY_REQUESTS)
        return status

    def duplicate_answer(self, write: int, safe_to: int, uncommitted: bool) -> int:
        """Where in its journal the OK of an add whose every entry this bookie holds with the
        same bytes (invariant 4) waits: behind every record placed so far (``write``); while
        read-only, behind what is stored (``safe_to``) instead, when nothing of the ledger is
        stored but not yet committed (so its entries are all in the index, readable, their
        records before ``safe_to``): the answer is then never refused READ_ONLY (invariant 5)."""
        if self.full and not uncommitted:
            return min(write, safe_to)
        return write

    def named_rule(self, named: bool | None, reread: bool, recovery: bool, credential: bool):
        """Invariant 7, for a request of a ledger the table holds nothing for: None (go on),
        REREAD (park it and read the metadata once more), or raises Rejected(NO_LEDGER).
        ``named``: whether the metadata, as last read, names this bookie (None: not known: no
        store, the store unavailable - the owner rules decide); ``reread``: read again since
        the request parked."""
        if recovery or credential or named is not False:
            return None
        if not reread:
            return REREAD
        raise Rejected(Status.NO_LEDGER, "the ledger's metadata does not name this bookie")

    def decide_add(self, ledger_id: int, key: bytes, recovery: bool, credential: bool,
                   owner) -> Placed:
        """Whether an ADD may go by the ledger rules; the key and flags its record carries.
        ``owner``: the store's answer about an id the table holds nothing for (None: not
        needed).  Raises Rejected."""
        return self.table.check_add(ledger_id, key, recovery, credential, owner)

    def check_quota(self, ledger_id: int, recovery: bool, recovery_principal: bool, principal,
                    nbytes: int, fenced: bool = False) -> None:
        """Invariant 8: an add of ``nbytes`` to ``ledger_id`` from ``principal`` (its enrolled
        key; None: no enrolment) that would take its writer past the quota raises
        Rejected(OVER_QUOTA), unless ``quota_exempt`` (``recovery_principal``: the recovery
        credential or an admin key; ``fenced``: this bookie holds the ledger fenced)."""
        if quota_exempt(recovery, recovery_principal, fenced):
            return
        self.quotas.check(ledger_id, principal, nbytes)

    def placed(self, ledger_id: int, principal, nbytes: int, recovery_principal: bool) -> None:
        """A record of ``nbytes`` was placed for ``ledger_id`` (invariant 8): it counts to the
        ledger's identity; the first add of any kind from an enrolled writer ``principal`` (not
        the recovery principal) binds the ledger's identity when it has none."""
        quotas = self.quotas
        if not quotas.limit_bytes:
            return  # no quota: nothing kept (the default)
        if not recovery_principal:
            quotas.bind(ledger_id, principal)
        quotas.stored(ledger_id, nbytes)

    def decide_write_lac(self, ledger_id: int, key: bytes, lac: int) -> Placed:
        """Whether a WRITE_LAC may go (taken while read-only too, as before: it stores no
        entry).  Raises Rejected."""
        if lac < -1:
            raise Rejected(Status.BAD_REQUEST, "lac out of range")
        return self.table.check_write_lac(ledger_id, key)

    def decide_fence(self, ledger_id: int, key: bytes, credential: bool, owner) -> Placed:
        """Fences are taken while read-only too (invariant 5)."""
        return self.table.check_fence(ledger_id, key, credential, owner)

    def write_once(self, held: dict, lengths_frame, data, lengths, offsets, entry_ids):
        """The batch without the entries this bookie holds (invariant 4): returns
        (lengths_frame, data, lengths, offsets, entry_ids) of the entries left (none left: the
        add stores nothing and is answered OK in order).  ``held``: batch index -> the bytes
        held, for the entries held.  Raises Rejected(ENTRY_EXISTS) when one differs."""
        if not held:
            return lengths_frame, data, lengths, offsets, entry_ids
        mv = memoryview(data)
        for i, was in held.items():
            o, n = int(offsets[i]), int(lengths[i])
            if mv[o:o + n] != was:
                raise Rejected(Status.ENTRY_EXISTS, f"entry {int(entry_ids[i])} is held with other bytes")
        keep = [i for i in range(len(entry_ids)) if i not in held]
        if not keep:
            return lengths_frame, data, lengths[:0], offsets[:0], entry_ids[:0]
        parts = [bytes(mv[int(offsets[i]):int(offsets[i]) + int(lengths[i])]) for i in keep]
        new_lengths, new_data = wire.pack_batch(parts)
        lengths2, offsets2 = wire.batch_offsets(new_lengths, len(new_data), self.max_entry_bytes)
        return new_lengths, new_data, lengths2, offsets2, entry_ids[keep]

    # -- no room (invariant 5) -------------------------------------------------------------------
    def commit_due(self, now: float, final: bool = False) -> bool:
        """Whether the loop commits (and retries held records) now: always while writable; at
        most once per ``retry_s`` while full, and at the final commit."""
        if self.full and not final and now < self.next_retry:
            return False
        self.next_retry = now + self.retry_s
        return True

    # -- answers (invariant 6) -------------------------------------------------------------------
    def due(self, durable, safe_to):
        """Take off and yield the held-back answers (``Pending``) whose journal made their
        record durable and stored: each journal's up to ``min(durable[J], safe_to[J])``, and
        a deferred add's once stored (invariant 6), in each journal's order; while read-only, each once durable, the adds and LACs not
        stored refused READ_ONLY (invariant 5).  (The loop's form of ``Durable``: no action
        object per answer.)"""
        if self.full:
            return self.answers.durable_refusing(durable, safe_to, Status.READ_ONLY)
        return self.answers.durable([min(d, s) for d, s in zip(durable, safe_to)], safe_to)

    def deleted(self, ledger_ids) -> None:
        """The GC deleted these ledgers under records placed for them: their held-back answers
        become NO_LEDGER (bookie.core.ledgers invariant 6)."""
        for p in self.answers:
            if p.ledger_id in ledger_ids:
                p.refuse(Status.NO_LEDGER)

    # -- events ----------------------------------------------------------------------------------
    def handle(self, event, now: float) -> list:
        """One event in, the actions it calls for out (module docstring)."""
        kind = type(event)
        if kind is Arrived:
            try:
                go = self.arrive(event.ledger_id, event.journal, event.request)
            except Rejected as e:
                return [Refuse(event.request, e.status)]
            return [Decide(event.request)] if go == GO else []
        if kind is OwnersAnswered:
            out = []
            for ledger_id in sorted(event.ledger_ids):
                out.extend(Decide(r) for r in self.unpark(ledger_id))
            return out
        if kind is RingRoom:
            r = self.next_stalled(event.journal)
            return [] if r is None else [Decide(r, True)]
        if kind is Stalled:
            self.stall(event.journal, event.request)
            return []
        if kind is NoRoom:
            if self.full:
                return []
            self.full = True
            return [ReadOnly(True)]
        if kind is RoomAgain:
            if not self.full:
                return []
            self.full = False
            return [ReadOnly(False)]
        if kind is Durable:
            if self.answers is None:
                return []
            stored = event.positions if event.stored is None else event.stored
            return [Answer(p) for p in self.due(list(event.positions), list(stored))]
        raise TypeError(f"not an add-path event: {event!r}")
