"""Garbage collection against the metadata store, and the Prometheus endpoint (docs/metrics.md)."""

import glob
import os
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.workers.ports import free_port_pair
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie.workers import metrics
from waiting import poll

KEY = b"gc-master-key"


@pytest.fixture(scope="module")
def ens():
    metrics_port = free_port_pair("127.0.0.1")
    with LocalBookies(1, conf={"gcWaitTime": 300, "logSizeLimit": 64 * 1024, "flushInterval": 50,
                               "prometheusStatsHttpPort": metrics_port}) as e:
        e.metrics_port = metrics_port
        yield e


def _wait(pred, timeout_s=15.0):
    return poll(pred, timeout_s)


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


def _scrape(ens) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{ens.metrics_port}/metrics", timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return r.read().decode()


def _families(ens) -> dict:
    return {f.name: f for f in text_string_to_metric_families(_scrape(ens))}


def _value(families, family, sample_name, **labels) -> float:
    for s in families[family].samples if family in families else ():
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return 0.0


def _settled(ens) -> dict:
    """The metrics once the earlier tests' requests are all counted (two equal scrapes 1.2 s apart)."""
    def key(f):
        return (_value(f, "bookie_add_entry_seconds", "bookie_add_entry_seconds_count"),
                _value(f, "bookie_read_entry_seconds", "bookie_read_entry_seconds_count"))
    last = _families(ens)
    for _ in range(20):
        time.sleep(1.2)
        now = _families(ens)
        if key(now) == key(last):
            return now
        last = now
    return last


def _ledger_in_store(ens) -> int:
    with open_metadata(ens.metadata_uri) as store:
        return store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])]))[0]


def test_every_metric_has_help_and_type_and_is_in_the_table(ens):
    text = _scrape(ens)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    documented = {s.name for s in metrics.SPECS}
    for name, family in families.items():
        assert family.documentation, f"{name} has no HELP"
        assert family.type in ("counter", "gauge", "histogram"), (name, family.type)
        full = name + "_total" if family.type == "counter" else name  # the parser drops _total
        assert f"# HELP {full} " in text and f"# TYPE {full} {family.type}" in text
        assert full in documented, f"{full} is not in bookie.workers.metrics.SPECS (docs/metrics.md)"
    for expected in ("bookie_readonly", "bookie_ring_capacity_bytes", "bookie_disk_used_bytes",
                     "bookie_ledgers", "bookie_worker_up", "bookie_info"):
        assert expected in families, expected
    assert _value(families, "bookie_ring_capacity_bytes", "bookie_ring_capacity_bytes") == 32 << 20
    assert _value(families, "bookie_worker_up", "bookie_worker_up", role="journal") == 1


def test_histograms_and_counters_move_after_adds_and_reads(ens):
    hist = ("bookie_add_entry_seconds", "bookie_read_entry_seconds",
            "bookie_journal_force_write_seconds", "bookie_journal_sync_seconds",
            "bookie_checkpoint_seconds")
    before = _settled(ens)  # workers flush what they counted once a second
    lid = _ledger_in_store(ens)  # the GC (every 300 ms here) drops ledgers the store lacks
    with RawBookieClient(ens.bookies[0]) as c:
        for i in range(20):
            assert c.add(lid, [make_entry(lid, i, b"m" * 100)], KEY) == Status.OK
            assert c.read(lid, i)[0] == Status.OK
        assert c.read(10**12, 0)[0] == Status.NO_LEDGER

    def moved():
        now = _families(ens)
        return (all(_value(now, h, h + "_count") > _value(before, h, h + "_count") for h in hist)
                and _value(now, "bookie_requests", "bookie_requests_total", op="READ", status="NO_LEDGER")
                and _value(now, "bookie_add_entry_seconds", "bookie_add_entry_seconds_count")
                >= _value(before, "bookie_add_entry_seconds", "bookie_add_entry_seconds_count") + 20
                and _value(now, "bookie_add_entries", "bookie_add_entries_total")
                >= _value(before, "bookie_add_entries", "bookie_add_entries_total") + 20)

    assert _wait(moved), _scrape(ens)
    after = _families(ens)
    for h in hist:
        count = _value(after, h, h + "_count")
        assert _value(after, h, h + "_bucket", le="+Inf") == count
        assert _value(after, h, h + "_sum") > _value(before, h, h + "_sum")
    assert (_value(after, "bookie_add_entry_seconds", "bookie_add_entry_seconds_count")
            - _value(before, "bookie_add_entry_seconds", "bookie_add_entry_seconds_count")) == 20
    ok_adds = _value(after, "bookie_requests", "bookie_requests_total", op="ADD", status="OK")
    assert ok_adds - _value(before, "bookie_requests", "bookie_requests_total", op="ADD", status="OK") == 20
    assert _value(after, "bookie_requests", "bookie_requests_total", op="READ", status="NO_LEDGER") >= 1
    assert (_value(after, "bookie_add_entries", "bookie_add_entries_total")
            - _value(before, "bookie_add_entries", "bookie_add_entries_total")) == 20
    assert _value(after, "bookie_read_bytes", "bookie_read_bytes_total") > 0


def test_counters_survive_a_worker_restart(ens):
    lid = _ledger_in_store(ens)
    with RawBookieClient(ens.bookies[0]) as c:
        assert c.add(lid, [make_entry(lid, 0, b"r")], KEY) == Status.OK
    assert _wait(lambda: _value(_families(ens), "bookie_requests", "bookie_requests_total",
                                op="ADD", status="OK") > 0)
    before = _value(_families(ens), "bookie_requests", "bookie_requests_total", op="ADD", status="OK")
    old = ens.kill_worker(0, "add")
    ens.wait_worker_restarted(0, "add", old)
    after = _families(ens)
    assert _value(after, "bookie_requests", "bookie_requests_total", op="ADD", status="OK") >= before
    assert _value(after, "bookie_worker_restarts", "bookie_worker_restarts_total", role="add") >= 1


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


def test_a_bookie_whose_ledgers_were_all_deleted_reclaims_their_space():
    """Issue 21, defect 6: the empty-listing guard refused forever once every ledger of the
    cluster was deleted; the store's high-water mark shows the listing is true."""
    with LocalBookies(1, conf={"gcWaitTime": 300, "logSizeLimit": 64 * 1024,
                               "flushInterval": 50}) as solo:
        ledger_dir = os.path.join(solo.bookie_dir(0), "ledgers", "current")
        with open_metadata(solo.metadata_uri) as store, RawBookieClient(solo.bookies[0]) as c:
            meta = LedgerMetadata(1, 1, 1, fragments=[(0, [solo.bookies[0]])])
            doomed = [store.create_ledger(meta)[0] for _ in range(2)]
            for lid in doomed:
                for k in range(10):
                    entries = [make_entry(lid, k * 10 + i, b"d" * 1000) for i in range(10)]
                    assert c.add(lid, entries, KEY) == Status.OK
            logs_before = set(glob.glob(os.path.join(ledger_dir, "*.log")))
            for lid in doomed:
                store.remove_ledger(lid)
            assert list(store.list_ledgers()) == []
            assert _wait(lambda: all(c.read(lid, 0)[0] == Status.NO_LEDGER for lid in doomed),
                         30), solo.log(0)[-2000:]
            assert _wait(lambda: len(set(glob.glob(os.path.join(ledger_dir, "*.log"))))
                         < len(logs_before), 30)
        assert "gc refused to delete" not in solo.log(0)
