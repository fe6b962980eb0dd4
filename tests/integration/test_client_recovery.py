"""Recovery against real bookies when a bookie of the last ensemble is dead: the writer is
SIGKILLed mid-write, then one bookie of its ensemble; recovery from other clients replaces
that bookie (an ensemble change on the IN_RECOVERY metadata), closes the ledger, and every
acknowledged entry reads back - the same last entry for every reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from recovery_helpers import recover_concurrently
from test_client_ledgers import wait_until

PW = b"pw"
CONFIG = {"addEntryTimeout": 1.0, "readTimeout": 1.0, "operationTimeout": 60.0}

WRITER = textwrap.dedent("""
    import itertools, sys
    from bookie.client import BookKeeper
    e, w, a = map(int, sys.argv[2].split(","))
    bk = BookKeeper(sys.argv[1], addEntryTimeout=2, throttle=300)
    lh = bk.create_ledger(e, w, a, password=b"pw")
    print("ledger", lh.ledger_id, flush=True)

    def acked(f):
        print("acked", f.result(), flush=True)  # futures complete in entry order
    for i in itertools.count():  # until killed; the throttle keeps 300 adds in flight
        lh.add_entry_async(b"%d" % i).add_done_callback(acked)
""")


@pytest.fixture(scope="module")
def ensemble():
    with LocalBookies(4) as ens:
        yield ens


def write_then_die(uri, shape, at_least):
    """Run a writer in a subprocess, SIGKILL it once ``at_least`` adds were acknowledged;
    returns (ledger id, highest acknowledged entry id)."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, uri, ",".join(map(str, shape))],
                            stdout=subprocess.PIPE, text=True)
    last_acked = -1
    try:
        first = proc.stdout.readline().split()
        assert first[0] == "ledger", first
        ledger_id = int(first[1])
        deadline = time.monotonic() + 60
        while last_acked < at_least and time.monotonic() < deadline:
            parts = proc.stdout.readline().split()
            if parts and parts[0] == "acked":
                last_acked = int(parts[1])
        os.kill(proc.pid, signal.SIGKILL)
        for line in proc.stdout:  # printed in its last moment: acknowledged as well
            parts = line.split()
            if line.endswith("\n") and len(parts) == 2 and parts[0] == "acked":
                last_acked = int(parts[1])
    finally:
        proc.kill()
        proc.wait(10)
    assert last_acked >= at_least
    return ledger_id, last_acked


@pytest.mark.parametrize("shape", [(3, 2, 2), (2, 2, 2)], ids=["E3-Qw2-Qa2", "E2-Qw2-Qa2"])
def test_recovery_replaces_a_dead_bookie_and_keeps_every_acknowledged_entry(ensemble, shape):
    ens = ensemble
    ledger_id, last_acked = write_then_die(ens.metadata_uri, shape, 1000)
    with BookKeeper(ens.metadata_uri, CONFIG) as bk:
        meta, _ = bk.metadata_store.read_ledger(ledger_id)
        last_ensemble = list(meta.fragments[-1][1])
        victim = ens.bookies.index(last_ensemble[-1])
        ens.kill(victim)
        try:
            (last_a, info_a, data_a), (last_b, info_b, data_b) = recover_concurrently(
                ens.metadata_uri, ledger_id, PW, CONFIG, timeout_s=90)
            assert last_a == last_b >= last_acked  # every reader agrees; nothing acked lost
            assert data_a == data_b == [b"%d" % i for i in range(last_a + 1)]
            assert info_a.state == "CLOSED"
            # the dead bookie no longer holds the tail: recovery replaced it
            assert ens.bookies[victim] not in info_a.last_ensemble
            assert len(info_a.fragments) > len(meta.fragments) or \
                info_a.last_ensemble != tuple(last_ensemble)
            # and a later reader, with the bookie still dead, reads the same ledger
            rh = bk.open_ledger(ledger_id, password=PW)
            assert rh.last_add_confirmed == last_a
            assert [e.data for e in rh.read_entries(0, last_a)] == data_a
        finally:
            ens.start(victim)
            wait_until(lambda: ens.bookies[victim] in bk.metadata_store.list_bookies(),
                       what="the killed bookie to register again")
