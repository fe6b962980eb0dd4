"""Issue 15: a ledger id cannot be squatted, even between two GC passes.

Someone who may send adds sends one (or a fence) for the next ledger id before the id is handed
out, and no GC pass runs before its ledger is created.  The writer's first request then meets
the id held by another key; the bookie asks the metadata store (the ledger's ``key_check``),
purges what the other key put there and serves the writer (``bookie.core.ledgers`` rule 7).
A fence by the writer's own key still holds.
"""

import pytest

from bookie.client import BookKeeper
from bookie.client.digest import master_key
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import make_key_check
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie.workers import claims
from bookie.workers.claims import ClaimCheck

CONF = {"gcWaitTime": 600_000, "flushInterval": 50, "entryLogFilePreallocationEnabled": "false",
        "minorCompactionInterval": 0, "majorCompactionInterval": 0}
SQUATTER_KEY = b"not-the-writer"
PASSWORD = b"the-real-writer"
KEY = master_key(PASSWORD)


def _create(bk, e=1):
    return bk.create_ledger(ensemble_size=e, write_quorum=e, ack_quorum=e, digest="crc32c",
                            password=PASSWORD)


def _next_ids(store, ens, n):
    """Ids the store has not handed out, and a function that hands out every id before them."""
    first = store.ledger_id_high_water() + 1
    filler = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])

    def skip_to_them():
        while store.ledger_id_high_water() < first - 1:  # the store hands out ids in order
            store.create_ledger(filler)
    return list(range(first, first + n)), skip_to_them


def _read_back(bk, lid, n):
    rh = bk.open_ledger(lid, digest="crc32c", password=PASSWORD)
    try:
        return [e.data for e in rh.read_entries(0, rh.last_add_confirmed)] if n else []
    finally:
        rh.close()


def _squat_and_create(ens, store, bk, raws):
    """Squat the next ids (adds on even offsets, fences on odd ones: the store's next id is
    only known to be above its high-water mark), then create ledgers until one got an id of
    each kind; returns (added, fenced)."""
    ids, skip_to_them = _next_ids(store, ens, 6)
    for raw in raws:
        for lid in ids[0::2]:
            for e in range(10):
                assert raw.add(lid, [make_entry(lid, e, b"squatted")], SQUATTER_KEY) == Status.OK
        for lid in ids[1::2]:
            assert raw.fence(lid, SQUATTER_KEY) == Status.OK
    skip_to_them()
    got = {}
    while len(got) < 2:
        lh = _create(bk, len(raws))
        assert lh.ledger_id in ids
        kind = "added" if (lh.ledger_id - ids[0]) % 2 == 0 else "fenced"
        # without the fix: UNAUTHORIZED / FENCED from every bookie, and the add fails
        for i in range(5):
            lh.add_entry(b"real-%d-%d" % (lh.ledger_id, i), timeout_s=5)
        lh.close()
        got.setdefault(kind, lh.ledger_id)
    return got["added"], got["fenced"]


def _expect_writer_only(bk, raws, added, fenced):
    for lid in (added, fenced):
        assert _read_back(bk, lid, 5) == [b"real-%d-%d" % (lid, i) for i in range(5)]
    for raw in raws:
        assert raw.read(added, 7)[0] in (Status.NO_ENTRY, Status.NO_LEDGER)  # squatter's entries gone
        # the id is the writer's now: the squatter is refused, no second reclaim
        assert raw.add(added, [make_entry(added, 20, b"again")], SQUATTER_KEY) == Status.UNAUTHORIZED


def test_a_squatted_id_is_the_writers_without_a_gc_pass_and_stays_so_after_a_sigkill():
    with LocalBookies(1, conf=CONF) as ens, open_metadata(ens.metadata_uri) as store, \
            BookKeeper(ens.metadata_uri) as bk, RawBookieClient(ens.bookies[0]) as raw:
        added, fenced = _squat_and_create(ens, store, bk, [raw])
        _expect_writer_only(bk, [raw], added, fenced)
        assert ens.log(0).count("ledger id reclaimed") >= 2
        assert "purged_ledgers" not in ens.log(0)  # no GC pass did it
        raw.close()
        ens.kill(0)  # the squatter's records are still in the journal: replay must skip them
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as raw2:
            _expect_writer_only(bk, [raw2], added, fenced)


@pytest.mark.security
def test_on_zookeeper_every_bookie_of_the_ensemble_gives_the_id_back(zk_uri):
    with LocalBookies(3, metadata_uri=zk_uri, conf=CONF) as ens, open_metadata(zk_uri) as store, \
            BookKeeper(zk_uri) as bk:
        raws = [RawBookieClient(b) for b in ens.bookies]
        try:
            added, fenced = _squat_and_create(ens, store, bk, raws)
            _expect_writer_only(bk, raws, added, fenced)
        finally:
            for raw in raws:
                raw.close()


@pytest.fixture(scope="module")
def one():
    with LocalBookies(1, conf=CONF) as ens:
        yield ens


def test_a_fence_by_the_writers_key_still_holds(one):
    ens = one
    with BookKeeper(ens.metadata_uri) as bk, RawBookieClient(ens.bookies[0]) as raw:
        lh, mixed = _create(bk), _create(bk)
        # a recovery that reached this bookie before the writer's first add did
        assert raw.fence(lh.ledger_id, KEY) == Status.OK
        # fenced by a stranger, then by the writer's key: the fence holds for good
        assert raw.fence(mixed.ledger_id, SQUATTER_KEY) == Status.OK
        assert raw.fence(mixed.ledger_id, KEY) == Status.OK
        for h in (lh, mixed):
            lid = h.ledger_id
            assert raw.add(lid, [make_entry(lid, 0, b"late")], KEY) == Status.FENCED
            assert raw.add(lid, [make_entry(lid, 0, b"copy")], KEY, recovery=True) == Status.OK
        assert "ledger id reclaimed" not in ens.log(0)


def test_a_ledger_without_a_key_check_keeps_the_first_binding(one):
    """A ledger an older client created (no key_check in its metadata): nothing is reclaimed."""
    ens = one
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as raw:
        (lid,), skip_to_them = _next_ids(store, ens, 1)
        assert raw.add(lid, [make_entry(lid, 0, b"first")], SQUATTER_KEY) == Status.OK
        skip_to_them()
        got, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))
        assert got == lid
        assert raw.add(lid, [make_entry(lid, 1, b"second")], KEY) == Status.UNAUTHORIZED
        assert "ledger id reclaimed" not in ens.log(0)


def test_a_strangers_guesses_do_not_hurt_the_writer(one):
    ens = one
    with BookKeeper(ens.metadata_uri) as bk, RawBookieClient(ens.bookies[0]) as raw:
        lh = _create(bk)
        lh.add_entry(b"real", timeout_s=5)
        lid = lh.ledger_id
        for i in range(300):
            assert raw.add(lid, [make_entry(lid, 1 + i, b"x")], b"guess-%d" % i) == Status.UNAUTHORIZED
            assert raw.fence(lid, b"guess-%d" % i) == Status.UNAUTHORIZED
        assert lh.add_entry(b"still", timeout_s=5) == 1
        assert "ledger id reclaimed" not in ens.log(0)


def test_the_claim_check_reads_each_ledger_once_and_within_its_budget(tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    with open_metadata(uri, create=True) as store:
        ids = [store.create_ledger(LedgerMetadata(1, 1, 1, key_check=make_key_check(KEY),
                                                  fragments=[(0, ["b:1"])]))[0] for _ in range(3)]
        old, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, ["b:1"])]))
    now = [0.0]
    check = ClaimCheck(uri, clock=lambda: now[0])
    try:
        for _ in range(50):  # the check is kept: one read per ledger, however often asked
            assert [check.is_writer(lid, KEY) for lid in ids] == [True] * 3
            assert not check.is_writer(ids[0], SQUATTER_KEY) and not check.is_writer(old, KEY)
        assert check.lookups_total == 4
        for lid in range(10**9, 10**9 + 2 * claims.LOOKUPS_PER_S):  # ids nobody created
            assert not check.is_writer(lid, KEY)
        assert check.lookups_total == claims.LOOKUPS_PER_S  # this second's budget: the rest wait
        now[0] += 1.0
        assert not check.is_writer(10**10, KEY) and check.lookups_total == claims.LOOKUPS_PER_S + 1
    finally:
        check.close()
