"""Garbage collection against the metadata store, and the Prometheus endpoint."""

import glob
import os
import time
import urllib.request

import pytest

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.workers.common import free_port_pair
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"gc-master-key"


@pytest.fixture(scope="module")
def ens():
    metrics_port = free_port_pair("127.0.0.1")
    with LocalBookies(1, conf={"gcWaitTime": 300, "logSizeLimit": 64 * 1024,
                               "prometheusStatsHttpPort": metrics_port}) as e:
        e.metrics_port = metrics_port
        yield e


def _wait(pred, timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_deleted_ledgers_leave_the_bookie_and_dead_entry_logs_go(ens):
    ledger_dir = os.path.join(ens.bookie_dir(0), "ledgers", "current")
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        doomed, _ = store.create_ledger(meta)
        kept, _ = store.create_ledger(meta)
        for k in range(20):  # ~200 KiB: several 64 KiB entry logs of the doomed ledger alone
            assert c.add(doomed, [make_entry(doomed, k * 10 + i, b"d" * 1000) for i in range(10)], KEY) == Status.OK
        assert c.add(kept, [make_entry(kept, 0, b"keep me")], KEY) == Status.OK
        logs_before = set(glob.glob(os.path.join(ledger_dir, "*.log")))
        assert len(logs_before) >= 3
        store.remove_ledger(doomed)
        assert _wait(lambda: c.read(doomed, 0)[0] == Status.NO_LEDGER)
        assert _wait(lambda: len(set(glob.glob(os.path.join(ledger_dir, "*.log")))) < len(logs_before))
        assert c.read(kept, 0) == (Status.OK, [make_entry(kept, 0, b"keep me")])


def test_metrics_are_prometheus_text(ens):
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(10**9, [make_entry(10**9, 0, b"m")], KEY) == Status.OK

    def scrape():
        with urllib.request.urlopen(f"http://127.0.0.1:{ens.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    assert _wait(lambda: 'bookie_add_entries_total{role="add"}' in scrape())
    text = scrape()
    assert "bookie_up" in text and 'bookie_journal_syncs_total{role="journal"}' in text
    for line in text.splitlines():
        name_labels, value = line.rsplit(" ", 1)
        float(value)
        assert name_labels.startswith("bookie_")


def test_several_ledger_directories_share_the_entry_logs(tmp_path):
    dirs = [str(tmp_path / "disk-a"), str(tmp_path / "disk-b")]
    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={"ledgerDirectories": ",".join(dirs), "gcWaitTime": 300,
                            "logSizeLimit": 64 * 1024}) as ens:
        with open_metadata(ens.metadata_uri) as store:
            meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
            ids = [store.create_ledger(meta)[0] for _ in range(4)]
            written = {}
            with RawBookieClient(ens.bookies[0]) as c:
                for lid in ids:
                    written[lid] = [make_entry(lid, i, os.urandom(900)) for i in range(150)]
                    for k in range(0, 150, 50):
                        assert c.add(lid, written[lid][k:k + 50], KEY) == Status.OK
            per_dir = [len(glob.glob(os.path.join(d, "current", "*.log"))) for d in dirs]
            assert all(n >= 2 for n in per_dir), per_dir
            ens.stop(0)
            ens.start(0)
            with RawBookieClient(ens.bookies[0]) as c:
                for lid in ids:
                    assert c.read(lid, 0, 1000) == (Status.OK, written[lid])
                for lid in ids[:2]:  # one ledger of each directory
                    store.remove_ledger(lid)
                assert _wait(lambda: all(c.read(lid, 0)[0] == Status.NO_LEDGER for lid in ids[:2]))
                assert _wait(lambda: all(len(glob.glob(os.path.join(d, "current", "*.log"))) < n
                                         for d, n in zip(dirs, per_dir)))
                for lid in ids[2:]:
                    assert c.read(lid, 0, 1000) == (Status.OK, written[lid])
