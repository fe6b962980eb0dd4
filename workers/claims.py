"""Who owns a ledger id: the metadata store's answer, asked once, before anything is stored;
and whether a key is the one the owner's check names.  Both off the add worker's loop.

Theory of operation
-------------------
The ledger rule book (``bookie.core.ledgers``, invariant 1) lets nothing be stored or fenced
under an id this bookie holds nothing for until the metadata store has said whether the ledger
exists and which key owns it (its ``key_check``).  ``OwnerLookup.owner`` asks and returns a
``bookie.core.ledgers.Owner`` or the check's bytes; the rule book decides with it.

Cost and abuse.  A lookup happens once per ledger per bookie: on its first request, after which
the ledger's binding is in the index.  A ledger's check never changes once created, so it is
kept (``CACHE``: ledger id -> check, the oldest dropped first); an id the store does not know is
not kept (the ledger may be created a moment later).  Lookups are limited to ``LOOKUPS_PER_S`` a
second, and after the store fails one, none is made for ``BACKOFF_S``: a flood of requests for
made-up ids cannot turn into a flood of metadata reads, nor block the add worker for long (each
lookup waits at most ``TIMEOUT_S``).  Past the limit the answer is ``Owner.UNAVAILABLE``: the
request is refused TOO_MANY_REQUESTS and nothing is stored; a writer's client backs off and
sends again.  On ZooKeeper the read follows a ``sync`` (``read_ledger_latest``): the writer
may have created the ledger through another server a moment ago.

Off the loop.  A lookup may wait for the store, and a ledger's check is a slow, memory-hard
verifier (tens to hundreds of milliseconds of CPU): neither may stall every other client of the
add worker.  ``OwnerResolver`` runs both on a thread of their own: the add worker asks
``ready`` whether everything a request needs is known; when it is not, the request is parked
(with every later request for the same ledger, so their order holds) and the work queued; the
thread's answers come back through a pipe the loop polls, and the parked requests are handled
again, now deciding at once.  Verifications are remembered per (check, key), so a ledger costs
one at each bookie; at most ``MAX_JOBS`` are queued (a flood of made-up keys against a ledger
not bound yet gets TOO_MANY_REQUESTS past that, never an unbounded queue of CPU work).

Verifier cost and fairness (issue 33).  A client writes its own ledger's record, verifier
parameters included: a bookie evaluates only ``ALLOWED_VERIFIERS`` (what this product writes;
at most 16 MiB and ~40 ms each) and refuses any other check without evaluating it
(UNAUTHORIZED).  And the queue is one lane per client identity (the request's principal: its
enrolled CURVE key, else its address), served in turn, at most ``MAX_JOBS_PER_PRINCIPAL`` jobs
each: a stranger's flood of made-up keys delays a known writer's first add by one evaluation
at most, not by the whole queue.

Named.  The same read says whether the ledger's metadata names this bookie (its ``bookieId``)
in any fragment's ensemble (``named_of``); the add machine refuses a normal add or a fence of a
ledger that does not (``bookie.core.adds`` ``named_rule``), but only after ``reread``: one more
read, whatever is kept, since an ensemble change names this bookie before its adds come.
"""

from __future__ import annotations

import collections
import os
import threading
import time

from bookie.core.ledgers import Owner, Rejected
from bookie.metadata.ledger import (
    KEY_CHECK_SIZE, SCRYPT_LOG2_N, SCRYPT_P, SCRYPT_R, key_check_matches, verifier_parameters)
from bookie.wire import MAX_MASTER_KEY, Status
from bookie.metadata import MetadataError, NoSuchLedgerError, open_metadata

CACHE = 65_536  # ledgers whose check is kept (and (check, key) answers: a quarter of it)
MAX_JOBS = 256  # lookups and verifications queued at most
MAX_JOBS_PER_PRINCIPAL = MAX_JOBS // 4  # of them, one client identity's
# The verifier parameters (log2 N, r, p) bookies evaluate: what this product writes now, and
# wrote before (2**14: metadata/ledger.py).  Any other is refused without an evaluation: a
# client writes its own ledger's record, and must not choose what a key check costs a bookie
# (up to 1 GiB and 250 times the CPU otherwise).  At most 16 MiB and ~40 ms per evaluation.
ALLOWED_VERIFIERS = frozenset({(SCRYPT_LOG2_N, SCRYPT_R, SCRYPT_P), (14, 8, 1)})


def allowed_verifier(check: bytes) -> bool:
    """Whether a bookie evaluates ``check`` at all: an older record's salted SHA-256, or a
    verifier whose parameters are in ``ALLOWED_VERIFIERS``."""
    check = bytes(check)
    if len(check) == KEY_CHECK_SIZE:
        return True
    return verifier_parameters(check) is not None and \
        (check[1], check[2], check[3]) in ALLOWED_VERIFIERS


def bounded_key_check(check: bytes, master_key: bytes) -> bool:
    """``key_check_matches`` for the verifiers a bookie evaluates; False, at once, for any
    other (the request is refused UNAUTHORIZED, as for a wrong key)."""
    return allowed_verifier(check) and key_check_matches(check, master_key)
FRESH_S = 1.0  # the most an answer that is not kept (no such ledger, store unavailable) is used
LOOKUPS_PER_S = 200
TIMEOUT_S = 2.0  # the most one lookup may block the add worker
BACKOFF_S = 5.0
_REREAD = b"\0re-read"  # the job key of ``reread`` (no verification: the identity is the mark)


class OwnerLookup:
    """Reads ledgers' key checks from the metadata store, opened at the first need.  Without a
    store (``uri`` empty) every answer is ``Owner.NO_STORE``."""

    def __init__(self, uri: str, zk_security=None, log=None, clock=time.monotonic, opener=None,
                 bookie_id: str | None = None):
        self.uri = uri
        self.bookie_id = bookie_id  # whether the metadata names it (``named_of``); None: not asked
        self.unnamed: set[int] = set()  # read ledgers whose fragments do not name ``bookie_id``
        self.zk_security = zk_security
        self.log = log or (lambda *a, **k: None)
        self.clock = clock
        self._opener = opener
        self.store = None
        self.checks: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self.window = clock()
        self.lookups = 0  # this second's
        self.quiet_until = 0.0
        self.lookups_total = 0
        self.unavailable_total = 0

    def owner(self, ledger_id: int, fresh: bool = False):
        """The store's answer for ``ledger_id``: the ledger's ``key_check`` (bytes), or
        ``Owner.NO_CHECK`` / ``UNKNOWN`` / ``UNAVAILABLE`` / ``NO_STORE``.  ``fresh``: read the
        store again, whatever is kept (the ensembles change; the check does not)."""
        if not self.uri:
            return Owner.NO_STORE
        check = None if fresh else self.checks.get(ledger_id)
        if check is not None:
            return check or Owner.NO_CHECK
        answer = self._lookup(ledger_id)
        if answer is Owner.UNAVAILABLE:
            self.unavailable_total += 1
        return answer

    def _lookup(self, ledger_id: int):
        now = self.clock()
        if now < self.quiet_until:
            return Owner.UNAVAILABLE
        if now - self.window >= 1.0:
            self.window, self.lookups = now, 0
        if self.lookups >= LOOKUPS_PER_S:
            return Owner.UNAVAILABLE
        self.lookups += 1
        self.lookups_total += 1
        try:
            if self.store is None:
                opener = self._opener or open_metadata
                self.store = opener(self.uri, timeout_s=TIMEOUT_S, zk_security=self.zk_security)
            meta, _ = self.store.read_ledger_latest(ledger_id)  # the writer created it just now
        except NoSuchLedgerError:
            return Owner.UNKNOWN
        except MetadataError as e:  # includes a record that does not decode
            self.quiet_until = now + BACKOFF_S
            self.log("ledger owner lookup: metadata store unavailable", level="warning",
                     ledger=ledger_id, error=f"{type(e).__name__}: {e}")
            return Owner.UNAVAILABLE
        check = bytes(meta.key_check)
        if self.bookie_id is not None:
            if any(self.bookie_id in ensemble for _, ensemble in meta.fragments):
                self.unnamed.discard(ledger_id)
            else:
                if len(self.unnamed) >= CACHE:
                    self.unnamed.clear()
                self.unnamed.add(ledger_id)
        self.checks[ledger_id] = check  # b"": an older client's ledger (first-add binding)
        if len(self.checks) > CACHE:
            self.checks.popitem(last=False)
        return check or Owner.NO_CHECK

    def named_of(self, ledger_id: int) -> bool | None:
        """Whether the ledger's metadata, as last read, names this bookie in a fragment's
        ensemble (None: not asked, or not read)."""
        if self.bookie_id is None or ledger_id not in self.checks:
            return None
        return ledger_id not in self.unnamed

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class OwnerResolver:
    """The store's answers and the checks' verdicts for the add worker's loop, worked out on a
    thread of their own (module docstring).  The loop calls ``ready`` and ``verified``, polls
    ``fileno`` and calls ``drain`` when it is readable; only the thread calls the lookup."""

    def __init__(self, lookup: OwnerLookup, verify=bounded_key_check):
        self.lookup = lookup
        self._verify = verify
        self.known: collections.OrderedDict[int, object] = collections.OrderedDict()  # kept answers
        self.fresh: dict[int, tuple[object, float]] = {}  # answers used for FRESH_S only
        self.verdicts: collections.OrderedDict[tuple[bytes, bytes], bool] = collections.OrderedDict()
        self.queued: dict[tuple[int, bytes], object] = {}  # job -> the principal it is counted to
        self.per_principal: collections.Counter = collections.Counter()
        self.jobs = _Lanes()
        self.named: dict[int, bool] = {}  # the lookups' ``named_of`` (core/adds.py ``named_rule``)
        self.reread_done: set[int] = set()  # ledgers read again since their requests parked
        self.done: collections.deque = collections.deque()
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self.verifications_total = 0
        self._thread = threading.Thread(target=self._run, name="owner-resolver", daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        return self._r

    # -- the loop's side -------------------------------------------------------------------------
    def owner(self, ledger_id: int):
        """The store's answer for ``ledger_id`` if known now, else None."""
        if not self.lookup.uri:
            return Owner.NO_STORE
        answer = self.known.get(ledger_id)
        if answer is not None:
            return answer
        fresh = self.fresh.get(ledger_id)
        if fresh is not None and time.monotonic() - fresh[1] < FRESH_S:
            return fresh[0]
        return None

    def consume(self, ledger_id: int) -> None:
        """The requests parked for ``ledger_id`` were decided: an answer that is not kept (no
        such ledger yet, store unavailable) is not used again (the ledger may be created, the
        store come back, a moment later)."""
        self.fresh.pop(ledger_id, None)
        self.reread_done.discard(ledger_id)

    def reread(self, ledger_id: int) -> bool:
        """Queue one more read of the ledger's metadata, whatever is kept (before a refusal
        for not being named: an ensemble change names this bookie before its adds come);
        ``drain`` then names the ledger.  False when the queue is full."""
        return self._queue(ledger_id, _REREAD, None, fresh=True)

    def ready(self, table, ledger_id: int, key: bytes, credential: bool,
              principal=None) -> bool:
        """True when ``table`` can decide a request for ``ledger_id`` with ``key`` now (past
        ``MAX_JOBS``, or its ``principal``'s ``MAX_JOBS_PER_PRINCIPAL``, too: the decision is
        then TOO_MANY_REQUESTS); False when the missing work was queued and the caller parks
        the request until ``drain`` names the ledger.  The thread serves the principals in
        turn (``_Lanes``): one client's made-up keys delay another's by one job at most."""
        if not credential and not 0 < len(key) <= MAX_MASTER_KEY:
            return True  # refused for its size, nothing to look up
        check = table.owner_check_of(ledger_id)
        if table.needs_owner(ledger_id):
            owner = self.owner(ledger_id)
            if owner is None:
                return not self._queue(ledger_id, b"" if credential else bytes(key), None,
                                       principal)
            check = owner if isinstance(owner, bytes) else b""
        if not check or credential or (check, bytes(key)) in self.verdicts:
            return True
        if not allowed_verifier(check):  # refused without an evaluation (ALLOWED_VERIFIERS)
            self.verdicts[(check, bytes(key))] = False
            if len(self.verdicts) > CACHE // 4:
                self.verdicts.popitem(last=False)
            return True
        return not self._queue(ledger_id, bytes(key), check, principal)

    def ask(self, ledger_id: int) -> bool:
        """Queue a lookup of the store's answer for ``ledger_id`` (no key to verify: the read
        worker's long polls); False when the queue is full (nothing queued)."""
        return self._queue(ledger_id, b"", None)

    def verified(self, check: bytes, master_key: bytes) -> bool:
        """The verdict for the table (``LedgerTable.verify``), as the thread worked it out.

        Raises:
            Rejected(TOO_MANY_REQUESTS): none yet (the queue was full when ``ready`` asked):
                the loop never works a verifier out itself.
        """
        answer = self.verdicts.get((check, bytes(master_key)))
        if answer is None:
            raise Rejected(Status.TOO_MANY_REQUESTS, "key verifications queued: try again")
        return answer

    def _queue(self, ledger_id: int, key: bytes, check: bytes | None, principal=None,
               fresh: bool = False) -> bool:
        """Queue the work a request needs (``check``: verify ``key`` against it; None: ask the
        store first) in ``principal``'s lane; False when the queue, or that principal's share
        of it, is full (nothing queued)."""
        if (ledger_id, key) in self.queued:
            return True
        if len(self.queued) >= MAX_JOBS or self.per_principal[principal] >= MAX_JOBS_PER_PRINCIPAL:
            return False  # decided now: owner() answers None (UNAVAILABLE), verified() refuses
        self.queued[(ledger_id, key)] = principal
        self.per_principal[principal] += 1
        self.jobs.put(principal, (ledger_id, key, check, fresh))
        return True

    def drain(self) -> set[int]:
        """Take the thread's answers in; returns the ledgers whose parked requests may go on."""
        try:
            while os.read(self._r, 4096):
                pass
        except BlockingIOError:
            pass
        ready = set()
        while self.done:
            ledger_id, key, owner, verdict, named = self.done.popleft()
            if (ledger_id, key) in self.queued:
                principal = self.queued.pop((ledger_id, key))
                self.per_principal[principal] -= 1
                if self.per_principal[principal] <= 0:
                    del self.per_principal[principal]
            if named is not None:
                if len(self.named) >= CACHE:
                    self.named.clear()
                self.named[ledger_id] = named
            if key is _REREAD:
                self.reread_done.add(ledger_id)
            if owner is not None:
                if isinstance(owner, bytes) or owner is Owner.NO_CHECK:
                    self.known[ledger_id] = owner
                    if len(self.known) > CACHE:
                        self.known.popitem(last=False)
                else:
                    self.fresh[ledger_id] = (owner, time.monotonic())
            if verdict is not None:
                self.verdicts[verdict[0]] = verdict[1]
                if len(self.verdicts) > CACHE // 4:
                    self.verdicts.popitem(last=False)
            ready.add(ledger_id)
        if len(self.fresh) > CACHE:
            self.fresh.clear()
        return ready

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            ledger_id, key, check, fresh = job
            owner = verdict = named = None
            try:
                if check is None:
                    owner = self.lookup.owner(ledger_id, fresh)
                    named = self.lookup.named_of(ledger_id)
                    check = owner if isinstance(owner, bytes) else b""
                if check and key and key is not _REREAD:
                    verdict = ((check, key), bool(self._verify(check, key)))
                    self.verifications_total += 1
            except Exception:  # noqa: BLE001 - an answer must come back, or the requests wait forever
                owner = Owner.UNAVAILABLE
            self.done.append((ledger_id, key, owner, verdict, named))
            os.write(self._w, b"\0")

    def close(self) -> None:
        self.jobs.close()
        self._thread.join(timeout=5)
        os.close(self._r)
        os.close(self._w)
        self.lookup.close()


class _Lanes:
    """The resolver's queue: one FIFO lane per principal, served in turn (round robin), so a
    principal with many jobs queued delays each other principal's next job by one job at most.
    ``get`` blocks; after ``close`` it returns None."""

    def __init__(self):
        self._lanes: collections.OrderedDict[object, collections.deque] = collections.OrderedDict()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, principal, job) -> None:
        with self._cond:
            self._lanes.setdefault(principal, collections.deque()).append(job)
            self._cond.notify()

    def get(self):
        with self._cond:
            while not self._lanes and not self._closed:
                self._cond.wait()
            if not self._lanes:
                return None
            principal, lane = self._lanes.popitem(last=False)
            job = lane.popleft()
            if lane:
                self._lanes[principal] = lane  # to the back: the others' turn first
            return job

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
