"""The GC worker's look for over-replicated copies (BookKeeper's ``gcOverreplicatedLedgerWaitTime``):
copies this bookie holds of closed ledgers whose metadata names it in no fragment.

The rule is ``bookie.core.naming`` (``OverReplicated``, ``may_drop``); this module gathers its
facts and carries it out.  Every ``gcOverreplicatedLedgerWaitTime`` (at the GC run due then) the
worker reads the metadata of every ledger it holds that the store still lists: a closed one that
names this bookie nowhere, is not marked under-replicated and has no replication lock is a
candidate, with a token of what is held of it (entry count, last entry), unless it names an id
whose cookie in the store is a rename record to this bookie (it names this bookie by its old id:
``updateledgers`` has not run yet).  A candidate seen so,
with the same token, at every look for at least the wait is due: the worker takes its
replication lock (as BookKeeper's GC does: no replication worker copies to it meanwhile), reads
its metadata, its mark and its token once more, right before the delete, and drops the entries
from the index only if it is still a candidate with the same token (an
ensemble change that adds this bookie, or a copy arriving, stops it).  The ledger's record stays
(its binding, fence and explicit LAC: ``bookie.core.ledgers`` invariant 9); no tombstone and no
entry in the durable list of deletes: the ledger is not deleted, this bookie may hold it again (a
replication worker may choose it), and copies sent then are indexed under the same record.  The
entry logs' bytes of the dropped entries are dead for compaction (their count in the logs' ledger
maps goes to 0), which reclaims them.  A ledger whose metadata cannot be read (corrupt, or the store
failing) is never a candidate; a store that fails mid-look ends the look (the next one starts
the clocks from what they were).
"""

from __future__ import annotations

import orjson

from bookie.core import naming
from bookie.metadata import CookieNotFoundError, NoSuchLedgerError
from bookie.metadata.errors import CorruptMetadataError
from bookie.metadata.ledger import LedgerState
from bookie.metadata.underreplication import UnderReplication
from bookie.storage.index import Index

DROP_BATCH_ENTRIES = 10_000  # entries per write transaction: keep the add worker's commits flowing


def held_token(index: Index, ledger_id: int) -> tuple:
    """What this bookie holds of ``ledger_id``: (entry count, last entry id or -1)."""
    with index.begin() as txn:
        n = index.entry_count(txn, ledger_id)
        found = index.last_entry(txn, ledger_id)
    return n, -1 if found is None else found[0]


def view_of(store, ur: UnderReplication, marks: set[int], index: Index, ledger_id: int,
            me: str, locked_here: bool = False) -> naming.LedgerView:
    """The facts ``core.naming`` needs about one held ledger.  The token and the replication
    state are read only for a closed ledger that does not name ``me`` (the candidates);
    ``locked_here``: the replication lock is this look's own."""
    try:
        meta, _ = store.read_ledger(ledger_id)
    except (NoSuchLedgerError, CorruptMetadataError):
        return naming.LedgerView(None, False, False, ())
    closed = meta.state is LedgerState.CLOSED
    fragments = tuple((first, tuple(ensemble)) for first, ensemble in meta.fragments)
    if not closed or me in naming.named_bookies(fragments):
        return naming.LedgerView(fragments, closed, False, ())
    busy = ledger_id in marks or (not locked_here and ur.lock_holder(ledger_id) is not None)
    old_id = any(_renamed_to(store, b) == me for b in naming.named_bookies(fragments))
    return naming.LedgerView(fragments, closed, busy, held_token(index, ledger_id), old_id)


def _renamed_to(store, bookie: str) -> str | None:
    """The id ``bookie`` was renamed to, when its cookie in the store is a rename record."""
    try:
        raw, _ = store.read_cookie(bookie)
        return naming.renamed_to(orjson.loads(raw))
    except (CookieNotFoundError, ValueError):
        return None


def drop_copies(index: Index, ledger_id: int) -> None:
    """The ledger's entries leave the index (short write transactions); its record stays, with
    its fence (``bookie.core.ledgers`` invariant 9), and no tombstone: it may be held here again."""
    while True:
        with index.begin(write=True) as txn:
            n = index.drop_copies(txn, ledger_id, DROP_BATCH_ENTRIES)
        if n < DROP_BATCH_ENTRIES:
            break


def look(index: Index, store, me: str, tracker: naming.OverReplicated, now_s: float
         ) -> list[int]:
    """One look (module docstring): update ``tracker`` from the ledgers held here that the
    store lists, drop the copies of those due; returns the ids dropped.

    Raises:
        MetadataError: the store failed (nothing more is dropped in this look).
    """
    listed = set(store.list_ledgers())  # one absent from it is the scan-and-compare GC's
    with index.begin() as txn:
        # ledgers with entries indexed here (a dropped one keeps its record, not its entries)
        held = [lid for lid in index.indexed_ledger_ids(txn) if lid in listed]
    ur = UnderReplication(store)
    marks = set(ur.marks())
    views = {lid: view_of(store, ur, marks, index, lid, me) for lid in held}
    dropped = []
    for ledger_id in tracker.observe(now_s, views, me):
        seen = tracker.held_when_seen(ledger_id)
        # the replication lock, as BookKeeper's GC takes it: no worker copies here meanwhile
        if not seen[0] or not ur.try_lock(ledger_id, f"gc-overreplicated/{me}"):
            continue
        try:
            again = view_of(store, ur, set(ur.marks()), index, ledger_id, me, locked_here=True)
            if not naming.may_drop(again, me, seen):  # read again right before the delete
                continue
            drop_copies(index, ledger_id)
        finally:
            ur.unlock(ledger_id)
        tracker.forget(ledger_id)
        dropped.append(ledger_id)
    return dropped
