"""One real bookie process: what a client sees through the wire protocol."""

import threading
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"master-key-0123456789"


@pytest.fixture(scope="module")
def ens():
    with LocalBookies(1, conf={"metadataServiceUri": "", "flushInterval": 50,
                               "diskCheckInterval": 100}) as e:
        yield e


@pytest.fixture
def client(ens):
    with RawBookieClient(ens.bookies[0]) as c:
        yield c


_ledger = iter(range(1000, 10**6))


@pytest.fixture
def ledger():
    return next(_ledger)


def test_an_acknowledged_entry_is_readable_at_once(client, ledger):
    for i in range(200):
        entry = make_entry(ledger, i, b"payload %d" % i, lac=i - 1)
        assert client.add(ledger, [entry], KEY) == Status.OK
        assert client.read(ledger, i) == (Status.OK, [entry])


def test_batches_read_back_as_ranges(client, ledger):
    entries = [make_entry(ledger, i, bytes([i % 251]) * (i * 7)) for i in range(300)]
    for k in range(0, 300, 60):
        assert client.add(ledger, entries[k:k + 60], KEY) == Status.OK
    status, got = client.read(ledger, 0, 1000)
    assert status == Status.OK and got == entries
    assert client.read(ledger, 300) == (Status.NO_ENTRY, [])
    assert client.read(ledger + 10**7, 0) == (Status.NO_LEDGER, [])


def test_lac_is_the_highest_piggybacked_one(client, ledger):
    assert client.read_lac(ledger)[0] == Status.NO_LEDGER
    client.add(ledger, [make_entry(ledger, i, b"x", lac=i - 1) for i in range(5)], KEY)
    assert client.read_lac(ledger) == (Status.OK, 3, 4)
    assert client.write_lac(ledger, 4, KEY) == Status.OK
    assert client.read_lac(ledger) == (Status.OK, 4, 4)


def test_long_poll_answers_when_the_lac_moves_or_at_its_timeout(ens, client, ledger):
    client.add(ledger, [make_entry(ledger, 0, b"x", lac=-1)], KEY)
    t0 = time.monotonic()
    assert client.read_lac(ledger, long_poll=(-1, 200))[0:2] == (Status.OK, -1)
    assert time.monotonic() - t0 > 0.15  # held to its timeout (a loaded machine only adds)

    def later():
        time.sleep(0.3)
        with RawBookieClient(ens.bookies[0]) as other:
            other.add(ledger, [make_entry(ledger, 1, b"y", lac=0)], KEY)

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    with RawBookieClient(ens.bookies[0], timeout_s=180) as poller:  # outlives the 120 s poll
        assert poller.read_lac(ledger, long_poll=(-1, 120_000)) == (Status.OK, 0, 1)
    assert time.monotonic() - t0 < 120, "answered at its timeout, not when the LAC moved"


def test_wrong_master_key_is_unauthorized_and_changes_nothing(client, ledger):
    entry = make_entry(ledger, 0, b"original")
    assert client.add(ledger, [entry], KEY) == Status.OK
    assert client.add(ledger, [make_entry(ledger, 0, b"evil")], b"wrong-key") == Status.UNAUTHORIZED
    assert client.add(ledger, [make_entry(ledger, 1, b"evil")], b"wrong-key") == Status.UNAUTHORIZED
    assert client.fence(ledger, b"wrong-key") == Status.UNAUTHORIZED
    assert client.read(ledger, 0, 10) == (Status.OK, [entry])


def test_fenced_ledger_refuses_adds_accepts_recovery_adds_and_stays_fenced(ens, client, ledger):
    assert client.add(ledger, [make_entry(ledger, 0, b"a")], KEY) == Status.OK
    assert client.fence(ledger, KEY) == Status.OK
    assert client.add(ledger, [make_entry(ledger, 1, b"b")], KEY) == Status.FENCED
    assert client.add(ledger, [make_entry(ledger, 1, b"b")], KEY, recovery=True) == Status.OK
    never_written = ledger + 500_000
    assert client.fence(never_written, KEY) == Status.OK  # fencing creates it fenced, unbound
    assert client.add(never_written, [make_entry(never_written, 0, b"z")], KEY) == Status.FENCED
    ens.stop(0)
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(ledger, [make_entry(ledger, 2, b"c")], KEY) == Status.FENCED
        assert c.add(never_written, [make_entry(never_written, 0, b"z")], KEY) == Status.FENCED
        assert c.read(ledger, 0, 10)[1][1] == make_entry(ledger, 1, b"b")


def test_sigterm_stops_quickly_and_the_restart_replays_only_a_tail(tmp_path):
    # A flush interval far longer than the test: only the shutdown's own checkpoint can spare
    # the restart its replay.
    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={"metadataServiceUri": "", "flushInterval": 600_000}) as ens:
        with RawBookieClient(ens.bookies[0]) as c:
            for k in range(20):
                c.add(5, [make_entry(5, k * 50 + i, b"p" * 100) for i in range(50)], KEY)
        assert ens.stop(0) == 0  # a clean exit of its own (ens.stop kills it after 30 s)
        ens.start(0)
        log = ens.log(0)
        assert "fatal" not in log and "Traceback" not in log, log[-2000:]
        replays = [line for line in log.splitlines() if "replay done" in line]
        assert "records=0 " in replays[-1] + " ", replays[-1]
        with RawBookieClient(ens.bookies[0]) as c:
            assert len(c.read(5, 0, 2000)[1]) == 1000


def test_read_only_bookie_refuses_adds_but_serves_reads(ens, client, ledger):
    entry = make_entry(ledger, 0, b"ro")
    assert client.add(ledger, [entry], KEY) == Status.OK
    ens.set_readonly(0, True)
    deadline = time.monotonic() + 5
    while client.info()["writable"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.add(ledger, [make_entry(ledger, 1, b"no")], KEY) == Status.READ_ONLY
    assert client.read(ledger, 0) == (Status.OK, [entry])
    time.sleep(0.2)  # a disk check in between must not lift an operator's read-only
    assert client.add(ledger, [make_entry(ledger, 1, b"no")], KEY) == Status.READ_ONLY
    ens.set_readonly(0, False)
    deadline = time.monotonic() + 5
    while not client.info()["writable"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert client.add(ledger, [make_entry(ledger, 1, b"yes")], KEY) == Status.OK


def test_oversized_entries_and_foreign_ledger_entries_are_bad_requests(client, ledger):
    big = make_entry(ledger, 0, b"x" * (6 * 1024 * 1024))
    assert client.add(ledger, [big], KEY) == Status.BAD_REQUEST
    assert client.add(ledger, [make_entry(ledger + 1, 0, b"x")], KEY) == Status.BAD_REQUEST
    assert client.read(ledger, 0)[0] == Status.NO_LEDGER


def test_info_reports_disk_space(client):
    info = client.info()
    assert info["total_bytes"] >= info["free_bytes"] > 0 and info["writable"] is True


def test_old_journals_are_deleted_while_adds_keep_coming(tmp_path):
    import glob
    import os

    from bookie_load import AddLoad

    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={"metadataServiceUri": "", "flushInterval": 50, "journalMaxSizeMB": 1,
                            "journalMaxBackups": 1, "journalPreAllocSizeMB": 1}) as ens:
        load = AddLoad(ens.bookies[0], 77, batch=100, window=16, payload_bytes=1000)
        load.start()
        journal_dir = os.path.join(ens.bookie_dir(0), "journal", "current")
        try:
            time.sleep(4.0)  # several housekeeping passes while the journal rolls every ~1 MB
            names = glob.glob(os.path.join(journal_dir, "*.txn"))
            deleted_during_load = "deleted old journals" in ens.log(0)
        finally:
            load.stop()
        assert len(load.acked) >= 5_000
        newest = max(int(os.path.basename(n)[:16], 16) for n in names)
        assert deleted_during_load and len(names) < newest / 2, \
            f"{len(names)} of {newest} journal files still there while adds kept coming"
