"""A journal that cannot be written or synced stops the bookie (exit status 4) instead of
restarting: after a failed fdatasync the page cache cannot be trusted to say what is durable."""

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


def test_a_full_journal_disk_stops_the_bookie_with_exit_status_4_and_a_larger_disk_starts_it(
        tmp_path, tiny_journal_disk):
    """Exit status 4 with "No space left on device" in its line; the operator's way out is more
    room for the journal (here: the tmpfs grown in place) and a start: the journal replays as
    after any stop and every acknowledged entry reads back, byte for byte."""
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"),
                       conf={"metadataServiceUri": "", "journalDirectory": tiny_journal_disk,
                             "journalMaxSizeMB": 1, "journalPreAllocSizeMB": 1,
                             "diskCheckInterval": 600000})
    with ens:
        acked = []
        with RawBookieClient(ens.bookies[0], timeout_s=2) as c:
            for k in range(2000):
                batch = [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)]
                try:
                    status = c.add(1, batch, b"k")
                except BookieTimeout:
                    break
                if status != Status.OK:
                    break
                acked += batch
        assert 0 < len(acked) < 2000 * 20
        deadline = time.monotonic() + 30
        while ens.running(0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ens.procs[0].returncode == 4
        log = ens.log(0)
        assert "journal write failed; stopping the bookie" in log
        assert "No space left on device" in log
        assert "could not make the journal durable" in log
        assert "worker died; restarting it role=journal" not in log
        subprocess.run(["mount", "-o", "remount,size=64m", tiny_journal_disk], check=True)
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as c:
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
            # (entries past the acknowledged ones may be there: journaled, never answered)
            more = [make_entry(2, 0, b"after the disk grew")]
            assert c.add(2, more, b"k") == Status.OK
            assert c.read(2, 0) == (Status.OK, more)
        assert "Traceback" not in ens.log(0)
