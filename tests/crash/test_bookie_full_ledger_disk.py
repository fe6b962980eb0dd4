"""A bookie stopped while its ledger disk is full, and started again before there is room: the
add that met the full disk was never acknowledged, every acknowledged entry survives, and the
start waits for room instead of failing (storage/noroom.py, docs/architecture.md crash table)."""

import os
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status
from tmpfs import mounted_tmpfs


@pytest.fixture
def small_ledger_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small-ledger-disk", "16m") as mnt:
        yield mnt


def test_stopped_and_started_while_the_ledger_disk_is_full(tmp_path, small_ledger_disk):
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"), start_timeout_s=120,
                       conf={"metadataServiceUri": "", "ledgerDirectories": small_ledger_disk,
                             "indexMapSizeMB": 64, "logSizeLimit": 256 * 1024,
                             "diskUsageThreshold": 1.0})
    with ens:
        filler = os.path.join(small_ledger_disk, "filler")
        st = os.statvfs(small_ledger_disk)
        with open(filler, "wb") as f:
            left = st.f_bavail * st.f_frsize - (1 << 20)
            while left > 0:
                left -= f.write(b"\0" * min(1 << 20, left))
        acked, unanswered = [], []
        with RawBookieClient(ens.bookies[0], timeout_s=3) as c:
            for k in range(2000):
                batch = [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)]
                try:
                    status = c.add(1, batch, b"k")
                except BookieTimeout:
                    unanswered += batch
                    if not ens.running(0):
                        break  # it died: the assertion below says so
                    continue
                if status != Status.OK:
                    break
                acked += batch
        assert acked and status == Status.READ_ONLY, ens.log(0)[-3000:]
        refused = batch  # refused READ_ONLY; journalled if it was the one that met the full disk
        assert ens.stop(0) == 0, ens.log(0)[-3000:]
        ens.start(0, wait=False)
        deadline = time.monotonic() + 60
        while "to replay the journal; retrying" not in ens.log(0) and time.monotonic() < deadline:
            assert ens.running(0), ens.log(0)[-3000:]
            time.sleep(0.2)
        assert ens.running(0)
        os.unlink(filler)
        ens.wait_serving(0)
        with RawBookieClient(ens.bookies[0]) as c:
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
            # Never acknowledged, but journalled before the disk filled: replay stored it.
            for n, entry in enumerate(unanswered, start=len(acked)):
                assert c.read(1, n) == (Status.OK, [entry]), n
            # Refused, never acknowledged: stored by replay if it was journalled, else absent.
            for n, entry in enumerate(refused, start=len(acked) + len(unanswered)):
                assert c.read(1, n) in ((Status.OK, [entry]), (Status.NO_ENTRY, [])), n
            more = len(acked) + len(unanswered) + len(refused)
            assert c.add(1, [make_entry(1, more, b"more")], b"k") == Status.OK
        assert "Traceback" not in ens.log(0)
