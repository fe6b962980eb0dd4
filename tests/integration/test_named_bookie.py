"""A bookie takes a ledger's normal adds and fences only while the ledger's metadata names it
(issue 30 item 6; core/adds.py invariant 7, workers/claims.py): a raw add or fence for a ledger
whose ensembles name other bookies is refused, a recovery add passes, and the ordinary client's
ensemble change onto that bookie (metadata first, then adds: the bookie reads it again before
refusing) and recovery still work."""

import os

from bookie.client import BookKeeper
from bookie.client.digest import master_key
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

PW = b"pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 30.0}


def test_a_bookie_the_metadata_does_not_name_refuses_then_takes_adds_once_named(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "e")) as ens, \
            BookKeeper(ens.metadata_uri, CONFIG) as bk:
        lh = bk.create_ledger(3, 3, 3, password=PW)  # Qa=3: a stopped bookie is replaced
        datas = [os.urandom(100) for _ in range(5)]
        for d in datas:
            lh.add_entry(d)
        ensemble = list(lh.metadata.last_ensemble)
        outsider = next(i for i, b in enumerate(ens.bookies) if b not in ensemble)
        key = master_key(PW)
        with RawBookieClient(ens.bookies[outsider], timeout_s=5) as c:
            entry = make_entry(lh.ledger_id, 5, b"mixed-up address")
            assert c.add(lh.ledger_id, [entry], key) == Status.NO_LEDGER
            assert c.add(lh.ledger_id, [entry], key) == Status.NO_LEDGER  # read again, refused again
            assert c.read_lac(lh.ledger_id, fence_key=key)[0] == Status.NO_LEDGER  # a fence
        other = bk.create_ledger(3, 3, 2, password=PW)
        other_ensemble = list(other.metadata.last_ensemble)
        if ens.bookies[outsider] not in other_ensemble:
            with RawBookieClient(ens.bookies[outsider], timeout_s=5) as c:  # a copy / recovery add
                copy = make_entry(other.ledger_id, 0, b"copy")
                assert c.add(other.ledger_id, [copy], key, recovery=True) == Status.OK
        other.close()

        # the writer's ensemble change names the outsider, then sends it adds: taken
        ens.stop(ens.bookies.index(ensemble[0]))
        for i in range(5):
            d = os.urandom(100)
            lh.add_entry(d)
            datas.append(d)
        assert ens.bookies[outsider] in lh.metadata.last_ensemble
        with BookKeeper(ens.metadata_uri, CONFIG) as bk2:  # recovery: fences the new ensemble
            rh = bk2.open_ledger(lh.ledger_id, password=PW)
            assert rh.last_add_confirmed == len(datas) - 1
            assert [e.data for e in rh.read_entries(0, len(datas) - 1)] == datas
