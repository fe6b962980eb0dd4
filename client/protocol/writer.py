"""The single writer of a ledger: adds, bookie failures, ensemble changes, close.

Theory of operation
-------------------
States::

    WRITING --close()--> CLOSING --CAS ok / closed at our LAC--> CLOSED
       |                    |
       +--fenced, unauthorized, closed elsewhere, no bookies--> FAILED

* ``add`` gives each payload the next entry id, formats it with the current LAC piggybacked and
  the running ledger length, and sends it to every non-failed position of its write set in
  the last fragment's ensemble.  ``PendingAdds`` confirms entries in order.
* A bookie failure (error status other than fenced / unauthorized, or a timeout) marks its
  position failed at once (its acks stop counting, nothing more is sent there) and starts an
  ensemble change: list writable bookies, replace every failed position with one not already
  in the ensemble (nor failed before for this ledger), CAS a fragment starting at LAC + 1.
  Once written, each replaced position is revived and every pending entry whose write set
  includes it is re-sent to the new bookie.  Failures during a change are queued for the next.
  A lost CAS is re-read: IN_RECOVERY -> fenced; CLOSED -> closed; still OPEN -> the change is
  applied again to what was read (the metadata update loop): a position whose bookie someone
  else renamed (``updateledgers``) is taken as it is now, no longer replaced, and sent every
  entry it should hold that is not durable yet; the rest are replaced again.  Nothing read
  before the CAS is ever written back.
* ``FENCED`` from any bookie means a reader is recovering the ledger: every pending add fails
  with LedgerFencedError (it may or may not be in the ledger; recovery decides).
* ``close`` waits until nothing is pending and no change is in flight, then CASes state CLOSED
  with last entry = LAC; a lost CAS is decided by ``ledger.close_decision``.

Confirm / FailAdds actions come out in entry order, so futures complete in entry order.

Deferred sync (``deferred_sync``, BookKeeper's ``WriteFlag.DEFERRED_SYNC``): an add is still
confirmed to its caller once Qa bookies acknowledged it, but the LAC the writer makes visible -
``lac``, piggybacked on entries, told in explicit LACs - stays at the last *forced* entry.
Its adds carry the DEFERRED_SYNC flag: a bookie acknowledges one once it is stored, before its
journal's fdatasync.  ``force()`` waits until every entry added before it is acknowledged, then
sends FORCE_LEDGER to every bookie of the ensembles holding the entries it covers (BookKeeper's
force waits for the whole ensemble, not an ack quorum: any bookie may hold an acknowledged
entry only in its page cache) and, once all answered OK, moves the visible LAC there (Forced
action, explicit LAC to the bookies); an error fails that force and leaves the LAC where it
was.  One FORCE_LEDGER round is out at a time; later forces wait behind it.  ``close`` forces
first and closes at the last acknowledged entry only once that is forced, so a closed ledger
never ends past a durable entry (a failed force fails the close; the ledger stays open).
A lost bookie (an add or a FORCE_LEDGER it failed) is replaced as without deferred sync, but the
new fragment starts right after the last *forced* entry, and the acknowledged entries after it
that the replaced position held are written again to the replacement (kept in ``_unforced``
until forced); a force waits for those rewrites and the change, then asks the new ensemble, so
no force needs the lost bookie and every acknowledged entry is forced where the metadata names
it.  A round that completes while a change is choosing its fragment is asked again after it.
Without deferred sync an acknowledged entry is durable already: ``force`` only waits.
"""

from __future__ import annotations

import collections
import random
from itertools import compress, cycle
from typing import Callable

from bookie.client.errors import (BookieError, BookKeeperError, LedgerClosedError,
                                  LedgerFencedError, NotEnoughBookiesError, QuotaExceededError,
                                  UnauthorizedError)
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import (Decision, LedgerInfo, LedgerState, close_decision,
                                           ensemble_change_conflict, replace_bookies)
from bookie.client.protocol.pending import PendingAdds
from bookie.wire import Status

_DUE_WITHIN_S = 1e-6  # a notice this close to due is due (a timer fires at, not after, it)

WRITING, CLOSING, CLOSED_STATE, FAILED = "writing", "closing", "closed", "failed"

# Statuses that end the writer rather than the bookie.
# a bookie that acknowledged this writer's adds, then went silent: it admits this client, so the
# cause is on its side (a journal disk with no room holds adds unanswered until it has room)
_STOPPED_ANSWERING = ("stopped answering after acknowledging adds (not a key matter: a full or "
                      "hung journal disk, an overload or a crash; see its log and "
                      "GET /api/v1/bookie/state)")
# a silent bookie that the registrations no longer list as writable: down (or read-only), not a
# key matter
_NOT_REGISTERED = "did not answer and is not registered as writable (down or read-only)"
_FATAL = {int(Status.FENCED), int(Status.UNAUTHORIZED), int(Status.BAD_REQUEST),
          int(Status.BAD_VERSION), int(Status.OVER_QUOTA)}
BACKOFF_S = 0.005  # re-send delay after TOO_MANY_REQUESTS


def _status_name(status: int) -> str:
    """A bookie's status, or the I/O thread's TIMEOUT / UNREACHABLE, by name."""
    try:
        return Status(status).name
    except ValueError:
        return {A.TIMEOUT: "timed out", A.UNREACHABLE: "unreachable"}.get(status, str(status))

Encoder = Callable[[int, int, int, bytes], bytes]  # (entry_id, lac, length, payload) -> entry
# (first entry_id, lac, ledger length before, payloads) -> (entries, running length of each)
BatchEncoder = Callable[[int, int, int, list], tuple[list, list]]


class LedgerWriter:
    def __init__(self, info: LedgerInfo, version, encode: Encoder, *,
                 rng: random.Random | None = None, explicit_lac_interval_s: float = 0.0,
                 encode_many: BatchEncoder | None = None, deferred_sync: bool = False,
                 placement=None, lac_notice_interval_s: float = 0.0, curve: bool = True):
        self.info = info
        self.curve = curve  # this client has a CURVE key: a refusal may be its role's
        self.version = version
        self.ledger_id = info.ledger_id
        self.ensemble: list[str] = list(info.last_ensemble)
        self.pending = PendingAdds(info.ensemble_size, info.write_quorum, info.ack_quorum,
                                   lac=info.last_entry_id)
        self.state = WRITING
        self.error: BookKeeperError | None = None
        self.length = info.length  # bytes of all entries handed out
        self.confirmed_length = info.length  # bytes up to and including the LAC
        # running ledger length of each pending entry, from index _lengths_head on
        self._lengths: list[int] = []
        self._lengths_head = 0
        self._encode = encode
        self._encode_many = encode_many or self._encode_each
        self._rng = rng or random.Random()
        self._to_replace: set[int] = set()  # failed positions waiting for an ensemble change
        self._changing: set[int] | None = None  # positions the in-flight change replaces
        self._bad_bookies: set[str] = set()  # failed for this ledger: never chosen again
        self._failed_status: dict[str, int] = {}  # a failed bookie -> its answer (or TIMEOUT)
        self._answered: set[str] = set()  # bookies that acknowledged an add: they admit this client
        self._explicit_lac_s = explicit_lac_interval_s
        self._lac_sent = self.pending.lac  # highest LAC bookies surely know
        self._behind_since: float | None = None  # since when the LAC is ahead of _lac_sent
        self._notice_s = lac_notice_interval_s
        self._notice_at = float("-inf")  # when the last LAC notice went out
        self._notice_armed = False  # a TickAfter for a notice that was not due yet is out
        self._noticed = self.pending.lac  # highest LAC sent in a notice
        # (last entry id, when added) per add call, while notices are on: how long the entry
        # that just moved the LAC waited for its acks (``_ack_wait``), i.e. how deep the
        # bookies' queues are in time
        self._added_at: collections.deque = collections.deque()
        self._ack_wait = 0.0
        self.deferred_sync = deferred_sync
        self.placement = placement  # client.protocol.placement.Placement, or None (random)
        self._forced_lac = info.last_entry_id  # deferred sync: the LAC made visible by force()
        self._force_targets: list[int] = []  # deferred forces, each: the last entry it covers
        # the FORCE_LEDGER round out now: [last entry it covers, {bookie yet to answer OK: its
        # SendForce}]; an answer to a request of an abandoned round is not counted
        self._forcing: list | None = None
        # deferred sync: acknowledged entries no force covered yet (entry id -> bytes), to be
        # written again to a bookie that replaces a lost one; and such rewrites still unanswered
        # (bookie -> entry ids), which the next FORCE_LEDGER round waits for
        self._unforced: dict[int, bytes] = {}
        self._rewrites: dict[str, set[int]] = {}
        self.merkle = None  # a verifiable ledger's MerkleTree of the entries added (client.py)
        self._handlers = {
            A.AddResponse: self._on_add_response, A.BookiesListed: self._on_bookies,
            A.MetadataWritten: self._on_metadata_written,
            A.MetadataConflict: self._on_metadata_conflict,
            A.MetadataFailed: self._on_metadata_failed, A.WriteLacResponse: self._ignore,
            A.ForceResponse: self._on_force_response,
        }

    # -- queries -------------------------------------------------------------------------------

    @property
    def lac(self) -> int:
        """The LAC this writer makes visible: the last confirmed entry, or with deferred sync
        the last forced one."""
        if self.deferred_sync:
            return min(self.pending.lac, self._forced_lac)
        return self.pending.lac

    @property
    def last_add_pushed(self) -> int:
        """The highest entry id handed out (acknowledged or not)."""
        return self.pending.next_entry_id - 1

    @property
    def outstanding(self) -> int:
        return len(self.pending)

    # -- inputs --------------------------------------------------------------------------------

    def add(self, payloads, now: float = 0.0) -> tuple[int, list]:
        """Take payloads for the next entry ids.

        Returns:
            (entry id of the first payload, actions)
        Raises:
            LedgerClosedError / LedgerFencedError / ...: the writer takes no more adds.
        """
        if self.state != WRITING:
            raise self._refusal()
        pending, lac = self.pending, self.lac
        first = pending.next_entry_id
        datas, lengths = self._encode_many(first, lac, self.length, payloads)
        if not datas:
            return first, []
        pending.extend(datas)
        if self.deferred_sync:
            self._unforced.update(zip(range(first, first + len(datas)), datas))
        if self._notice_s > 0:
            self._added_at.append((first + len(datas) - 1, now))
        self._lengths.extend(lengths)
        self.length = lengths[-1]
        if lac > self._lac_sent:
            self._lac_sent = lac
        self._behind_since = None  # these entries carry the current LAC to their bookies
        return first, self._send(first, datas)

    def _encode_each(self, first: int, lac: int, length: int, payloads):
        """encode_many for an encoder of one entry at a time."""
        encode = self._encode
        datas, lengths = [], []
        entry_id = first
        for payload in payloads:
            length += len(payload)
            datas.append(encode(entry_id, lac, length, payload))
            lengths.append(length)
            entry_id += 1
        return datas, lengths

    def handle(self, event, now: float = 0.0) -> list:
        if isinstance(event, A.Tick):
            return self.tick(now)
        return self._handlers[type(event)](event, now)

    def close(self, now: float = 0.0) -> list:
        """Start closing: the CAS is written once nothing is pending.  Ends with Finished."""
        if self.state == CLOSED_STATE:
            return [A.Finished(result=self.info)]
        if self.state == FAILED and not isinstance(self.error, NotEnoughBookiesError):
            return [A.Finished(error=self._refusal())]
        if self.state == CLOSING:
            return []
        self.state = CLOSING
        return self._maybe_write_close()

    def abort(self, error: BookKeeperError, now: float = 0.0) -> list:
        """End the writer for a reason outside the protocol (its ledger was deleted): every
        pending add fails with ``error``, and later adds and the close are refused with it.
        Nothing happens once the writer is closed or failed already."""
        if self.state in (CLOSED_STATE, FAILED):
            return []
        return self._fail(error)

    def force(self, now: float = 0.0) -> list:
        """Make every entry added so far visible in the LAC once all are acknowledged: a
        Forced(last) comes out then (at once when nothing is outstanding), in the order the
        forces were asked.  Without deferred sync the LAC is visible already: it only waits."""
        if self.state not in (WRITING, CLOSING):  # closed: BookKeeper's LedgerClosedException
            return [A.Forced(self.lac, self._refusal())]
        self._force_targets.append(self.last_add_pushed)
        return self._forces_done()

    def _forces_done(self) -> list:
        out: list = []
        while self._force_targets and self.pending.lac >= self._force_targets[0]:
            last = self._force_targets[0]
            if self.deferred_sync and last > self._forced_lac:
                out += self._start_force(last)  # Forced once every bookie answered
                break
            self._force_targets.pop(0)
            self._set_forced(last)
            out.append(A.Forced(last))
        if out and self.deferred_sync and self.lac > self._lac_sent:
            self._lac_sent = self.lac  # readers see the forced LAC now, not at the next tick
            out = [A.SendWriteLac(b, self._lac_sent) for p, b in enumerate(self.ensemble)
                   if not self.pending.position_failed(p)] + out
        return out

    def _start_force(self, last: int) -> list:
        """Send FORCE_LEDGER for the acknowledged entries up to ``last`` (none if a round is
        out already: it is asked again when that one ends)."""
        if self._forcing is not None or self._changing is not None or self._rewrites:
            return []  # asked again once the round, the ensemble change or the rewrites end
        first = self._forced_lac + 1
        bookies: set[str] = set()
        fragments = self.info.fragments
        for i, (start, ensemble) in enumerate(fragments):
            end = fragments[i + 1][0] - 1 if i + 1 < len(fragments) else last
            if start <= last and end >= first:
                bookies.update(ensemble)
        if not bookies:
            bookies.update(self.ensemble)
        requests = {b: A.SendForce(b) for b in sorted(bookies)}
        self._forcing = [last, requests]
        return list(requests.values())

    def _on_force_response(self, event: A.ForceResponse, now: float) -> list:
        f = self._forcing
        bookie = event.request.bookie
        if f is None or f[1].get(bookie) is not event.request or \
                self.state not in (WRITING, CLOSING):
            return []
        if (event.status != Status.OK and event.status not in _FATAL and self.error is None
                and bookie in self.ensemble):
            # A lost bookie: replaced like one that failed an add, and the round asked again of
            # the new ensemble once the change is written (the entries it held unforced are
            # written again to its replacement first); only a failed change fails the force.
            pos = self.ensemble.index(bookie)
            if self._changing is not None or not self.pending.position_failed(pos):
                self._forcing = None
                return self._bookie_failed(pos, event.status)
        if event.status != Status.OK:
            self._forcing = None
            if event.status in _FATAL:
                error = self._fatal_error(event.status, bookie)
            else:
                error = BookieError(f"bookie {bookie} did not make ledger {self.ledger_id} "
                                    f"durable (FORCE_LEDGER: {_status_name(event.status)}); "
                                    f"the LAC stays at {self.lac}", ledger_id=self.ledger_id)
            out: list = []
            while self._force_targets and self._force_targets[0] <= f[0]:
                out.append(A.Forced(self._force_targets.pop(0), error))
            if self.state == CLOSING:  # a close forces first: it fails, the ledger stays open
                self.state = WRITING
                out.append(A.Finished(error=error))
            return out + self._forces_done()
        del f[1][bookie]
        if f[1]:
            return []
        self._forcing = None
        if self._changing is not None:
            # An ensemble change is choosing its fragment from the forced LAC: the LAC stays
            # put until it is written, and the round is asked again of the new ensemble then.
            return []
        self._set_forced(f[0])
        out = self._forces_done()
        if self.state == CLOSING:
            out += self._maybe_write_close()
        return out

    def _notice(self, now: float) -> list:
        """LAC notice: the LAC moved while adds are still outstanding, and the next add to carry
        it would reach each bookie late: behind every outstanding add when the bookies' queues
        are deep, or never while the outstanding adds are stuck.  Then tell the bookies now
        with an explicit LAC, which the I/O thread sends on a connection of its own.

        Rule (``lacNoticeInterval`` = I): a notice goes when the LAC is ahead of what any add
        carried, adds are outstanding, and either the entry that just moved the LAC waited at
        least I for its acks (queues at least I deep: the next add would be as late) or the LAC
        has gone uncarried for I (adds stuck, none sent since); at most one per I, the notice
        that is not due yet armed for when it is (TickAfter).  Acks that come back within I
        with adds still flowing send none: the next add tells the bookies as soon, and a notice
        would cost each bookie a request, a journal record and an index commit for nothing
        (at I = 1 ms that cost a quarter of the E3/Qw2 throughput).  With nothing outstanding
        the next add carries the LAC, or the explicit LAC of ``tick`` once adds pause.

        A notice is best effort (the I/O thread drops those past its per-bookie budget), so it
        leaves ``_lac_sent`` alone: the explicit LAC still follows once adds pause."""
        if (self.state not in (WRITING, CLOSING) or self.lac <= max(self._lac_sent, self._noticed)
                or not len(self.pending)):
            return []
        interval = self._notice_s
        wait = self._notice_at + interval - now
        if self._ack_wait < interval:  # shallow queues: only an uncarried LAC is worth telling
            behind = self._behind_since
            wait = max(wait, interval - (now - behind) if behind is not None else interval)
        if wait > _DUE_WITHIN_S:
            if self._notice_armed:
                return []
            self._notice_armed = True
            return [A.TickAfter(wait)]
        self._notice_at = now
        self._noticed = self.lac
        return [A.SendWriteLac(b, self._noticed, notice=True) for p, b in enumerate(self.ensemble)
                if not self.pending.position_failed(p)]

    def _waited(self, last: int, now: float) -> float:
        """How long entry ``last`` (just confirmed) waited since it was added."""
        added = self._added_at
        while added and added[0][0] < last:
            added.popleft()
        return now - added[0][1] if added else 0.0

    def tick(self, now: float) -> list:
        """Explicit LAC: when the bookies have lagged the LAC for the explicit LAC interval
        (no add carried it since it moved: adds paused, or the last ones are draining), tell
        them, so tailing readers see every confirmed entry within about that interval.  Also
        sends a LAC notice that was armed (``_notice``)."""
        armed: list = []
        if self._notice_armed:
            self._notice_armed = False
            armed = self._notice(now)  # the notice, or a TickAfter re-armed for when it is due
            if armed and type(armed[0]) is A.SendWriteLac:
                return armed
        if (self._explicit_lac_s <= 0 or self.state != WRITING or self.lac <= self._lac_sent
                or self._behind_since is None or now - self._behind_since < self._explicit_lac_s):
            return armed
        self._notice_armed = False  # the explicit LAC tells them: a re-armed notice has no use
        self._lac_sent = self.lac
        self._behind_since = None
        return [A.SendWriteLac(b, self._lac_sent) for p, b in enumerate(self.ensemble)
                if not self.pending.position_failed(p)]

    # -- add path ------------------------------------------------------------------------------

    def _send(self, first: int, datas: list) -> list:
        """SendAdds of the consecutive entries ``first ..`` to every live position of their
        write sets.  Position p holds entry e when (p - e) % E < Qw: a pattern that repeats
        every E entries, so each bookie's share is picked with ``compress`` over a cycle."""
        e_size, qw = self.info.ensemble_size, self.info.write_quorum
        n = len(datas)
        ids = range(first, first + n)
        out = []
        for pos, bookie in enumerate(self.ensemble):
            if self.pending.position_failed(pos):
                continue
            if qw == e_size:
                out.append(A.SendAdd(bookie, ids, datas))
                continue
            pattern = [(pos - e) % e_size < qw for e in range(first, first + e_size)]
            sel_ids = list(compress(ids, cycle(pattern)))
            if sel_ids:
                out.append(A.SendAdd(bookie, sel_ids, list(compress(datas, cycle(pattern)))))
        return out

    def _on_add_response(self, event: A.AddResponse, now: float) -> list:
        if self.state not in (WRITING, CLOSING):
            return []
        bookie = event.request.bookie
        try:
            pos = self.ensemble.index(bookie)
        except ValueError:
            return []  # a bookie replaced since: its answers no longer matter
        status = event.status
        if status == Status.OK:
            self._answered.add(bookie)
            rewrites = self._rewrites.get(bookie)
            if not rewrites:
                return self._acked(pos, event, now)
            rewrites.difference_update(event.request.entry_ids)  # deferred sync's rewrites
            if rewrites:
                return self._acked(pos, event, now)
            del self._rewrites[bookie]
            out = self._acked(pos, event, now)
            return out if self._rewrites else out + self._after_change()
        if status in _FATAL:
            return self._fail(self._fatal_error(status, bookie))
        if status == Status.TOO_MANY_REQUESTS and not self.pending.position_failed(pos):
            ids, datas = [], []
            rewrites = self._rewrites.get(bookie, ())
            for entry_id in event.request.entry_ids:
                if entry_id in rewrites:
                    ids.append(entry_id)
                    datas.append(self._unforced[entry_id])
                elif entry_id > self.pending.lac and entry_id < self.pending.next_entry_id:
                    ids.append(entry_id)
                    datas.append(self.pending.data(entry_id))
            return [A.SendAdd(bookie, ids, datas, delay_s=BACKOFF_S)] if ids else []
        return self._bookie_failed(pos, status)

    def _acked(self, pos: int, event: A.AddResponse, now: float) -> list:
        """An OK from the bookie at ``pos``: count it, and confirm what reached its quorum."""
        done = self.pending.ack(pos, event.request.entry_ids)
        if done is None:
            return []
        if self._behind_since is None:
            self._behind_since = now
        first, last = done
        head = self._lengths_head + last - first + 1
        self.confirmed_length = self._lengths[head - 1]
        if head > 4096 and head * 2 > len(self._lengths):
            del self._lengths[:head]
            head = 0
        self._lengths_head = head
        out: list = [A.Confirm(first, last)]
        if self._notice_s > 0:
            self._ack_wait = self._waited(last, now)
            out += self._notice(now)
        if self._force_targets:
            out += self._forces_done()
        if self.state == CLOSING:
            out += self._maybe_write_close()
        return out

    def _fatal_error(self, status: int, bookie: str) -> BookKeeperError:
        lid = self.ledger_id
        if status == Status.FENCED:
            return LedgerFencedError(
                f"ledger {lid} was fenced (bookie {bookie}): another client opened it for "
                f"recovery; unconfirmed adds may or may not be in it - open the ledger to see",
                ledger_id=lid)
        if status == Status.UNAUTHORIZED:
            # The password was checked against the ledger's metadata when it was created or
            # opened: a refusal here is the bookie's, of this client or of this key.
            if not self.curve:  # a client without a key reaches no CURVE bookie at all
                return UnauthorizedError(
                    f"bookie {bookie} refused adds to ledger {lid} (UNAUTHORIZED) although the "
                    f"password matches the ledger's metadata: the bookie holds ledger {lid} "
                    f"under another password (a ledger id used twice: was the metadata store "
                    f"formatted again while the bookie kept its data?)", ledger_id=lid)
            return UnauthorizedError(
                f"bookie {bookie} refused adds to ledger {lid} (UNAUTHORIZED) although the "
                f"password matches the ledger's metadata: the bookie speaks CURVE and enrols "
                f"this client's key as a reader only (adds need the key in its "
                f"curveClientKeysDirectory/writer/), or it holds ledger {lid} under another "
                f"password", ledger_id=lid)
        if status == Status.OVER_QUOTA:
            return QuotaExceededError(
                f"bookie {bookie} refused adds to ledger {lid} (OVER_QUOTA): this writer "
                f"stores its ledgerStorageQuotaBytes on that bookie already; the ledger takes "
                f"no more adds (delete ledgers of this writer, or ask for a larger quota)",
                ledger_id=lid)
        return BookieError(f"bookie {bookie} rejected adds to ledger {lid} with status "
                           f"{Status(status).name} (entry too large for the bookie's "
                           f"nettyMaxFrameSizeBytes, or a client/bookie version mismatch)",
                           ledger_id=lid)

    # -- ensemble change -----------------------------------------------------------------------

    def _bookie_failed(self, pos: int, status: int = A.TIMEOUT) -> list:
        if self.pending.position_failed(pos):
            return []
        self.pending.fail_position(pos)
        self._rewrites.pop(self.ensemble[pos], None)
        self._bad_bookies.add(self.ensemble[pos])
        self._failed_status[self.ensemble[pos]] = status
        self._to_replace.add(pos)
        if self._changing is None:
            self._changing = set()
            return [A.ListBookies()]
        return []

    def _why_failed(self, positions: list[int], registered: set | None = None) -> str:
        """The failed bookies by what they did: a bookie that answered (read-only, an error)
        is named with its answer; one that acknowledged adds before and then went silent admits
        this client (its disk, its journal or its load is the cause, never a key), and so does
        one no longer registered (``registered``: the writable bookies just listed), which is
        down; only one that runs, is registered and never answered may be a CURVE bookie that
        does not admit this client, and then that comes first, before "start more bookies"
        (which a client without a CURVE key of its own is not told: its key is the likelier
        cause)."""
        by_why: dict[str, list[str]] = {}
        for p in positions:
            bookie = self.ensemble[p]
            status = self._failed_status.get(bookie, A.TIMEOUT)
            silent = status in (A.TIMEOUT, A.UNREACHABLE)
            why = (_STOPPED_ANSWERING if silent and bookie in self._answered else
                   _NOT_REGISTERED if silent and registered is not None
                   and bookie not in registered else
                   "did not answer" if silent else
                   "refused adds: read-only" if status == Status.READ_ONLY else
                   f"failed ({A.status_name(status)})")
            by_why.setdefault(why, []).append(bookie)
        parts = [f"bookie(s) {', '.join(b)} {why}" for why, b in by_why.items()]
        if "did not answer" in by_why and self.curve:
            parts.append("a bookie that runs but never answers this client speaks CURVE and "
                         "does not admit it: enrol the public key of the client's "
                         "curveSecretKeyFile in the bookie's curveClientKeysDirectory")
        elif "did not answer" in by_why:
            parts.append("a bookie that runs but never answers a client without a CURVE key "
                         "requires enrolled keys (curveClientKeysDirectory): set the client's "
                         "curveSecretKeyFile to a key enrolled there")
        return "; ".join(parts)

    def _on_bookies(self, event: A.BookiesListed, now: float) -> list:
        if self.state not in (WRITING, CLOSING) or self._changing is None:
            return []
        positions = set(self._to_replace)
        writable = [b for b in event.writable if b not in self._bad_bookies]
        new_info = replace_bookies(self.info, self.ensemble, sorted(positions), writable,
                                   self._change_first(), self._rng, self.placement)
        if new_info is None:
            listed = set(event.writable)
            silent = all(self._failed_status.get(self.ensemble[p], A.TIMEOUT)
                         in (A.TIMEOUT, A.UNREACHABLE) and self.ensemble[p] not in self._answered
                         and self.ensemble[p] in listed for p in positions)
            advice = ("set the client's curveSecretKeyFile (above): this client has no CURVE "
                      "key of its own" if silent and not self.curve else
                      "start more bookies or make them writable")
            return self._fail(NotEnoughBookiesError(
                f"ledger {self.ledger_id}: {self._why_failed(sorted(positions), listed)}, and only "
                f"{len(set(writable) - set(self.ensemble))} writable bookie(s) outside the "
                f"ensemble are registered to replace them; {advice}", ledger_id=self.ledger_id))
        short = self.placement and self.placement.short_of(new_info.last_ensemble,
                                                           self.info.write_quorum)
        if short:
            return self._fail(NotEnoughBookiesError(
                f"ledger {self.ledger_id}: cannot replace bookie(s) "
                f"{', '.join(self.ensemble[p] for p in sorted(positions))}: {short}"
                f"{self.placement.domains_of(writable)}", ledger_id=self.ledger_id))
        self._changing = positions
        return [A.WriteMetadata(new_info, self.version, "ensemble")]

    def _change_first(self) -> int:
        """The first entry of an ensemble change's fragment: after the LAC, or with deferred
        sync after the last *forced* entry (an acknowledged entry the lost bookie held only in
        its page cache is then written again to its replacement, where force makes it durable;
        so no force ever needs the lost bookie)."""
        if self.deferred_sync:
            return min(self._forced_lac, self.pending.lac) + 1
        return self.pending.lac + 1

    def _on_metadata_written(self, event: A.MetadataWritten, now: float) -> list:
        if event.request.purpose == "close":
            self.info, self.version = event.request.info, event.version
            self.state = CLOSED_STATE
            return [A.Finished(result=self.info)]
        if self.state not in (WRITING, CLOSING):
            return []
        self.info, self.version = event.request.info, event.version
        self.ensemble = list(self.info.last_ensemble)
        out: list = []
        for pos in sorted(self._changing or ()):
            self._to_replace.discard(pos)
            out += self._resend(pos)
        self._changing = None
        self._forcing = None  # a round out asked the old ensemble: asked again (_after_change)
        if self._to_replace:
            self._changing = set()
            return out + [A.ListBookies()]
        return out + self._after_change()

    def _after_change(self) -> list:
        """What waited for an ensemble change (or a rewrite) to end: a force round, the close."""
        out = self._forces_done() if self._force_targets else []
        if self.state == CLOSING:
            out += self._maybe_write_close()
        return out

    def _resend(self, pos: int) -> list:
        """Revive position ``pos`` (a bookie newly named there) and send it every entry it should
        hold that is not durable yet: the pending ones, and with deferred sync the acknowledged
        ones no force covered (the new fragment starts right after the last forced entry, so
        ``force`` makes them durable there; it waits for these rewrites first)."""
        bookie = self.ensemble[pos]
        out: list = []
        e_size, qw = self.info.ensemble_size, self.info.write_quorum
        if self.deferred_sync:
            first = max(self._forced_lac + 1, self.info.last_fragment_first)
            again = [e for e in range(first, self.pending.lac + 1) if (pos - e) % e_size < qw]
            if again:
                self._rewrites[bookie] = set(again)
                out.append(A.SendAdd(bookie, again, [self._unforced[e] for e in again]))
        ids = self.pending.revive_position(pos)
        if ids:
            out.append(A.SendAdd(bookie, ids, [self.pending.data(e) for e in ids]))
        return out

    def _adopt_ensemble(self, fresh) -> list:
        """Take the last ensemble of metadata someone else changed (``updateledgers`` renamed a
        bookie in it): a position that names another bookie now is no longer ours to replace;
        its acks are forgotten and every entry it should hold is sent to the bookie named
        there now (the same bytes: a renamed bookie that holds them answers OK)."""
        out: list = []
        for pos, bookie in enumerate(fresh):
            if bookie == self.ensemble[pos]:
                continue
            self._to_replace.discard(pos)
            self._rewrites.pop(self.ensemble[pos], None)
            self.pending.fail_position(pos)
            self.ensemble[pos] = bookie
            out += self._resend(pos)
        return out

    def _set_forced(self, last: int) -> None:
        """Entries up to ``last`` are durable on every bookie holding them: the visible LAC."""
        if last <= self._forced_lac:
            return
        for e in range(self._forced_lac + 1, last + 1):
            self._unforced.pop(e, None)
        self._forced_lac = last

    def _on_metadata_conflict(self, event: A.MetadataConflict, now: float) -> list:
        reread = event.info
        if event.request.purpose == "close":
            decision = close_decision(reread, self.pending.lac)
            if decision == Decision.RETRY:
                self.version = event.version
                self.info = reread
                return [self._close_request()]
            if decision == Decision.DONE:
                self.info, self.version, self.state = reread, event.version, CLOSED_STATE
                return [A.Finished(result=reread)]
            return self._fail(self._not_open_error(decision, reread))
        if self.state not in (WRITING, CLOSING):
            return []
        decision = ensemble_change_conflict(reread)
        if decision != Decision.RETRY:
            return self._fail(self._not_open_error(decision, reread))
        # The metadata update loop: the change is a function of the metadata ("replace the
        # bookie at position p of the last fragment while it is still the one that failed"),
        # applied again to what was read; nothing we read before is ever written back.
        self.info, self.version = reread, event.version
        out = self._adopt_ensemble(reread.last_ensemble)
        self._changing = None
        self._forcing = None
        if self._to_replace:
            self._changing = set()
            return out + [A.ListBookies()]
        return out + self._after_change()

    def _not_open_error(self, decision: str, reread: LedgerInfo) -> BookKeeperError:
        lid = self.ledger_id
        if decision == Decision.FENCED:
            return LedgerFencedError(
                f"ledger {lid} is being recovered by another client (state IN_RECOVERY); "
                f"this writer was fenced out - open the ledger to see what it holds",
                ledger_id=lid)
        return LedgerClosedError(
            f"ledger {lid} was closed by another client at entry {reread.last_entry_id} while "
            f"this writer had confirmed up to {self.pending.lac}", ledger_id=lid)

    def _on_metadata_failed(self, event: A.MetadataFailed, now: float) -> list:
        if event.request is not None and getattr(event.request, "purpose", None) == "close":
            self.state = WRITING if self.state == CLOSING else self.state
            return [A.Finished(error=event.error)]
        return self._fail(event.error)

    # -- close ---------------------------------------------------------------------------------

    def _maybe_write_close(self) -> list:
        if len(self.pending) or self._changing is not None:
            return []
        if self.deferred_sync and self._forced_lac < self.pending.lac:
            # a closed ledger never ends past a durable entry: force what was acknowledged
            # first (this round's answer calls back here)
            return self._start_force(self.pending.lac)
        return [self._close_request()]

    def _close_request(self) -> A.WriteMetadata:
        lac = self.pending.lac  # with deferred sync: forced first (_maybe_write_close)
        closed = self.info.replace(state=LedgerState.CLOSED, last_entry_id=lac,
                                   length=self.confirmed_length)
        if self.merkle is not None:  # verifiable (issue 43): the root goes with the close
            closed = closed.replace(merkle_root=self.merkle.root_hex(lac + 1))
        return A.WriteMetadata(closed, self.version, "close")

    # -- failure -------------------------------------------------------------------------------

    def _fail(self, error: BookKeeperError) -> list:
        was_closing = self.state == CLOSING
        self.state = FAILED
        self.error = error
        self._changing = None
        out: list = []
        dropped = self.pending.drain()
        self._lengths.clear()
        self._lengths_head = 0
        self.length = self.confirmed_length
        if dropped:
            out.append(A.FailAdds(dropped[0], dropped[1], error))
        forces, self._force_targets, self._forcing = self._force_targets, [], None
        self._rewrites.clear()
        out += [A.Forced(last, error) for last in forces]
        if was_closing:
            if isinstance(error, NotEnoughBookiesError):
                # Nothing pending any more: the ledger can still be closed at its LAC.
                self.state = CLOSING
                out += self._maybe_write_close()
            else:
                out.append(A.Finished(error=error))
        return out

    def _refusal(self) -> BookKeeperError:
        if self.state in (CLOSING, CLOSED_STATE):
            return LedgerClosedError(f"ledger {self.ledger_id} is closed (or closing): it "
                                     f"takes no more adds; create a new ledger",
                                     ledger_id=self.ledger_id)
        assert self.error is not None
        return type(self.error)(str(self.error), ledger_id=self.ledger_id)

    def _ignore(self, event, now: float) -> list:
        return []
