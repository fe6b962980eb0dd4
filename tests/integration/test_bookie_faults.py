"""A running bookie under faults of what it depends on: the metadata store going away (a
ZooKeeper of the test's own, paused with SIGSTOP so that calls time out, as in a partition)
and full ledger disks (a small tmpfs).  Real bookies, a real ZooKeeper, real filesystems."""

import os
import signal
import time

import pytest

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from waiting import poll
from tmpfs import mounted_tmpfs

KEY = b"faults-master-key"
ZK_TIMEOUT_MS = 2000


@pytest.fixture(scope="module")
def zk():
    """A ZooKeeper of this module's own: the tests pause it."""
    from bookie.testing.nemesis.zkserver import RestartableZooKeeper
    server = RestartableZooKeeper().start()
    yield server
    server.stop()


@pytest.fixture
def zk_store_uri(zk):
    uri = zk.uri(zk.chroot())
    open_metadata(uri, timeout_s=10.0, create=True).close()
    return uri


@pytest.fixture
def paused(zk):
    """Call to pause the server; it is resumed after the test whatever happens."""
    yield zk.pause
    zk.resume()


def _wait(pred, timeout_s=20.0, step=0.05):
    return poll(pred, timeout_s, step)


def _one_bookie(uri, tmp_path, **conf):
    return LocalBookies(1, metadata_uri=uri, base_dir=str(tmp_path / "e"),
                        conf={"zkTimeout": ZK_TIMEOUT_MS, **conf})


def test_bookie_serves_through_a_metadata_outage_and_its_signals_still_work(
        zk, zk_store_uri, paused, tmp_path):
    """ZooKeeper unreachable for longer than zkTimeout while the bookie is flipped read-only
    and back (SIGUSR1 / SIGUSR2 in quick succession, as an operator or the disk check would):
    the bookie keeps serving, its registration follows once the store is back, and SIGTERM
    still stops it at once.  (Before: the store call ran in the signal handler; the nested
    second handler deadlocked on the registration's lock, or the call's timeout ended the
    supervisor with status 2.)"""
    with _one_bookie(zk_store_uri, tmp_path) as ens, open_metadata(zk_store_uri) as store:
        assert store.list_bookies() == [ens.bookies[0]]
        with RawBookieClient(ens.bookies[0]) as c:  # its registration seen (address and key)
            assert c.info()["writable"] is True
        paused()
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGUSR1):
            ens.procs[0].send_signal(sig)
            time.sleep(0.3)
        time.sleep(ZK_TIMEOUT_MS / 1000 * 2)
        assert ens.running(0), ens.log(0)[-3000:]
        with RawBookieClient(ens.bookies[0]) as c:  # read-only now: refused, and reads served
            assert c.add(7, [make_entry(7, 0, b"x")], KEY) == Status.READ_ONLY
            assert c.info()["writable"] is False
        zk.resume()
        assert _wait(lambda: store.list_bookies(readonly=True) == [ens.bookies[0]]
                     and store.list_bookies() == []), ens.log(0)[-3000:]
        ens.set_readonly(0, False)
        assert _wait(lambda: store.list_bookies() == [ens.bookies[0]]), ens.log(0)[-3000:]
        log = ens.log(0)
        assert "Traceback" not in log
        assert "metadata store unreachable; serving on" in log
        assert "registration restored" in log
        # Signals during an outage again, then SIGTERM: it must stop promptly and cleanly.
        paused()
        ens.procs[0].send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        ens.procs[0].send_signal(signal.SIGUSR2)
        time.sleep(0.2)
        assert ens.stop(0, timeout_s=60) == 0, ens.log(0)[-3000:]  # stops on its own, cleanly
        assert "Traceback" not in ens.log(0)


def test_gc_worker_survives_a_metadata_outage_and_restarts_without_the_store(
        zk, zk_store_uri, paused, tmp_path):
    """GC runs while the store is unreachable are skipped (one line), and a GC worker started
    during the outage becomes ready and opens the store later.  (Before: the worker died with
    MetadataTimeoutError and, restarted during the outage, was never ready: the bookie
    stopped.)"""
    with _one_bookie(zk_store_uri, tmp_path, gcWaitTime=300) as ens, \
            open_metadata(zk_store_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        kept, _ = store.create_ledger(meta)
        doomed, _ = store.create_ledger(meta)
        for lid in (kept, doomed):
            assert c.add(lid, [make_entry(lid, 0, b"e")], KEY) == Status.OK
        paused()
        time.sleep(ZK_TIMEOUT_MS / 1000 + 1)
        old = ens.kill_worker(0, "gc")
        ens.wait_worker_restarted(0, "gc", old, timeout_s=30)
        time.sleep(ZK_TIMEOUT_MS / 1000 + 1)
        assert ens.running(0), ens.log(0)[-3000:]
        assert "gc skipped: metadata store unavailable" in ens.log(0)
        zk.resume()
        store.remove_ledger(doomed)
        assert _wait(lambda: c.read(doomed, 0)[0] == Status.NO_LEDGER), ens.log(0)[-3000:]
        assert c.read(kept, 0) == (Status.OK, [make_entry(kept, 0, b"e")])
        assert "gc: fatal" not in ens.log(0) and "Traceback" not in ens.log(0)


def test_gc_deletes_nothing_when_the_store_lists_no_ledgers(zk, zk_store_uri, tmp_path):
    """A store listing no ledger at all while the bookie holds ids it never handed out (a
    wiped or wrongly restored store) is not believed.  (An emptied cluster, whose mark covers
    every id held, is: test_autorecovery_partial / the GC's empty-cluster case.)"""
    with _one_bookie(zk_store_uri, tmp_path, gcWaitTime=300) as ens, \
            open_metadata(zk_store_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        for _ in range(3):
            lid, _ = store.create_ledger(meta)
        assert c.add(lid, [make_entry(lid, 0, b"precious")], KEY) == Status.OK
        store.format(force=True)  # wiped: lists nothing, its id sequence starts again
        assert _wait(lambda: "gc refused to delete" in ens.log(0)), ens.log(0)[-3000:]
        time.sleep(1.0)  # several more runs
        assert c.read(lid, 0) == (Status.OK, [make_entry(lid, 0, b"precious")])


@pytest.fixture
def small_ledger_disk(tmp_path):
    with mounted_tmpfs(tmp_path / "small-ledger-disk", "16m") as mnt:
        yield mnt


def _fill(directory: str, leave_bytes: int) -> str:
    """Fill the filesystem of ``directory`` up to ``leave_bytes`` free; returns the filler."""
    path = os.path.join(directory, "filler")
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        left = max(0, free - leave_bytes)
        while left > 0:
            left -= f.write(chunk[:min(len(chunk), left)])
    return path


def test_a_full_ledger_disk_turns_the_bookie_read_only_until_there_is_room(
        tmp_path, small_ledger_disk):
    """ENOSPC in the entry log / index commit / checkpoint (the supervisor's usage threshold set
    out of the way): adds are refused READ_ONLY, reads
    go on, no worker dies; with room again the bookie takes adds; every acknowledged entry is
    readable, before and after a restart.  (Before: the add worker died with lmdb.DiskError or
    ENOSPC in write_lastmark, its restart's replay failed the same way, and the bookie stopped.)"""
    from bookie.testing.rawclient import BookieTimeout
    ens = LocalBookies(1, base_dir=str(tmp_path / "e"),
                       conf={"metadataServiceUri": "", "ledgerDirectories": small_ledger_disk,
                             "indexMapSizeMB": 64, "logSizeLimit": 256 * 1024,
                             "flushInterval": 100, "diskUsageThreshold": 1.0})
    with ens:
        filler = _fill(small_ledger_disk, 1 << 20)
        acked, refused = [], None
        with RawBookieClient(ens.bookies[0], timeout_s=3) as c:
            for k in range(2000):
                batch = [make_entry(1, k * 20 + i, os.urandom(1000)) for i in range(20)]
                try:
                    status = c.add(1, batch, b"k")
                except BookieTimeout:
                    if not ens.running(0):
                        break  # it died: the assertion below says so
                    continue  # the add that met the full disk: held, answered later
                if status != Status.OK:
                    refused = status
                    break
                acked += batch
            assert refused == Status.READ_ONLY, ens.log(0)[-3000:]
            assert acked
            assert _wait(lambda: c.info()["writable"] is False), ens.log(0)[-3000:]
            assert c.read(1, 0) == (Status.OK, [acked[0]])
            assert ens.running(0)
            os.unlink(filler)
            fresh = [make_entry(2, 0, b"after")]
            assert _wait(lambda: c.add(2, fresh, b"k") == Status.OK, timeout_s=30), ens.log(0)[-3000:]
            assert _wait(lambda: c.info()["writable"] is True)
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
        log = ens.log(0)
        assert "no room on the ledger disks; read-only" in log
        assert "worker died" not in log and "Traceback" not in log, log[-3000:]
        assert ens.stop(0) == 0
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as c:
            for n, entry in enumerate(acked):
                assert c.read(1, n) == (Status.OK, [entry]), n
            assert c.read(2, 0) == (Status.OK, fresh)
