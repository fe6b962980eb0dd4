"""A journal that cannot be written or synced stops the bookie (exit status 4) instead of
restarting: after a failed fdatasync the page cache cannot be trusted to say what is durable."""

import os
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status
from tmpfs import mounted_tmpfs


@pytest.fixture
def tiny_journal_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "tiny-journal", "3m") as mnt:
        yield mnt


def test_a_full_journal_disk_stops_the_bookie_with_exit_status_4(tmp_path, tiny_journal_disk):
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"),
                       conf={"metadataServiceUri": "", "journalDirectory": tiny_journal_disk,
                             "journalMaxSizeMB": 1, "journalPreAllocSizeMB": 1,
                             "diskCheckInterval": 600000})
    with ens:
        acked = 0
        with RawBookieClient(ens.bookies[0], timeout_s=2) as c:
            for k in range(2000):
                try:
                    status = c.add(1, [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)], b"k")
                except BookieTimeout:
                    break
                if status != Status.OK:
                    break
                acked += 1
        assert 0 < acked < 2000
        deadline = time.monotonic() + 30
        while ens.running(0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ens.procs[0].returncode == 4
        log = ens.log(0)
        assert "journal write failed; stopping the bookie" in log
        assert "could not make the journal durable" in log
        assert "worker died; restarting it role=journal" not in log
