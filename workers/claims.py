"""Whose ledger id is it: the metadata store's answer when two keys meet on one id.

Theory of operation
-------------------
A bookie binds a ledger id to the key of the first add it sees for it (``bookie.core.ledgers``
rule 1).  Ledger ids are handed out in order, so anyone who may send adds can send one for the
next id before its ledger exists, and bind the id here to a key of its own: the ledger's writer
then gets UNAUTHORIZED (or FENCED, after a fence that binds nothing but fences) from this bookie.
The GC purges what a bookie holds under an id the store never created (``gc_policy``), but only
if its pass runs before the id is handed out.

This closes the rest of that window.  A writer stores a one-way check of its ledger's master key
in the metadata (``LedgerMetadata.key_check``).  When a request's key meets a ledger held here by
another key (``LedgerTable.claimed_by_other``), the add worker asks ``ClaimCheck.is_writer``;
when the store's check matches the request's key, what is held here was put there by someone
who reached the id first, and the add worker purges it (rule 7) and serves the request.

Cost and abuse: nothing on the normal path (only a refused request can lead here).  A ledger's
check never changes once created, so it is kept (``CACHE``: ledger id -> check, the oldest
dropped first) and a second meeting on the same ledger costs a SHA-256, not a lookup.  A miss
(no such ledger yet, or no check in it) is not kept: the ledger may be created a moment later.
Lookups are limited to ``LOOKUPS_PER_S`` a second, and after the store fails one, none is made
for ``BACKOFF_S``: a flood of refused requests cannot turn into a flood of metadata reads, nor
block the add worker (each lookup waits at most ``TIMEOUT_S``).  Past the limit a request gets
the refusal it would have got without this module.
"""

from __future__ import annotations

import collections
import time

from bookie.metadata.ledger import key_check_matches

CACHE = 65_536  # ledgers whose check is kept
LOOKUPS_PER_S = 200
TIMEOUT_S = 2.0  # the most one lookup may block the add worker
BACKOFF_S = 5.0


class ClaimCheck:
    """Reads ledgers' key checks from the metadata store, opened at the first need."""

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

    def is_writer(self, ledger_id: int, master_key: bytes) -> bool:
        """True when the metadata store's check of the ledger says ``master_key`` is its
        writer's; False when it says otherwise, has no check, has no such ledger, or cannot be
        asked now."""
        check = self.checks.get(ledger_id)
        if check is None:
            check = self._lookup(ledger_id)
            if not check:
                return False
        return key_check_matches(check, master_key)

    def _lookup(self, ledger_id: int) -> bytes | None:
        now = self.clock()
        if now < self.quiet_until:
            return None
        if now - self.window >= 1.0:
            self.window, self.lookups = now, 0
        if self.lookups >= LOOKUPS_PER_S:
            return None
        self.lookups += 1
        self.lookups_total += 1
        from bookie.metadata import MetadataError, NoSuchLedgerError, open_metadata
        try:
            if self.store is None:
                opener = self._opener or open_metadata
                self.store = opener(self.uri, timeout_s=TIMEOUT_S, zk_security=self.zk_security)
            meta, _ = self.store.read_ledger_latest(ledger_id)  # the writer created it just now
        except NoSuchLedgerError:
            return None
        except MetadataError as e:  # includes a record that does not decode
            self.quiet_until = now + BACKOFF_S
            self.log("ledger claim check: metadata store unavailable", level="warning",
                     ledger=ledger_id, error=f"{type(e).__name__}: {e}")
            return None
        check = bytes(meta.key_check)
        self.checks[ledger_id] = check  # b"": an older client's ledger, never reclaimed
        if len(self.checks) > CACHE:
            self.checks.popitem(last=False)
        return check

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
