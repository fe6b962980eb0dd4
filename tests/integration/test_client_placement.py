"""Rack-aware placement (issue 24.1, the client's part) on real bookies: bookies published with
their bookieLocation, a rackaware client spreads every write quorum over the racks, keeps the
spread through an ensemble change, and with enforcement refuses a ledger naming the racks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bookie.client import BookKeeper, NotEnoughBookiesError
from bookie.testing import LocalBookies

PW = b"pw"
RACKAWARE = {"ensemblePlacementPolicy": "rackaware", "addEntryTimeout": 2.0,
             "readTimeout": 2.0}


@pytest.fixture(scope="module")
def racks():
    """Two bookies in rack /dc1/a and two in /dc1/b, registered in one metadata store."""
    with LocalBookies(2, conf={"bookieLocation": "/dc1/a"}) as a, \
            LocalBookies(2, metadata_uri=a.metadata_uri,
                         conf={"bookieLocation": "/dc1/b"}) as b:
        yield a, b, {**{x: "/dc1/a" for x in a.bookies}, **{x: "/dc1/b" for x in b.bookies}}


def test_bookies_publish_their_location(racks):
    a, b, where = racks
    with BookKeeper(a.metadata_uri) as bk:
        for bookie, location in where.items():
            assert bk.metadata_store.bookie_info(bookie)["location"] == location


def test_every_write_quorum_spans_both_racks(racks):
    a, _, where = racks
    with BookKeeper(a.metadata_uri, RACKAWARE) as bk:
        for _ in range(12):
            lh = bk.create_ledger(2, 2, 2, password=PW)
            assert {where[x] for x in lh.metadata.last_ensemble} == {"/dc1/a", "/dc1/b"}
            lh.close()
        lh = bk.create_ledger(4, 2, 2, password=PW)
        ens = lh.metadata.last_ensemble
        assert all(where[ens[p]] != where[ens[(p + 1) % 4]] for p in range(4))
        lh.close()


def test_enforcement_refuses_naming_the_racks(racks):
    a, _, _ = racks
    with BookKeeper(a.metadata_uri, RACKAWARE, minNumRacksPerWriteQuorum=3,
                    enforceMinNumRacksPerWriteQuorum=True) as bk:
        with pytest.raises(NotEnoughBookiesError, match=r"spans only 2 of the 3 racks.*"
                                                        r"/dc1/a \(2\), /dc1/b \(2\)"):
            bk.create_ledger(3, 3, 2, password=PW)
        lh = bk.create_ledger(2, 2, 2, password=PW)  # 2 racks suffice for a quorum of 2
        lh.close()


def test_an_ensemble_change_keeps_the_spread(racks):
    a, b, where = racks
    with BookKeeper(a.metadata_uri, RACKAWARE) as bk:
        lh = bk.create_ledger(2, 2, 2, password=PW)
        assert lh.add_entry(b"before") == 0
        lost = next(x for x in lh.metadata.last_ensemble if where[x] == "/dc1/a")
        a.kill(a.bookies.index(lost))
        try:
            assert lh.add_entry(b"after") == 1  # waits for the change (Qa = Qw)
            frags = lh.metadata.fragments
            assert len(frags) == 2 and lost not in frags[-1][1]
            assert {where[x] for x in frags[-1][1]} == {"/dc1/a", "/dc1/b"}  # the other a
        finally:
            a.start(a.bookies.index(lost))
        lh.close()


def _shell(*args):
    return subprocess.run([sys.executable, "-m", "bookie", "shell", *args], capture_output=True,
                          text=True, timeout=60)


def test_setrack_sets_locations_that_placement_follows_over_bookie_location(racks):
    a, b, where = racks
    # move one bookie of each rack to rack /dc1/c: every rack then has one writable bookie
    # besides, and ensembles of 3 with a write quorum of 3 span three racks
    moved = [a.bookies[0], b.bookies[0]]
    for bookie in moved:
        r = _shell("setrack", bookie, "/dc1/c", "--metadata", a.metadata_uri)
        assert r.returncode == 0 and f"setrack: {bookie}: location /dc1/c" in r.stdout, r.stderr
    try:
        now = {**where, **{x: "/dc1/c" for x in moved}}
        with BookKeeper(a.metadata_uri, RACKAWARE, minNumRacksPerWriteQuorum=3,
                        enforceMinNumRacksPerWriteQuorum=True) as bk:
            lh = bk.create_ledger(3, 3, 2, password=PW)
            assert {now[x] for x in lh.metadata.last_ensemble} == {"/dc1/a", "/dc1/b", "/dc1/c"}
            lh.close()
    finally:
        for bookie in moved:
            assert _shell("setrack", bookie, "--delete", "--metadata", a.metadata_uri)\
                .returncode == 0
    r = _shell("setrack", moved[0], "dc1/c", "--metadata", a.metadata_uri)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "/REGION/RACK" in r.stderr


def test_a_recovery_replacement_keeps_the_enforced_spread_or_fails_naming_it(racks):
    """Issue 32 item 2: a recovery's replacement honours enforceMinNumRacksPerWriteQuorum as
    the writer's ensemble change does.  Rack b gone, the only spare (in rack a) would put a write
    quorum in one rack: the recovery fails naming the policy rather than close the ledger with
    a fragment the writer itself would refuse."""
    a, b, where = racks
    enforced = dict(RACKAWARE, minNumRacksPerWriteQuorum=2, enforceMinNumRacksPerWriteQuorum=True,
                    explicitLacInterval=0)
    with BookKeeper(a.metadata_uri, enforced) as wbk:
        lh = wbk.create_ledger(2, 2, 2, password=PW)
        for i in range(3):
            lh.add_entry(b"e%d" % i)
        ledger_id = lh.ledger_id
        assert {where[x] for x in lh.metadata.last_ensemble} == {"/dc1/a", "/dc1/b"}
        for i in range(2):
            b.stop(i)  # rack b gone: the only spare left is the other bookie of rack a
        try:
            with BookKeeper(a.metadata_uri, enforced) as rbk:
                with pytest.raises(Exception, match=r"minNumRacksPerWriteQuorum"):
                    rbk.open_ledger(ledger_id, password=PW, recovery=True)
                meta = rbk.metadata_store.read_ledger(ledger_id)[0]
                for _, ensemble in meta.fragments:  # no fragment within one rack was written
                    assert len({where[x] for x in ensemble}) == 2, meta.fragments
        finally:
            for i in range(2):
                b.start(i)
