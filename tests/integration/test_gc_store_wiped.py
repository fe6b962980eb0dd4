"""A GC pass whose listing overlaps a wipe of the metadata store deletes nothing (issue 44 item
3: ``test_gc_deletes_nothing_when_the_store_lists_no_ledgers`` once logged ``gc deleted_ledgers=1``
right after ``format(force=True)``).  ZooKeeper's wipe removes nodes one by one: a listing taken
in between names some ledgers and not others, and the one this bookie held, missing from it and
under the high-water mark, looked deleted.  The wipe now removes the instance id first, and the
GC compares the instance id read before its listing with the one after."""

from __future__ import annotations

import pytest

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.store import INSTANCEID
from bookie.storage.index import Index, open_index
from bookie.workers.gc_worker import EmptyListingRefused, collect


class _WipedWhileListing:
    """The real store; its listing runs after the wipe's first deletions, as a concurrent
    ``metaformat --force`` would make it: the instance id, then the held ledger's node."""

    def __init__(self, store, ledger_id: int):
        self._store, self._ledger_id = store, ledger_id

    def __getattr__(self, name):
        return getattr(self._store, name)

    def list_ledgers(self):
        self._store.delete(INSTANCEID)
        self._store.remove_ledger(self._ledger_id)
        return self._store.list_ledgers()


def test_a_listing_overlapping_a_wipe_drops_no_ledger(zk_uri, tmp_path):
    with open_metadata(zk_uri) as store:
        ids = [store.create_ledger(LedgerMetadata(1, 1, 1))[0] for _ in range(3)]
        held = ids[1]
        env = open_index(str(tmp_path / "index"), 64 << 20)
        try:
            index = Index(env)
            with env.begin(write=True) as txn:
                index.put_ledger(txn, held, {})
            with pytest.raises(EmptyListingRefused, match="wiped or reformatted"):
                collect(index, _WipedWhileListing(store, held), [str(tmp_path)])
            with env.begin() as txn:
                assert index.ledger_ids(txn) == [held] and not index.is_deleted(txn, held)
        finally:
            env.close()


def test_the_wipe_removes_the_instance_id_before_any_ledger(zk_uri):
    with open_metadata(zk_uri) as store:
        store.create_ledger(LedgerMetadata(1, 1, 1))
        gone = []
        real = store._delete_abs
        store._delete_abs = lambda path, version: (gone.append(path), real(path, version))[1]
        store.format(force=True)
        assert gone[0].endswith(INSTANCEID), gone[:3]
