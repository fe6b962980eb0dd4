"""Who owns a ledger id: the metadata store's answer, asked once, before anything is stored.

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
"""

from __future__ import annotations

import collections
import time

from bookie.core.ledgers import Owner

CACHE = 65_536  # ledgers whose check is kept
LOOKUPS_PER_S = 200
TIMEOUT_S = 2.0  # the most one lookup may block the add worker
BACKOFF_S = 5.0


class OwnerLookup:
    """Reads ledgers' key checks from the metadata store, opened at the first need.  Without a
    store (``uri`` empty) every answer is ``Owner.NO_STORE``."""

    def __init__(self, uri: str, zk_security=None, log=None, clock=time.monotonic, opener=None):
        self.uri = uri
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

    def owner(self, ledger_id: int):
        """The store's answer for ``ledger_id``: the ledger's ``key_check`` (bytes), or
        ``Owner.NO_CHECK`` / ``UNKNOWN`` / ``UNAVAILABLE`` / ``NO_STORE``."""
        if not self.uri:
            return Owner.NO_STORE
        check = self.checks.get(ledger_id)
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
        self.checks[ledger_id] = check  # b"": an older client's ledger (first-add binding)
        if len(self.checks) > CACHE:
            self.checks.popitem(last=False)
        return check or Owner.NO_CHECK

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
