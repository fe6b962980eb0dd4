"""``bookie shell recover`` of a lost bookie does not wait for it (issue 32, item 6).

The soak's ``recover`` settled about one ledger every 9 s.  Profiled: all of it in the client's
recovery of *open* ledgers, which read from and re-added to the lost bookie and waited out a
timeout each time before replacing it.  The replicator now hands the recovery the bookies it
heals around (``RecoveryOp(lost=...)``): never asked, replaced at once.
"""

from __future__ import annotations

import subprocess
import sys
import time

import orjson

from bookie.client import BookKeeper
from bookie.testing import LocalBookies

LEDGERS = 4


def test_recover_of_a_lost_bookie_with_open_ledgers_does_not_wait_for_it(tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb, \
            BookKeeper(lb.metadata_uri, {"allowEmptyPassword": True}) as bk:
        victim = lb.bookies[0]
        handles = []
        while len(handles) < LEDGERS:
            h = bk.create_ledger(3, 2, 2)
            if victim not in h.metadata.last_ensemble:
                h.close()
                continue
            for i in range(20):
                h.add_entry(b"e%d" % i)
            handles.append(h)  # left open: its writer is alive, recover fences it
        lb.kill(0)
        start = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "bookie", "shell", "recover", victim, "--json",
                            "--metadata", lb.metadata_uri, "--timeout-s", "30"],
                           capture_output=True, text=True, timeout=300)
        took = time.monotonic() - start
        assert r.returncode == 0, r.stderr[-2000:]
        doc = orjson.loads(r.stdout)
        assert len(doc["healed"]) == LEDGERS and not doc["failed"], doc
        # before: a read and an add timeout per ledger (about 4 s each here)
        assert doc["copy_seconds"] < 2.0 * LEDGERS / 2, (doc["copy_seconds"], took)
        for h in handles:
            meta = bk.ledger_metadata(h.ledger_id)
            assert all(victim not in ens for _, ens in meta.fragments), meta.fragments
            rh = bk.open_ledger(h.ledger_id, recovery=False)
            assert [e.data for e in rh.read_entries(0, rh.last_add_confirmed)] == \
                [b"e%d" % i for i in range(rh.last_add_confirmed + 1)]
