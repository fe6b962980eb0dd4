"""A reader that loses a replica mid-read (the bookie stops answering: SIGSTOP) reads on from the
other replicas after the speculative read timeout, not after the read timeout.

The client's readTimeout and operationTimeout are set far above what the read takes with
speculative reads, so without them the read fails (operationTimeout) instead of finishing.
"""

import os
import signal

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies

PW = b"pw"
ENTRIES = 6000


@pytest.fixture(scope="module")
def written():
    with LocalBookies(3) as lb:
        with BookKeeper(lb.metadata_uri) as bk:
            lh = bk.create_ledger(3, 2, 2, password=PW)
            payloads = [b"entry-%d-" % i + bytes(i % 97) for i in range(ENTRIES)]
            lh.add_range_async(payloads).result(120)
            lh.close()
        yield lb, lh.ledger_id, payloads


def _stop(lb, i):
    os.killpg(lb.procs[i].pid, signal.SIGSTOP)


def _resume(lb, i):
    os.killpg(lb.procs[i].pid, signal.SIGCONT)


@pytest.mark.parametrize("stopped", [0, 2])
def test_a_reader_that_loses_a_replica_mid_read_gets_every_entry_from_the_others(written,
                                                                                  stopped):
    lb, ledger_id, payloads = written
    with BookKeeper(lb.metadata_uri, speculativeReadTimeout=200, readTimeout=120,
                    operationTimeout=60) as bk:
        rh = bk.open_ledger(ledger_id, password=PW, recovery=False)
        it = rh.read_entries(0, ENTRIES - 1)
        got = [next(it).data for _ in range(1000)]  # the next chunk is in flight meanwhile
        _stop(lb, stopped)
        try:
            got += [x.data for x in it]
            assert got == payloads
            # a read of the whole ledger as one operation, with the bookie still stopped
            assert [x.data for x in rh.read_entries_async(0, ENTRIES - 1).result(60)] == payloads
            # later reads start on the other replicas: the stopped bookie is a suspect
            assert lb.bookies[stopped] in bk._runner.suspect_bookies()
        finally:
            _resume(lb, stopped)


def test_speculative_reads_can_be_turned_off_and_a_bad_value_is_refused(written):
    from bookie.client import InvalidArgumentError
    lb, ledger_id, payloads = written
    with pytest.raises(InvalidArgumentError, match="speculativeReadTimeout"):
        BookKeeper(lb.metadata_uri, speculativeReadTimeout=-1)
    with BookKeeper(lb.metadata_uri, speculativeReadTimeout=0) as bk:
        rh = bk.open_ledger(ledger_id, password=PW, recovery=False)
        assert [x.data for x in rh.read_entries(0, ENTRIES - 1)] == payloads
