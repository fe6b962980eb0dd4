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

Named.  The same read says whether the ledger's metadata names this bookie (its ``bookieId``)
in any fragment's ensemble (``named_of``); the add machine refuses a normal add or a fence of a
ledger that does not (``bookie.core.adds`` ``named_rule``), but only after ``reread``: one more
read, whatever is kept, since an ensemble change names this bookie before its adds come.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
import time

from bookie.core.ledgers import Owner, Rejected
from bookie.metadata.ledger import key_check_matches
from bookie.wire import MAX_MASTER_KEY, Status

CACHE = 65_536  # ledgers whose check is kept (and (check, key) answers: a quarter of it)
MAX_JOBS = 256  # lookups and verifications queued at most
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
        from bookie.metadata import MetadataError, NoSuchLedgerError, open_metadata
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

    def __init__(self, lookup: OwnerLookup, verify=key_check_matches):
        self.lookup = lookup
        self._verify = verify
        self.known: collections.OrderedDict[int, object] = collections.OrderedDict()  # kept answers
        self.fresh: dict[int, tuple[object, float]] = {}  # answers used for FRESH_S only
        self.verdicts: collections.OrderedDict[tuple[bytes, bytes], bool] = collections.OrderedDict()
        self.named: dict[int, bool] = {}  # the lookups' ``named_of`` (core/adds.py ``named_rule``)
        self.reread_done: set[int] = set()  # ledgers read again since their requests parked
        self.queued: set[tuple[int, bytes]] = set()
        self.jobs: queue.Queue = queue.Queue()
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

    def ready(self, table, ledger_id: int, key: bytes, credential: bool) -> bool:
        """True when ``table`` can decide a request for ``ledger_id`` with ``key`` now (past
        ``MAX_JOBS`` too: the decision is then TOO_MANY_REQUESTS); False when the missing work
        was queued and the caller parks the request until ``drain`` names the ledger."""
        if not credential and not 0 < len(key) <= MAX_MASTER_KEY:
            return True  # refused for its size, nothing to look up
        check = table.owner_check_of(ledger_id)
        if table.needs_owner(ledger_id):
            owner = self.owner(ledger_id)
            if owner is None:
                return not self._queue(ledger_id, b"" if credential else bytes(key), None)
            check = owner if isinstance(owner, bytes) else b""
        if not check or credential or (check, bytes(key)) in self.verdicts:
            return True
        return not self._queue(ledger_id, bytes(key), check)

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

    def _queue(self, ledger_id: int, key: bytes, check: bytes | None, fresh: bool = False) -> bool:
        """Queue the work a request needs (``check``: verify ``key`` against it; None: ask the
        store first); False when the queue is full (nothing queued)."""
        if (ledger_id, key) in self.queued:
            return True
        if len(self.queued) >= MAX_JOBS:
            return False  # decided now: owner() answers None (UNAVAILABLE), verified() refuses
        self.queued.add((ledger_id, key))
        self.jobs.put((ledger_id, key, check, fresh))
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
            self.queued.discard((ledger_id, key))
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
        self.jobs.put(None)
        self._thread.join(timeout=5)
        os.close(self._r)
        os.close(self._w)
        self.lookup.close()
