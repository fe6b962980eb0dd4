"""The add worker's decisions: one call per message (``AddMachine.take``) says what the loop does
with it - place these entries and answer OK once durable, answer a duplicate, park it for its
owner, refuse it, stall it for ring room - and what the bookie answers while it cannot write.

Everything the add worker decides about a request lives here; ``bookie.workers.add_worker`` only
decodes frames into ``Request`` objects, calls the machine once per message and carries out its
actions (ring writes, entry-log writes, sends), as the journal worker does over
``bookie.core.group_commit`` and the client's I/O thread over ``client/protocol/writer.py``.  The
ledger rules themselves (owner, key, fence, delete) are ``bookie.core.ledgers``; this module
decides *when* they are asked and what follows.

Theory of operation
-------------------
``take(request, view, now)`` decides one message (an ADD, a WRITE_LAC, a FORCE_LEDGER, a fence
from the read worker) and returns its actions.  ``view`` is what the loop knows and the machine
may ask (``View``: the read-only flag, the rings' room and positions, the entries held, the owner
resolver's answers, a principal's role); the machine never writes through it, except to ask the
owner resolver for a lookup it needs.  Its steps, in this order for an ADD:

1. the principal's share of the held-back answers (``View.admit``: TOO_MANY_REQUESTS);
2. wait behind a request of its ledger parked for its owner, or behind its journal's stalled
   requests (invariant 1; ``Rejected(TOO_MANY_REQUESTS)`` past ``max_waiting``: invariant 3);
3. read-only (invariant 5), the batch's own ids (BAD_REQUEST);
4. park it while the owner resolver has not answered what deciding it needs (the store's
   owner, the key's verdict, one more read of a ledger whose metadata does not name this
   bookie: invariant 7);
5. the ledger rules (``LedgerTable.check_add``);
6. write-once (invariant 4): drop the entries held with the same bytes; all held: ``AnswerAt``;
7. the quota (invariant 8);
8. ring room: ``Stall`` (kept, decided again by ``retry``) or ``PlaceAdd``.

Requests kept come back through generators, one list of actions per request decided again
(execute each list before taking the next: a decision reads the rings as the last one left
them): ``resume(ledger_ids, view, now)`` when the owner resolver answered, ``retry(view, now)``
when a journal may have ring room.  No room on the ledger disks (``NoRoom`` / ``RoomAgain``
through ``handle``) turns the bookie read-only for adds until a retry succeeds; fences and
explicit LACs are still taken (their records are held with the adds: storage/noroom.py).
``due(durable, safe_to)`` (and the ``Durable`` event) gives the held-back answers whose records
their journal made durable and stored (invariant 6; while read-only durable is enough:
invariant 5).

The machine imports no I/O and reads no clock: ``now`` is passed in.  A request's ``token`` is
the loop's (its socket, frames and arrival time); the machine never looks inside it.

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
from typing import NamedTuple, Protocol

from bookie import wire
from bookie.core.ledgers import LedgerTable, Owner, Rejected
from bookie.core.quotas import RESYNC_S, Quotas, quota_exempt
from bookie.wire import Op, Status

GO, WAIT = 0, 1  # ``arrive``'s answers (plain ints: the hot path allocates nothing)
REREAD = 2  # ``named_rule``: read the metadata once more before deciding
FENCE = -1  # the op of a fence journaled for the read worker (bookie_requests_total{op="FENCE"})
FENCE_LANE = "fences of the read worker"  # the owner resolver's lane of fences (claims.py)
_ADD, _WRITE_LAC, _FORCE = int(Op.ADD), int(Op.WRITE_LAC), int(Op.FORCE_LEDGER)
_RECOVERY_ADD, _CREDENTIAL = wire.Bits.RECOVERY_ADD, wire.Bits.RECOVERY_CREDENTIAL
_DEFERRED = wire.Bits.DEFERRED_SYNC


class Request(NamedTuple):
    """One decoded message.  ``op``: Op.ADD, Op.WRITE_LAC, Op.FORCE_LEDGER or ``FENCE``;
    ``journal``: its ledger's journal (storage/journal_set.py); ``flags``: the header's (a
    fence's: 0); ``key``: the master key, or the recovery credential; ``body``: an ADD's
    (lengths frame, data frame), a WRITE_LAC's (lac,), else (); ``credential``: a fence on the
    recovery credential (an add says so in its flags); ``token``: the loop's, never looked at."""
    op: int
    ledger_id: int
    journal: int
    flags: int
    key: bytes
    body: tuple
    credential: bool
    token: object


class View(Protocol):
    """What the loop knows that a decision reads (``take``'s ``view``)."""

    def readonly(self) -> bool:
        """The bookie is read-only (the supervisor's word in the ring)."""

    def admit(self, request: Request):
        """The principal of a client request, once its share of the held-back answers allows
        it (core/shares.py); raises wire.ProtocolError(TOO_MANY_REQUESTS) past the share."""

    def role_admin(self, principal) -> bool:
        """The principal's role is admin (the recovery principal: core/quotas.py)."""

    def owner_ready(self, ledger_id: int, key: bytes, credential: bool, lane) -> bool:
        """The owner resolver can decide this now (claims.py ``ready``); False: it queued the
        lookup or verification the decision needs (the one thing a view starts)."""

    def owner(self, ledger_id: int):
        """The store's answer about an id known now, else None."""

    def named(self, ledger_id: int) -> bool | None:
        """Whether the metadata, as last read, names this bookie (None: not known)."""

    def reread_done(self, ledger_id: int) -> bool:
        """The metadata was read again since the ledger's requests parked."""

    def reread(self, ledger_id: int) -> bool:
        """Queue one more read of the ledger's metadata; False when the queue is full."""

    def held_entries(self, ledger_id: int, entry_ids) -> dict:
        """Batch index -> the bytes held, for the entries of the batch this bookie holds."""

    def uncommitted(self, ledger_id: int) -> bool:
        """Something of the ledger is stored but not yet committed to the index."""

    def write_position(self, journal: int) -> int:
        """The end of what is placed in the journal's ring (WRITE)."""

    def safe_to(self, journal: int) -> int:
        """The end of what is stored (entry log and index) in the journal's offsets."""

    def ring_free(self, journal: int) -> int:
        """Bytes free in the journal's ring."""

    def ring_capacity(self, journal: int) -> int:
        """The journal's ring size in bytes."""


class RecordSizes(NamedTuple):
    """A record's size without its key and data (storage/records.py): an ADD_BATCH's, a
    FENCE's, a LAC's.  The loop gives the real ones; the ring room a record needs is this plus
    its key (plus the lengths and data frames of an ADD)."""
    add: int = 0
    fence: int = 0
    lac: int = 0


# -- events ------------------------------------------------------------------------------------
class NoRoom(NamedTuple):
    """A write to the ledger disks failed for want of space."""


class RoomAgain(NamedTuple):
    """The held records, the index commit and the checkpoint all succeeded."""


class Durable(NamedTuple):
    """Each journal's DURABLE, and ``safe_to`` (the end of what is stored; None: all of it)."""
    positions: tuple
    stored: tuple | None = None


# -- actions -----------------------------------------------------------------------------------
class PlaceAdd(NamedTuple):
    """Place an ADD_BATCH record of these entries (key and flags as the rule book said) in the
    journal's ring, apply it to the table, store it, and hold its OK answer in the journal's
    order (``deferred``: answered once stored; ``wake``: ring the journal for it)."""
    request: Request
    journal: int
    key: bytes
    flags: int
    lengths_frame: object
    data: object
    lengths: object
    offsets: object
    entry_ids: object
    deferred: bool
    wake: bool
    principal: object


class PlaceRecord(NamedTuple):
    """Place a FENCE (``lac`` None) or a LAC record in the journal's ring, apply it, store it,
    and hold its OK answer in the journal's order."""
    request: Request
    journal: int
    key: bytes
    flags: int
    lac: int | None
    principal: object


class AnswerAt(NamedTuple):
    """Place nothing; hold an OK answer until the journal's ``end`` (None: its WRITE now) is
    durable (and stored): an add whose every entry is held with the same bytes
    (``duplicates`` of them), or a FORCE_LEDGER (``wake``: ring the journal at the iteration's
    end, its deferred records were placed without a wake-up)."""
    request: Request
    journal: int
    end: int | None
    principal: object
    duplicates: int = 0
    wake: bool = False


class Refuse(NamedTuple):
    """Answer ``status`` now; nothing was placed."""
    request: object
    status: Status


class Failed(NamedTuple):
    """Deciding the request raised what nobody foresaw: answer BAD_REQUEST and say ``error``
    (an input must never take the add path down)."""
    request: Request
    error: str


class Stall(NamedTuple):
    """A request waits for room in the journal's ring (kept: ``retry``): ring the journal,
    room comes as it writes."""
    journal: int


class OwnerDone(NamedTuple):
    """No request of the ledger waits for the owner resolver any more (claims.py ``consume``)."""
    ledger_id: int


class Answer(NamedTuple):
    """Send this held-back answer (a ``bookie.core.answers.Pending``)."""
    pending: object


class ReadOnly(NamedTuple):
    """Tell the bookie whether it is read-only for want of space (ring NO_ROOM)."""
    on: bool


class AddMachine:
    """The add worker's decisions (module docstring).  ``table``: the ledger rule book;
    ``answers``: the held-back answers (``bookie.core.answers.JournalAnswers``), set by the
    worker once its refusal budget exists; ``sizes``: the records' sizes (``RecordSizes``)."""

    def __init__(self, table: LedgerTable, journals: int, max_waiting: int, max_entry_bytes: int,
                 retry_s: float = 1.0, sizes: RecordSizes | None = None):
        self.table = table
        self.journals = journals
        self.max_waiting = max_waiting
        self.max_entry_bytes = max_entry_bytes
        self.retry_s = retry_s
        self.sizes = sizes or RecordSizes()
        self.answers = None
        self.parked: dict[int, collections.deque] = {}  # ledger -> requests waiting, in order
        self.parked_count = 0
        self.stalled: list[collections.deque] = [collections.deque() for _ in range(journals)]
        self.stalled_count = 0
        self.full = False  # no room on the ledger disks (invariant 5)
        self.next_retry = 0.0
        self.quotas = Quotas(0)  # invariant 8; the worker sets ledgerStorageQuotaBytes
        self.quota_enrolled = False  # an enrolled key is an identity (curveClientKeysDirectory)
        self.last_resync = float("-inf")

    # -- one message -----------------------------------------------------------------------------
    def take(self, request: Request, view: View, now: float) -> list:
        """Decide one message; its actions, in the order to carry them out (module docstring).
        Never raises for the request's sake: a refusal is a ``Refuse`` action, an unforeseen
        error a ``Failed`` one (an OSError, a failing disk, is raised: the supervisor's)."""
        out: list = []
        self._decide(request, view, out, False)
        return out

    def resume(self, ledger_ids, view: View, now: float):
        """The owner resolver answered for ``ledger_ids``: decide again, in order, the requests
        parked for them.  Yields each one's actions (carry them out before taking the next),
        then ``OwnerDone`` for a ledger none of whose requests waits for the resolver now (one
        parked anew keeps the rest behind it: invariant 1)."""
        for ledger_id in ledger_ids:
            for request in self.unpark(ledger_id):
                out: list = []
                self._decide(request, view, out, False)
                yield out
            if ledger_id not in self.parked:
                yield [OwnerDone(ledger_id)]

    def retry(self, view: View, now: float):
        """Decide again each journal's stalled requests, first first, while its ring has room
        (invariant 1).  Yields each one's actions (carry them out before taking the next)."""
        if not self.stalled_count:
            return
        for journal in range(self.journals):
            while self.stalled[journal]:
                self.stalled_count -= 1
                request = self.stalled[journal].popleft()
                out: list = []
                went = self._decide(request, view, out, True)
                yield out
                if not went:  # still no room: it is first again
                    break

    def _decide(self, r: Request, view: View, out: list, first_stalled: bool) -> bool:
        """Decide ``r`` into ``out``; False when it stalled for ring room."""
        try:
            op = r.op
            if op == _ADD:
                return self._add(r, view, out, first_stalled)
            principal = None if op == FENCE else view.admit(r)
            if (self.parked_count or self.stalled_count) and \
                    self.arrive(r.ledger_id, r.journal, r, first_stalled) == WAIT:
                return True
            if op == FENCE:
                return self._fence(r, view, out, first_stalled)
            if op == _WRITE_LAC:  # taken while read-only too: it stores no entry
                (lac,) = r.body
                if lac < -1:
                    raise Rejected(Status.BAD_REQUEST, "lac out of range")
                placed = self.table.check_write_lac(r.ledger_id, r.key)
                if not self._room(view, r, self.sizes.lac + len(placed.key), out, first_stalled):
                    return False
                out.append(PlaceRecord(r, r.journal, placed.key, placed.flags, lac, principal))
                return True
            if op == _FORCE:  # its "record": the journal's end when it came (invariant 6)
                out.append(AnswerAt(r, r.journal, None, principal, 0, True))
                return True
            raise Rejected(Status.BAD_REQUEST, "not an add-path op")
        except (Rejected, wire.ProtocolError) as e:
            out.append(Refuse(r, e.status))
        except OSError:
            raise  # a failing disk under the add path is the supervisor's to handle
        except Exception as e:  # noqa: BLE001 - an input nobody foresaw must not take the add path down
            out.append(Failed(r, repr(e)))
        return True

    def _add(self, r: Request, view: View, out: list, first_stalled: bool) -> bool:
        ledger_id, flags = r.ledger_id, r.flags
        principal = view.admit(r)
        if (self.parked_count or self.stalled_count) and \
                self.arrive(ledger_id, r.journal, r, first_stalled) == WAIT:
            return True
        recovery = bool(flags & _RECOVERY_ADD)
        # a recovery add of entries held already is answered while read-only (invariant 5)
        refusal = self.check_writable(view.readonly(), len(self.answers), recovery)
        lengths_frame, data = r.body
        lengths, offsets = wire.batch_offsets(lengths_frame, len(data), self.max_entry_bytes)
        ledgers, entry_ids = wire.batch_ids(data, offsets)
        self.check_batch(ledger_id, ledgers, entry_ids)
        credential = bool(flags & _CREDENTIAL)
        if self._waits_for_owner(r, view, principal, recovery, credential):
            return True
        placed = self.table.check_add(ledger_id, r.key, recovery, credential,
                                      self._owner(view, ledger_id))
        held = view.held_entries(ledger_id, entry_ids)
        if held:  # entries are write-once (invariant 4)
            lengths_frame, data, lengths, offsets, entry_ids = self.write_once(
                held, lengths_frame, data, lengths, offsets, entry_ids)
            if not len(entry_ids):  # all held, identical: stores nothing; answered in order
                end = self.duplicate_answer(view.write_position(r.journal), view.safe_to(r.journal),
                                            view.uncommitted(ledger_id))
                out.append(AnswerAt(r, r.journal, end, principal, len(held)))
                return True
        if refusal is not None:  # a recovery add that would store something
            raise Rejected(refusal)
        quota = self.quotas.limit_bytes  # ledgerStorageQuotaBytes (invariant 8)
        if quota:
            writer = self.quota_principal(principal)
            exempt = credential or (writer is not None and view.role_admin(writer))
            nbytes = int(lengths.sum())
            info = self.table.get(ledger_id)
            self.check_quota(ledger_id, recovery, exempt, writer, nbytes,
                             fenced=info is not None and info.fenced)
        size = self.sizes.add + len(placed.key) + len(lengths_frame) + len(data)
        if not self._room(view, r, size, out, first_stalled):
            return False
        if quota:
            self.placed(ledger_id, writer, nbytes, exempt)
        # a deferred add is answered once stored (invariant 6): no journal wake-up for it,
        # unless read-only, where its answer waits for durable as a normal add's does
        deferred = bool(flags & _DEFERRED)
        out.append(PlaceAdd(r, r.journal, placed.key, placed.flags, lengths_frame, data, lengths,
                            offsets, entry_ids, deferred, not deferred or self.full, principal))
        return True

    def _fence(self, r: Request, view: View, out: list, first_stalled: bool) -> bool:
        """Fences are taken while read-only too (invariant 5), and count to no share."""
        if self._waits_for_owner(r, view, FENCE_LANE, False, r.credential):
            return True
        placed = self.table.check_fence(r.ledger_id, r.key, r.credential,
                                        self._owner(view, r.ledger_id))
        if not self._room(view, r, self.sizes.fence + len(placed.key), out, first_stalled):
            return False
        out.append(PlaceRecord(r, r.journal, placed.key, placed.flags, None, None))
        return True

    def _room(self, view: View, r: Request, size: int, out: list, first_stalled: bool) -> bool:
        """Whether the journal's ring has room for a record of ``size`` bytes; else the request
        is stalled there (kept, first again when it was first: invariant 1)."""
        if size > view.ring_capacity(r.journal):
            raise Rejected(Status.BAD_REQUEST, "request larger than the journal ring")
        if view.ring_free(r.journal) >= size:
            return True
        self.stall(r.journal, r, again=first_stalled)
        out.append(Stall(r.journal))
        return False

    def _waits_for_owner(self, r: Request, view: View, lane, recovery: bool, credential: bool) -> bool:
        """Whether ``r`` parks for what deciding it needs from the owner resolver: the store's
        answer about the ledger, the verdict on its key, or one more read of metadata that does
        not name this bookie (invariant 7).  Raises Rejected(TOO_MANY_REQUESTS) past the bounds."""
        ledger_id = r.ledger_id
        info = self.table.ledgers.get(ledger_id)
        if info is not None and info.master_key:  # bound: nothing to ask (the hot path)
            return False
        if not view.owner_ready(ledger_id, r.key, credential, lane):
            self.park(ledger_id, r)
            return True
        if not self.table.needs_owner(ledger_id) or self.named_rule(
                view.named(ledger_id), view.reread_done(ledger_id), recovery, credential) is None:
            return False
        if not view.reread(ledger_id):
            raise Rejected(Status.TOO_MANY_REQUESTS, "metadata reads queued: try again")
        self.park(ledger_id, r)
        return True

    def _owner(self, view: View, ledger_id: int):
        """The store's answer about an id this bookie holds nothing for (None when the table
        holds the ledger: no need to ask; UNAVAILABLE when the resolver could not tell)."""
        if not self.table.needs_owner(ledger_id):
            return None
        return view.owner(ledger_id) or Owner.UNAVAILABLE

    # -- waiting (invariants 1-3) ----------------------------------------------------------------
    def arrive(self, ledger_id: int, journal: int, request, first_stalled: bool = False) -> int:
        """GO, or WAIT (kept: ``resume`` / ``retry`` decide it again).  ``first_stalled``: the
        request is journal ``journal``'s first stalled one, taken by ``retry`` (nothing of its
        journal is ahead of it).  Raises Rejected(TOO_MANY_REQUESTS) past ``max_waiting``."""
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

    def stall(self, journal: int, request, again: bool = False) -> None:
        """``request`` found journal ``journal``'s ring full (kept whatever the count: invariant
        3).  ``again``: it was the first of the journal's stalled requests: it stays first."""
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

    def unpark(self, ledger_id: int) -> collections.deque:
        """The requests parked for ``ledger_id``, in order, no longer kept."""
        waiting = self.parked.pop(ledger_id, None) or collections.deque()
        self.parked_count -= len(waiting)
        return waiting

    # -- the rules a decision applies ------------------------------------------------------------
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

    # -- quotas (invariant 8) --------------------------------------------------------------------
    def quota_principal(self, principal):
        """A request's writer identity for the quota: its enrolled key (with enrolment), or its
        local uid (``uid:N``: the kernel named it); None otherwise (an ephemeral key, or an
        address, is no identity)."""
        if self.quota_enrolled or (isinstance(principal, str) and principal.startswith("uid:")):
            return principal
        return None

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

    def resync_due(self, now: float, held: bool, force: bool = False) -> bool:
        """Whether usage is read again from the index now (core/quotas.py invariant 1): every
        ``RESYNC_S``, and only when everything placed is in the index (nothing ``held`` for
        want of room, not read-only for it); ``force``: at start and at the end."""
        if not force and (now - self.last_resync < RESYNC_S or held or self.full):
            return False
        self.last_resync = now
        return True

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
        a deferred add's once stored (invariant 6), in each journal's order; while read-only,
        each once durable, the adds and LACs not stored refused READ_ONLY (invariant 5).  (The
        loop's form of ``Durable``: no action object per answer.)"""
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
        """An event about the bookie's state in, the actions it calls for out."""
        kind = type(event)
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
