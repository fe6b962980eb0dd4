"""A ledger disk that fills up (a real tmpfs): the bookie turns read-only and registers so, asks
for a GC pass with a major compaction itself, and once a deleted ledger's space is back below
the low-water mark it takes adds again (bookie.core.diskcheck, docs/configuration.md)."""

import os

import pytest

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import BookieTimeout, RawBookieClient, make_entry
from bookie.wire import Status
from waiting import poll
from tmpfs import mounted_tmpfs

KEY = b"disk-key"
ENTRY_BYTES = 16 * 1024


@pytest.fixture
def small_ledger_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small-ledger-disk", "64m") as mnt:
        yield mnt


@pytest.fixture
def journal_disk(tmp_path):
    # The journal on a disk of its own, large enough that its old files (deleted by the journal
    # worker's housekeeping, once a second) never bring it near a threshold: on the ledger disk
    # they were up to 18 MB of a fast fill, and their deletion alone could bring the ledger disk
    # back under the low-water mark before the GC had deleted anything (CI, stop 27).
    with mounted_tmpfs(tmp_path / "journal-disk", "512m") as mnt:
        yield mnt


def wait(pred, timeout_s=90.0):
    return poll(pred, timeout_s, 0.1)


def entry(lid, eid):
    return make_entry(lid, eid, bytes([eid % 251]) * ENTRY_BYTES)


def used(path):
    st = os.statvfs(path)
    return 1 - st.f_bfree / st.f_blocks


def test_a_full_disk_turns_read_only_compaction_frees_it_and_adds_come_back(tmp_path, small_ledger_disk,
                                                                            journal_disk):
    # every directory on a disk of the test's own (the journal's disk is checked too, and /tmp's
    # use is not ours); only the ledger disk fills
    journal, ledgers = os.path.join(journal_disk, "journal"), os.path.join(small_ledger_disk, "ledgers")
    conf = {"journalDirectory": journal, "ledgerDirectories": ledgers, "indexMapSizeMB": 64,
            "journalMaxSizeMB": 1, "journalMaxBackups": 1, "journalPreAllocSizeMB": 1, "logSizeLimit": 512 * 1024,
            "entryLogFilePreallocationEnabled": "false", "diskCheckInterval": 100,
            "diskUsageThreshold": 0.5, "diskUsageWarnThreshold": 0.4, "diskUsageLwmThreshold": 0.3,
            "gcWaitTime": 1000, "compactionRateByEntries": 0,
            "minorCompactionInterval": 0, "majorCompactionInterval": 0}
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=conf) as ens, \
            open_metadata(ens.metadata_uri) as store:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        doomed, _ = store.create_ledger(meta)
        kept, _ = store.create_ledger(meta)
        n = {doomed: 0, kept: 0}
        status = Status.OK
        with RawBookieClient(ens.bookies[0]) as c:
            # 128 KiB a batch, three of the doomed ledger for one of the kept: the disk reaches
            # 0.5 after ~250 batches; the other half of the disk is headroom for a disk check
            # that comes late on a loaded machine (adds run until the bookie turns read-only)
            for _ in range(400):
                for lid in (doomed, doomed, doomed, kept):
                    try:
                        status = c.add(lid, [entry(lid, n[lid] + i) for i in range(8)], KEY)
                    except BookieTimeout:
                        # On a loaded machine the disk can fill before a disk check turns the
                        # bookie read-only: the add that met the full disk is then held (not
                        # answered, not lost) until compaction makes room; go on as an operator
                        # would, with a fresh connection.
                        status = "held"
                        c.close()
                        c = RawBookieClient(ens.bookies[0])
                    if status != Status.OK:
                        break
                    n[lid] += 8
                if status != Status.OK:
                    break
            assert status in (Status.READ_ONLY, "held"), (status, used(small_ledger_disk),
                                                          ens.log(0)[-2000:])
            assert "disk full" in ens.log(0)  # (warn may be skipped: 128 KiB adds outrun the checks)
            assert wait(lambda: ens.bookies[0] in store.list_bookies(readonly=True))
            full_at = used(small_ledger_disk)
            store.remove_ledger(doomed)
            # no operator step: the supervisor keeps asking for major compactions while full
            assert wait(lambda: "bookie is writable again" in ens.log(0)), ens.log(0)[-3000:]
            assert used(small_ledger_disk) < 0.3 < full_at
            assert wait(lambda: ens.bookies[0] in store.list_bookies(readonly=False))
            assert c.add(kept, [entry(kept, n[kept])], KEY) == Status.OK
            got = []
            while len(got) <= n[kept]:
                s, es = c.read(kept, len(got), max_count=64)
                assert s == Status.OK
                got += es
            assert [bytes(e) for e in got] == [entry(kept, e) for e in range(n[kept] + 1)]
            assert c.read(doomed, 0)[0] == Status.NO_LEDGER, ens.log(0)[-4000:]
        assert "compacted" in ens.log(0) and "Traceback" not in ens.log(0)
