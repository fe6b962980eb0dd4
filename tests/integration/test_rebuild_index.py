"""A real bookie written through the replication client loses its index: the start is refused
naming the fix, ``bookie shell rebuild-index`` rebuilds it from the entry logs and the journal,
and then every entry reads back byte for byte and the fence still refuses the old writer.
(Restarts after a rebuild, and more kinds of damage over the raw wire protocol:
tests/crash/test_index_rebuild_rounds.py.)"""

import os
import random
import shutil
import subprocess
import sys

import pytest

from bookie.client import BookKeeper
from bookie.client.errors import LedgerFencedError
from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError

PASSWORD = b"secret"


def rebuild(ens):
    cmd = [sys.executable, "-m", "bookie", "shell", "rebuild-index"]
    for k, v in ens.overrides(0).items():
        cmd += ["--set", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def read_all(ens, ledger_id, last):
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.open_ledger(ledger_id, digest="crc32c", password=PASSWORD)
        assert lh.last_add_confirmed == last
        return [e.data for e in lh.read_entries(0, last)]


def test_rebuilt_index_serves_every_entry_and_the_fence_still_refuses_the_old_writer(tmp_path):
    rng = random.Random(11)
    conf = {"flushInterval": 50, "logSizeLimit": 65536}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens, \
            BookKeeper(ens.metadata_uri) as writer:
        closed = writer.create_ledger(1, 1, 1, digest="crc32c", password=PASSWORD)
        closed_data = [rng.randbytes(rng.randrange(0, 4000)) for _ in range(150)]
        for fut in [closed.add_entry_async(data) for data in closed_data]:
            fut.result(60)
        closed.close()
        lh = writer.create_ledger(1, 1, 1, digest="crc32c", password=PASSWORD)
        open_data = [b"entry %d " % i + rng.randbytes(rng.randrange(0, 2000)) for i in range(60)]
        for fut in [lh.add_entry_async(data) for data in open_data]:
            fut.result(60)
        # Another client recovers the ledger: the bookie fences it, the old writer is done.
        assert read_all(ens, lh.ledger_id, 59) == open_data

        ens.stop(0)
        shutil.rmtree(os.path.join(ens.bookie_dir(0), "ledgers", "current", "index"))
        with pytest.raises(LocalBookieError):
            ens.start(0)
        refusal = [line for line in ens.log(0).splitlines() if "refusing to start" in line][-1]
        assert "bookie shell rebuild-index --conf FILE" in refusal

        proc = rebuild(ens)
        assert "rebuild-index: entry logs" in proc.stderr  # progress
        assert "210 entries" in proc.stdout

        ens.start(0)
        assert read_all(ens, closed.ledger_id, 149) == closed_data
        assert read_all(ens, lh.ledger_id, 59) == open_data
        with pytest.raises(LedgerFencedError):
            lh.add_entry(b"from the old writer", timeout_s=30)
