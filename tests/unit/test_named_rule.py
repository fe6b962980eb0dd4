"""Only a bookie the metadata names takes a ledger's normal adds and fences (core/adds.py
invariant 7, issue 30 item 6): the rule, and the owner lookup's "named" answer (workers/claims.py)
over a real embedded metadata store, re-read on demand (never a kept "not named")."""

import time

import pytest

from bookie.core.adds import REREAD, AddMachine
from bookie.core.ledgers import LedgerTable, Rejected
from bookie.metadata import open_metadata
from bookie.metadata.ledger import LedgerMetadata
from bookie.workers.claims import OwnerLookup, OwnerResolver
from bookie.wire import Status

ME = "127.0.0.1:3181"


def rule(named, reread=False, recovery=False, credential=False):
    m = AddMachine(LedgerTable(), 1, max_waiting=10, max_entry_bytes=1024)
    return m.named_rule(named, reread, recovery, credential)


def test_not_named_is_read_again_once_then_refused():
    assert rule(False) == REREAD
    with pytest.raises(Rejected) as e:
        rule(False, reread=True)
    assert e.value.status == Status.NO_LEDGER


@pytest.mark.parametrize("kw", [{"named": True}, {"named": None}, {"named": False, "recovery": True},
                                {"named": False, "credential": True},
                                {"named": False, "reread": True, "recovery": True}])
def test_named_unknown_recovery_adds_and_the_credential_go_on(kw):
    assert rule(**kw) is None


def test_the_lookup_says_whether_the_metadata_names_this_bookie_and_a_re_read_sees_a_change(tmp_path):
    uri = f"lmdb://{tmp_path / 'md'}"
    store = open_metadata(uri, create=True)
    try:
        lid, version = store.create_ledger(LedgerMetadata(2, 2, 2, fragments=[(0, ["a:1", "b:1"])]))
        lookup = OwnerLookup(uri, bookie_id=ME)
        lookup.owner(lid)
        assert lookup.named_of(lid) is False
        # an ensemble change names this bookie; a kept answer does not see it, a re-read does
        meta, version = store.read_ledger(lid)
        changed = LedgerMetadata(2, 2, 2, fragments=[(0, ["a:1", "b:1"]), (5, ["a:1", ME])])
        store.write_ledger(lid, changed, version)
        lookup.owner(lid)
        assert lookup.named_of(lid) is False
        lookup.owner(lid, fresh=True)
        assert lookup.named_of(lid) is True
        assert OwnerLookup(uri).named_of(lid) is None  # no bookie id: not asked
        lookup.close()
    finally:
        store.close()


def test_the_resolver_re_reads_and_marks_the_ledger_until_its_requests_are_decided(tmp_path):
    uri = f"lmdb://{tmp_path / 'md'}"
    store = open_metadata(uri, create=True)
    try:
        lid, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, ["a:1"])]))
        resolver = OwnerResolver(OwnerLookup(uri, bookie_id=ME))
        try:
            assert resolver.reread(lid)
            deadline = time.monotonic() + 10
            ready = set()
            while lid not in ready and time.monotonic() < deadline:
                time.sleep(0.01)
                ready |= resolver.drain()
            assert lid in ready
            assert resolver.named[lid] is False and lid in resolver.reread_done
            resolver.consume(lid)
            assert lid not in resolver.reread_done
        finally:
            resolver.close()
    finally:
        store.close()
