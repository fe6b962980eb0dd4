"""A dead bookie costs a reader one timeout, not one per read: later reads start elsewhere."""

import time

from bookie.client import BookKeeper
from bookie.testing import LocalBookies


def test_reads_after_a_bookie_died_do_not_wait_on_it_again():
    # speculativeReadTimeout=0: the read timeout alone marks the dead bookie here (speculative
    # reads, which do it sooner, are test_client_read_speculative's)
    with LocalBookies(3) as ens, BookKeeper(ens.metadata_uri, readTimeout=1.0,
                                            addEntryTimeout=2.0, speculativeReadTimeout=0) as bk:
        lh = bk.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2, password=b"pw")
        payloads = [b"entry %d" % i for i in range(600)]
        lh.add_range_async(payloads).result(30)
        lh.close()
        ens.kill(0)
        rh = bk.open_ledger(lh.ledger_id, password=b"pw", recovery=False)
        t0 = time.monotonic()
        assert [e.data for e in rh.read_entries(0, 599)] == payloads  # meets the dead bookie
        first = time.monotonic() - t0
        t0 = time.monotonic()
        for _ in range(3):
            assert [e.data for e in rh.read_entries(0, 599)] == payloads
        later = (time.monotonic() - t0) / 3
        # at most one timeout for the first read (none when the client already saw the dead
        # bookie's connection fail the key's proof: then it never asks it at all)
        assert first < 1.0 + 3.0, f"the first read waited more than one timeout ({first:.2f} s)"
        assert later < 0.9, f"a later read still waited on the dead bookie ({later:.2f} s)"
