"""Issue 15: a ledger id cannot be squatted through the GC.

Someone sends an add (or a fence) for a ledger id the metadata store has not handed out yet; a
GC pass runs; later a real ledger gets that id.  Its writer must be able to add and read back on
this bookie: the GC purges what it held under a never-created id, it does not tombstone it.
"""

import glob
import os
import subprocess
import sys

import pytest

from bookie.client import BookKeeper
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie.storage.inspect import open_readonly
from bookie.storage.index import Index
from waiting import poll

CONF = {"gcWaitTime": 600_000, "flushInterval": 50, "entryLogFilePreallocationEnabled": "false",
        "minorCompactionInterval": 0, "majorCompactionInterval": 0}
SQUATTER_KEY = b"not-the-writer"
PASSWORD = b"the-real-writer"


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf=CONF) as e:
        yield e


def _wait(pred, timeout_s=10.0):
    return poll(pred, timeout_s)


def _gc_passes(ens) -> int:
    return ens.log(0).count("requested=true")


def _triggergc(ens) -> None:
    """``bookie shell triggergc`` as an operator runs it; returns once the pass is logged."""
    before = _gc_passes(ens)
    o = ens.overrides(0)
    cmd = [sys.executable, "-m", "bookie", "shell", "triggergc",
           "--set", f"journalDirectory={o['journalDirectory']}",
           "--set", f"ledgerDirectories={o['ledgerDirectories']}",
           "--set", f"metadataServiceUri={o['metadataServiceUri']}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    assert _wait(lambda: _gc_passes(ens) > before), ens.log(0)[-3000:]


def _write_and_read_back(bk, lh, n=5) -> None:
    for i in range(n):
        lh.add_entry(b"real-%d-%d" % (lh.ledger_id, i), timeout_s=5)
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, digest="crc32c", password=PASSWORD)
    got = [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]
    rh.close()
    assert got == [b"real-%d-%d" % (lh.ledger_id, i) for i in range(n)]


def test_an_id_squatted_ahead_of_its_creation_serves_the_real_ledger_after_gc(ens):
    def create(bk):
        return bk.create_ledger(ensemble_size=1, write_quorum=1, ack_quorum=1, digest="crc32c",
                                password=PASSWORD)

    with open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        kept = create(bk)  # a real ledger the GC must leave alone (and a non-empty listing)
        kept_id = kept.ledger_id
        _write_and_read_back(bk, kept)
        added = store.ledger_id_high_water() + 1000  # not handed out yet
        fenced = added + 1
        assert raw.add(added, [make_entry(added, 0, b"squatted")], SQUATTER_KEY) == Status.OK
        assert raw.fence(fenced, SQUATTER_KEY) == Status.OK
        assert raw.read(added, 0)[0] == Status.OK

        _triggergc(ens)
        assert raw.read(added, 0)[0] == Status.NO_LEDGER  # the squatter's entry is gone

        filler = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        while store.ledger_id_high_water() < added - 1:  # the store hands out ids in order
            store.create_ledger(filler)
        real = [create(bk), create(bk)]
        assert [lh.ledger_id for lh in real] == [added, fenced]
        for lh in real:
            _write_and_read_back(bk, lh)  # without the fix: UNAUTHORIZED or NO_LEDGER, for good
        assert "purged_ledgers=2" in ens.log(0)  # and never a tombstone for either

        _triggergc(ens)  # both are in the store now: kept, and readable
        for lid in (kept_id, added, fenced):
            rh = bk.open_ledger(lid, digest="crc32c", password=PASSWORD)
            assert [e.data for e in rh.read_entries(0, 0)] == [b"real-%d-0" % lid]
            rh.close()


def _purges_taken_in(ens) -> dict:
    """The add worker's record of the purges it took in (index table ``purged_at``)."""
    path = glob.glob(os.path.join(ens.bookie_dir(0), "**", "index", "data.mdb"), recursive=True)[0]
    env = open_readonly(os.path.dirname(path), 256 << 20)
    try:
        index = Index(env)
        with env.begin() as txn:
            return index.purges_taken_in(txn)
    finally:
        env.close()


def test_a_crash_after_the_purge_does_not_bring_the_squatter_back_through_replay():
    # No checkpoint after start-up (flushInterval 10 min): the squatter's add is still in the
    # journal past LastLogMark when the bookie is SIGKILLed after the purge, and is replayed.
    with LocalBookies(1, conf={**CONF, "flushInterval": 600_000}) as ens, \
            open_metadata(ens.metadata_uri) as store, BookKeeper(ens.metadata_uri) as bk, \
            RawBookieClient(ens.bookies[0]) as raw:
        kept = bk.create_ledger(ensemble_size=1, write_quorum=1, ack_quorum=1, digest="crc32c",
                                password=PASSWORD)
        kept.add_entry(b"kept", timeout_s=5)
        squatted = store.ledger_id_high_water() + 10
        assert raw.add(squatted, [make_entry(squatted, 0, b"squatted")], SQUATTER_KEY) == Status.OK
        _triggergc(ens)
        assert _wait(lambda: squatted in _purges_taken_in(ens))
        raw.close()
        ens.kill(0)
        ens.start(0)

        filler = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        while store.ledger_id_high_water() < squatted - 1:
            store.create_ledger(filler)
        lh = bk.create_ledger(ensemble_size=1, write_quorum=1, ack_quorum=1, digest="crc32c",
                              password=PASSWORD)
        assert lh.ledger_id == squatted
        _write_and_read_back(bk, lh)  # without the replay rule: UNAUTHORIZED (the squatter's key)
