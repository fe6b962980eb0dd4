"""Crash tests: SIGKILL under a sustained add load; every acknowledged entry survives.

The default run does one round of each kind; ``-m crash`` runs 20 of each.
"""

import random
import time

import pytest

from bookie.testing import LocalBookies
from bookie_load import AddLoad, verify_acked

QUICK_ROUNDS = 1  # each kind once by default (batch and window drawn from the seed); -m crash: 20
FULL_ROUNDS = 20


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"metadataServiceUri": "", "flushInterval": 30,
                               "journalMaxSizeMB": 1, "logSizeLimit": 2 * 1024 * 1024,
                               "workerRestartLimit": 1000}) as e:
        yield e


_ledgers = iter(range(1, 10**6))


def _load_then(ens, action, seed):
    rnd = random.Random(seed)
    load = AddLoad(ens.bookies[0], next(_ledgers), batch=rnd.choice([1, 20, 100]),
                   window=rnd.choice([1, 4, 16]))
    load.start()
    deadline = time.monotonic() + 10
    while len(load.acked) < 200 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rnd.uniform(0.0, 0.4))
    action()
    return load


def _round_whole_bookie(ens, seed):
    load = _load_then(ens, lambda: ens.kill(0), seed)
    load.stop()
    ens.start(0)
    assert load.acked, "the load made no progress before the kill"
    verify_acked(ens.bookies[0], load.ledger_id, load.acked)


def _round_worker(ens, role, seed):
    holder = {}

    def kill():
        holder["pid"] = ens.kill_worker(0, role)

    load = _load_then(ens, kill, seed)
    ens.wait_worker_restarted(0, role, holder["pid"])
    acked_at_kill = len(load.acked)
    deadline = time.monotonic() + 15
    while len(load.acked) <= acked_at_kill + 100 and time.monotonic() < deadline:
        time.sleep(0.02)
    load.stop()
    assert len(load.acked) > acked_at_kill, f"adds did not resume after the {role} worker restart"
    verify_acked(ens.bookies[0], load.ledger_id, load.acked)
    assert f"worker died; restarting it role={role}" in ens.log(0)


@pytest.mark.parametrize("seed", range(QUICK_ROUNDS))
def test_sigkill_whole_bookie_loses_no_acknowledged_entry(ens, seed):
    _round_whole_bookie(ens, seed)


@pytest.mark.parametrize("role", ["journal", "add"])
@pytest.mark.parametrize("seed", range(QUICK_ROUNDS))
def test_sigkill_one_worker_is_restarted_and_loses_nothing(ens, role, seed):
    _round_worker(ens, role, seed)


def test_everything_acknowledged_before_all_kills_is_still_there(ens):
    """After the rounds above (and their restarts), older ledgers are intact too."""
    load = _load_then(ens, lambda: None, 99)
    load.stop()
    ens.stop(0)
    ens.start(0)
    verify_acked(ens.bookies[0], load.ledger_id, load.acked)


@pytest.mark.crash
@pytest.mark.parametrize("seed", range(100, 100 + FULL_ROUNDS))
def test_crash_rounds_whole_bookie(ens, seed):
    _round_whole_bookie(ens, seed)


@pytest.mark.crash
@pytest.mark.parametrize("role", ["journal", "add"])
@pytest.mark.parametrize("seed", range(200, 200 + FULL_ROUNDS))
def test_crash_rounds_single_worker(ens, role, seed):
    _round_worker(ens, role, seed)
