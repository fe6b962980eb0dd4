"""A journal disk that fills up (a real small tmpfs) turns the bookie read-only instead of
stopping it: reads are served, adds refused READ_ONLY, the reason in /api/v1/bookie/state and
the metrics; once there is room again it takes adds without a restart, and every acknowledged
entry is kept (issue 32 item 5; workers/journal_worker.py, docs/appliance.md exit 4)."""

import json
import os
import time
import urllib.request

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status
from tmpfs import mounted_tmpfs
from waiting import poll


@pytest.fixture
def small_journal_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small-journal-disk", "8m") as mnt:
        yield mnt


def state(ens) -> dict:
    with urllib.request.urlopen(ens.admin_url(0) + "/api/v1/bookie/state", timeout=5) as r:
        return json.load(r)


def metric(ens, name: str) -> str:
    with urllib.request.urlopen(ens.admin_url(0) + "/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return next((ln.split()[-1] for ln in lines if ln.startswith(name + " ")), "missing")


def test_a_full_journal_disk_turns_the_bookie_read_only_and_room_brings_it_back(tmp_path, small_journal_disk):
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"), admin_http=True,
                       conf={"metadataServiceUri": "", "journalDirectory": small_journal_disk,
                             "journalPreAllocSizeMB": 1, "diskUsageThreshold": 1.0,
                             "diskCheckInterval": 3_600_000})
    with ens:
        filler = os.path.join(small_journal_disk, "filler")
        st = os.statvfs(small_journal_disk)
        with open(filler, "wb") as f:
            f.write(b"\0" * (st.f_bavail * st.f_frsize - (3 << 20)))
        acked, status = [], None
        with RawBookieClient(ens.bookies[0], timeout_s=3) as c:
            for k in range(1000):
                batch = [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)]
                try:
                    status = c.add(1, batch, b"k")
                except BookieTimeout:
                    assert ens.running(0), ens.log(0)[-3000:]
                    continue  # its group met the full disk: answered once there is room
                if status != Status.OK:
                    break
                acked += batch
        assert acked and status == Status.READ_ONLY, (status, ens.log(0)[-3000:])
        assert "no room on the journal disk; read-only until there is" in ens.log(0)
        assert ens.running(0), ens.log(0)[-3000:]
        s = state(ens)
        assert s["readOnly"] and s["journalDiskFull"] and not s["forcedReadOnly"], s
        assert float(metric(ens, "bookie_readonly_journal_full")) == 1
        with RawBookieClient(ens.bookies[0]) as c:  # reads are served meanwhile
            for n in (0, len(acked) - 1):
                assert c.read(1, n) == (Status.OK, [acked[n]]), n

        os.unlink(filler)
        with RawBookieClient(ens.bookies[0], timeout_s=3) as c:
            def writable():
                return c.add(2, [make_entry(2, 0, b"again")], b"k") == Status.OK
            assert poll(writable, 30, 0.5), ens.log(0)[-3000:]
            assert not state(ens)["journalDiskFull"]
            assert float(metric(ens, "bookie_readonly_journal_full")) == 0
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
        assert "worker died" not in ens.log(0) and "stopping the bookie" not in ens.log(0)
        assert ens.stop(0) == 0, ens.log(0)[-3000:]
        ens.start(0)  # the journal written across the full disk checks and replays whole
        with RawBookieClient(ens.bookies[0]) as c:
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
            assert c.read(2, 0)[0] == Status.OK
