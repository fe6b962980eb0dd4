"""A recovery retried after one that failed half way keeps every acknowledged entry (real
bookies, embedded metadata store).

E=3, Qw=2, Qa=2 on four bookies X, Y, Z (the ensemble) and W (the spare).  The writer's six
entries are acknowledged (the last carries LAC 4, so recovery reads entry 5 forward); the
writer is gone.  Recovery A: Z stops answering (SIGSTOP), so A's re-add of entry 5 fails and A
puts W in Z's place - but W takes no adds either (its add worker stopped), so A fails.
Recovery B, later, must read entry 5 from X and Z, which the writer wrote it to, and never
count W's "no such entry" as proof that it does not exist.  Then two recoveries at once, one
of them changing the ensemble, agree on the last entry.
"""

from __future__ import annotations

import os
import signal

import pytest

from bookie.client import BookKeeper, LedgerRecoveryError
from bookie.metadata import LedgerState
from bookie.testing import LocalBookies
from recovery_helpers import recover_concurrently

PW = b"pw"
N_ENTRIES = 6  # entry 5 is acknowledged; the bookies' LAC is 4
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}
# the recoveries that must succeed: a busy machine must not time out the bookies that answer
PATIENT = {"addEntryTimeout": 5.0, "readTimeout": 5.0, "operationTimeout": 90.0}


@pytest.fixture(scope="module")
def ensemble():
    # A registration outlives its bookie for 30 s here, as a ZooKeeper session outlives a
    # bookie that hangs: recovery may pick a bookie that is registered but not serving.
    with LocalBookies(4, conf={"registrationLeaseMs": 30000}) as ens:
        yield ens


def pause(ens: LocalBookies, i: int) -> None:
    """SIGSTOP bookie i (all its processes): it stops answering and keeps its connections."""
    os.killpg(ens.procs[i].pid, signal.SIGSTOP)


def resume(ens: LocalBookies, i: int) -> None:
    os.killpg(ens.procs[i].pid, signal.SIGCONT)


def acknowledged_then_writer_gone(ens: LocalBookies):
    """A ledger with N_ENTRIES acknowledged one at a time; the writer's client then closes
    without closing the ledger.  Returns (ledger id, {"X", "Y", "Z", "W"} -> bookie index),
    Z being the ensemble's position 2 (entry 5 is on Z and X)."""
    with BookKeeper(ens.metadata_uri, dict(CONFIG, explicitLacInterval=0)) as bk:
        lh = bk.create_ledger(3, 2, 2, password=PW)
        for i in range(N_ENTRIES):
            assert lh.add_entry(b"e%d" % i) == i
        x, y, z = lh.metadata.last_ensemble
    w = next(b for b in ens.bookies if b not in (x, y, z))
    return lh.ledger_id, {name: ens.bookies.index(b) for name, b in zip("XYZW", (x, y, z, w))}


def entries(bk: BookKeeper, ledger_id: int) -> list[bytes]:
    rh = bk.open_ledger(ledger_id, password=PW)
    return [e.data for e in rh.read_entries(0, rh.last_add_confirmed)]


def test_a_retried_recovery_reads_the_writers_bookies_not_a_failed_recoverys_replacement(
        ensemble):
    ens = ensemble
    ledger_id, at = acknowledged_then_writer_gone(ens)
    pause(ens, at["Z"])
    # W stays registered and answers reads, but takes no adds: recovery A picks it, fails on it
    add_worker = ens.kill_worker(at["W"], "add", signal.SIGSTOP)
    try:
        with BookKeeper(ens.metadata_uri, CONFIG) as bk:
            with pytest.raises(LedgerRecoveryError):
                bk.open_ledger(ledger_id, password=PW)  # recovery A
            meta, _ = bk.metadata_store.read_ledger(ledger_id)
            assert meta.state == LedgerState.IN_RECOVERY
    finally:
        resume(ens, at["Z"])
        # the adds W's add worker never took in go with it; its successor holds nothing of
        # this ledger
        os.kill(add_worker, signal.SIGKILL)
        ens.wait_worker_restarted(at["W"], "add", add_worker)
    pause(ens, at["Y"])  # B's fence then has to hear from every other bookie
    try:
        with BookKeeper(ens.metadata_uri, PATIENT) as bk:
            rh = bk.open_ledger(ledger_id, password=PW)  # recovery B
            assert rh.last_add_confirmed == N_ENTRIES - 1, "an acknowledged entry was lost"
            assert rh.is_closed
            assert [e.data for e in rh.read_entries(0, N_ENTRIES - 1)] == \
                [b"e%d" % i for i in range(N_ENTRIES)]
    finally:
        resume(ens, at["Y"])
    with BookKeeper(ens.metadata_uri, CONFIG) as bk:
        assert entries(bk, ledger_id) == [b"e%d" % i for i in range(N_ENTRIES)]


def test_two_concurrent_recoveries_one_changing_the_ensemble_agree_and_keep_every_entry(
        ensemble):
    ens = ensemble
    ledger_id, at = acknowledged_then_writer_gone(ens)
    pause(ens, at["Z"])  # a re-add of entry 5 fails: a recovery replaces Z with W
    try:
        (last_a, info_a, data_a), (last_b, info_b, data_b) = recover_concurrently(
            ens.metadata_uri, ledger_id, PW, PATIENT, timeout_s=120)
    finally:
        resume(ens, at["Z"])
    assert last_a == last_b == N_ENTRIES - 1
    assert data_a == data_b == [b"e%d" % i for i in range(N_ENTRIES)]
    assert info_a.state == info_b.state == LedgerState.CLOSED
    assert ens.bookies[at["Z"]] not in info_a.last_ensemble  # the tail moved off Z
    assert ens.bookies[at["W"]] in info_a.last_ensemble
