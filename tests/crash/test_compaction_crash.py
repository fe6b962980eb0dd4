"""A bookie SIGKILLed during compaction loses nothing and leaks nothing (opt-in: -m crash).

Chosen points: the GC worker kills its whole bookie (BOOKIE_COMPACTION_CRASH_AT) right after
each durable step of bookie.storage.compaction.  Random points: the test kills the bookie at a
random moment of a slow (rate-limited) compaction, several rounds in a row.  After each crash the
bookie restarts, the kept ledger reads back byte for byte, a new compaction finishes the job,
and every entry log on disk is named by the index (no leak).  The same steps are checked
in-process, in the default run, by tests/unit/test_compaction_steps.py.
"""

import glob
import os
import random
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from test_compaction import (CONF, KEY, check_ledger, ledger_dir, log_bytes, log_since,  # noqa: E402
                             make_entry, payload, triggergc, wait, write_interleaved)

from bookie.metadata import LedgerMetadata, open_metadata  # noqa: E402
from bookie.testing import LocalBookies  # noqa: E402
from bookie.testing.rawclient import RawBookieClient  # noqa: E402
from bookie.wire import Status  # noqa: E402
from bookie.storage.index import Index, open_index
from bookie.storage.entrylog import list_logs  # noqa: E402

STEPS = ("intent", "created", "copying", "synced", "repointing", "repointed", "deleted")


def _named_logs(ens) -> set[int]:
    """Entry logs the (stopped) bookie's index names: maps, current logs, entry locations."""
    env = open_index(ledger_dir(ens), 256 << 20)
    try:
        index = Index(env)
        with env.begin() as txn:
            named = set(index.log_maps(txn)) | index.current_logs(txn)
            named |= {loc[0] for _, _, loc in index.iter_locations(txn)}
            state = index.compaction_state(txn)
    finally:
        env.close()
    assert state is None, state
    return named


def _setup(ens, batches=40):
    with open_metadata(ens.metadata_uri) as store:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        doomed, _ = store.create_ledger(meta)
        kept, _ = store.create_ledger(meta)
        with RawBookieClient(ens.bookies[0]) as c:
            n = write_interleaved(c, [doomed, kept], batches=batches)
        store.remove_ledger(doomed)
    return doomed, kept, n


def _after_crash(ens, doomed, kept, n, before):
    ens.kill(0)  # whatever is left of it
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        check_ledger(c, kept, n)
        # the crash may come before the pass dropped the ledger; a pass drops it now (or finds
        # nothing to do: the killed pass had finished, or the restarted bookie's own GC did it)
        start = len(ens.log(0))
        assert triggergc(ens, 0, "--major").returncode == 0
        assert wait(lambda: re.search(r"compaction done|compaction: nothing to do",
                                      log_since(ens, 0, start))), log_since(ens, 0, start)[-3000:]
        assert c.read(doomed, 0)[0] == Status.NO_LEDGER
        check_ledger(c, kept, n)
        assert c.add(kept, [make_entry(kept, n, payload(kept, n))], KEY) == Status.OK
    assert log_bytes(ens) < before * 0.7
    ens.stop(0)
    on_disk = set(list_logs(ledger_dir(ens)))
    assert on_disk == _named_logs(ens), "an entry log leaked, or one the index names is gone"
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        check_ledger(c, kept, n + 1)


@pytest.mark.crash
@pytest.mark.parametrize("step", STEPS)
def test_bookie_killed_at_each_compaction_step_loses_and_leaks_nothing(monkeypatch, step):
    monkeypatch.setenv("BOOKIE_COMPACTION_CRASH_AT", f"{step}:2")  # during the second log
    with LocalBookies(1, conf=CONF) as ens:
        monkeypatch.delenv("BOOKIE_COMPACTION_CRASH_AT")  # only the first start crashes
        doomed, kept, n = _setup(ens)
        before = log_bytes(ens)
        assert triggergc(ens, 0, "--major").returncode == 0
        assert wait(lambda: not ens.running(0), 120), ens.log(0)[-3000:]
        _after_crash(ens, doomed, kept, n, before)
        assert "compaction recovered" in ens.log(0)


@pytest.mark.crash
def test_bookie_killed_at_random_moments_of_a_slow_compaction():
    seed = int(os.environ.get("COMPACTION_CRASH_SEED", time.time()))
    rng = random.Random(seed)
    conf = dict(CONF, compactionRateByEntries=100)  # 60 entries a log: a pass takes seconds
    with LocalBookies(1, conf=conf) as ens, open_metadata(ens.metadata_uri) as store:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        kept, _ = store.create_ledger(meta)
        n, gone = 0, []
        for _ in range(4):  # each round: fresh garbage, a compaction killed at a random moment
            doomed, _ = store.create_ledger(meta)
            with RawBookieClient(ens.bookies[0]) as c:
                for b in range(30):
                    for lid, first in ((doomed, b * 10), (kept, n)):
                        entries = [make_entry(lid, first + i, payload(lid, first + i)) for i in range(10)]
                        assert c.add(lid, entries, KEY) == Status.OK
                    n += 10
            store.remove_ledger(doomed)
            gone.append(doomed)
            start = len(ens.log(0))
            assert triggergc(ens, 0, "--major").returncode == 0
            assert wait(lambda: "compaction started" in ens.log(0)[start:]), ens.log(0)[-3000:]
            time.sleep(rng.uniform(0.0, 3.0))
            ens.kill(0)
            ens.start(0)
            with RawBookieClient(ens.bookies[0]) as c:
                check_ledger(c, kept, n)
        before = log_bytes(ens)
        _after_crash(ens, gone[-1], kept, n, before * 2)  # at least half of it was garbage
        with RawBookieClient(ens.bookies[0]) as c:
            assert all(c.read(lid, 0)[0] == Status.NO_LEDGER for lid in gone), seed
