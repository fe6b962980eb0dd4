"""Garbage collection against the metadata store, and the Prometheus endpoint."""

import glob
import os
import time
import urllib.request

import pytest

from bookie.appliance.metadata import LedgerMetadata, open_metadata
from bookie.appliance.supervisor import free_port_pair
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
