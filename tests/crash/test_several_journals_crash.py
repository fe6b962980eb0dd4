"""Several journals (journalDirectories): entries written across both journals survive SIGKILL
of the whole bookie byte for byte, and the restart replays each journal from its own mark.

Ledger 2 goes to journal 0 and ledger 3 to journal 1 (ledger_id % 2: storage/journal_set.py).
"""

import glob
import os
import re
import time

import pytest

from bookie.storage.journal import read_lastmark
from bookie.testing import LocalBookies
from bookie_load import AddLoad, verify_acked


def _journal_conf(base_dir: str, **extra) -> dict:
    bookie = os.path.join(base_dir, "bookie-0")
    return {"metadataServiceUri": "", "workerRestartLimit": 1000,
            "journalDirectories": f"{bookie}/journal,{bookie}/journal-b", **extra}


def _loads_until(ens, ledger_ids, at_least: int):
    loads = [AddLoad(ens.bookies[0], lid, batch=20, window=8) for lid in ledger_ids]
    for load in loads:
        load.start()
    deadline = time.monotonic() + 30
    while min(len(x.acked) for x in loads) < at_least and time.monotonic() < deadline:
        time.sleep(0.02)
    return loads


def _replayed(log: str, journal: int) -> list[int]:
    """Records each start's replay of ``journal`` found (``replay done journal=J ... records=N``)."""
    return [int(n) for n in re.findall(rf"replay done journal={journal} \S+ \S+ records=(\d+)", log)]


def test_sigkill_of_the_whole_bookie_loses_no_entry_of_either_journal(tmp_path):
    # No checkpoint while the load runs (flushInterval of 10 minutes): after the kill every
    # acknowledged record is found again by the replay of its own journal, both journals.
    conf = _journal_conf(str(tmp_path), flushInterval=600_000)
    with LocalBookies(1, base_dir=str(tmp_path), conf=conf) as ens:
        loads = _loads_until(ens, [2, 3], at_least=200)
        ens.kill(0)  # supervisor and every worker at once
        for load in loads:
            load.stop()
        for load in loads:
            assert len(load.acked) >= 200, f"ledger {load.ledger_id} made no progress"
        journal_dirs = ens.journal_dirs(0)
        for d in journal_dirs:  # both journals were written to
            files = glob.glob(os.path.join(d, "current", "*.txn"))
            assert files and max(os.path.getsize(f) for f in files) > 0, d
        ens.start(0)
        log = ens.log(0)
        assert _replayed(log, 0)[-1] > 0 and _replayed(log, 1)[-1] > 0, log[-3000:]
        for load in loads:
            verify_acked(ens.bookies[0], load.ledger_id, load.acked)
        # the restart's checkpoint persisted one mark per journal in the ledger directory
        ledgers = os.path.join(ens.bookie_dir(0), "ledgers", "current")
        assert read_lastmark(ledgers, 0) > 0 and read_lastmark(ledgers, 1) > 0
        # and a second kill and restart (replay from those marks) still has everything
        ens.kill(0)
        ens.start(0)
        for load in loads:
            verify_acked(ens.bookies[0], load.ledger_id, load.acked)


@pytest.mark.crash  # opt-in (-m crash): about half a minute on a loaded machine
def test_sigkill_of_the_second_journal_worker_is_restarted_and_loses_nothing(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path), conf=_journal_conf(str(tmp_path))) as ens:
        loads = _loads_until(ens, [4, 5], at_least=200)
        pid = ens.kill_worker(0, "journal-1")
        ens.wait_worker_restarted(0, "journal-1", pid)
        at_kill = {x.ledger_id: len(x.acked) for x in loads}
        deadline = time.monotonic() + 30
        while (any(len(x.acked) <= at_kill[x.ledger_id] + 100 for x in loads)
               and time.monotonic() < deadline):
            time.sleep(0.02)
        for load in loads:
            load.stop()
        for load in loads:
            assert len(load.acked) > at_kill[load.ledger_id], f"ledger {load.ledger_id} stalled"
            verify_acked(ens.bookies[0], load.ledger_id, load.acked)
        assert "worker died; restarting it role=journal-1" in ens.log(0)
