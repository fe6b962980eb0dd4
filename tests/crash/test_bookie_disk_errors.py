"""A journal disk with no room turns the bookie read-only instead of stopping it (issue 32 item
5); a journal that cannot be *synced* still stops it (exit status 4: after a failed fdatasync the
page cache cannot be trusted to say what is durable)."""

import os
import subprocess
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


def test_a_full_journal_disk_turns_read_only_and_a_larger_disk_makes_it_writable(
        tmp_path, tiny_journal_disk):
    """Rolling 1 MB journal files on a 3 MB disk: adds are refused READ_ONLY once a write finds
    no room, the bookie keeps running (no exit, no worker restart); the disk grown in place, it
    takes adds again by itself, and after a restart the journal written across the full disk
    replays: every acknowledged entry reads back, byte for byte."""
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"),
                       conf={"metadataServiceUri": "", "journalDirectory": tiny_journal_disk,
                             "journalMaxSizeMB": 1, "journalPreAllocSizeMB": 1,
                             "journalMaxBackups": 5, "diskCheckInterval": 600000})
    with ens:
        acked, status = [], None
        with RawBookieClient(ens.bookies[0], timeout_s=2) as c:
            for k in range(2000):
                batch = [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)]
                try:
                    status = c.add(1, batch, b"k")
                except BookieTimeout:
                    assert ens.running(0), ens.log(0)[-3000:]
                    continue
                if status != Status.OK:
                    break
                acked += batch
        assert 0 < len(acked) < 2000 * 20 and status == Status.READ_ONLY, ens.log(0)[-3000:]
        time.sleep(1)
        assert ens.running(0), ens.log(0)[-3000:]
        log = ens.log(0)
        assert "no room on the journal disk; read-only until there is" in log
        assert "No space left on device" in log
        assert "stopping the bookie" not in log and "worker died" not in log
        subprocess.run(["mount", "-o", "remount,size=64m", tiny_journal_disk], check=True)
        deadline = time.monotonic() + 30
        with RawBookieClient(ens.bookies[0], timeout_s=3) as c:
            more = [make_entry(2, 0, b"after the disk grew")]
            while c.add(2, more, b"k") != Status.OK:
                assert time.monotonic() < deadline, ens.log(0)[-3000:]
                time.sleep(0.5)
        assert "journal disk has room again; taking adds" in ens.log(0)
        assert ens.stop(0) == 0
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as c:
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
            # (entries past the acknowledged ones may be there: journaled, never answered)
            assert c.read(2, 0) == (Status.OK, more)
        assert "Traceback" not in ens.log(0)
