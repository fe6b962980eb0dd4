"""The read worker's read-ahead cache on a real bookie (storage/read_ahead.py): a catch-up
reader is served from it byte for byte; it never answers for a deleted ledger, past the entries
a request asked for, for bytes appended after it read ahead, or for entries compaction moved."""

import glob
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie.workers.ports import free_port_pair
from waiting import poll

KEY = b"read-ahead-key"
CONF = {"gcWaitTime": 300, "flushInterval": 50, "logSizeLimit": 256 * 1024,
        "compactionRateByEntries": 0, "minorCompactionInterval": 0, "majorCompactionInterval": 0,
        "dbStorage_readAheadCacheMaxSizeMb": 8, "dbStorage_readAheadCacheBatchSize": 100}


@pytest.fixture(scope="module")
def ens():
    port = free_port_pair("127.0.0.1")
    with LocalBookies(1, conf=dict(CONF, prometheusStatsHttpPort=port)) as e:
        e.metrics_port = port
        yield e


def scrape(ens) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{ens.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def payload(ledger_id: int, entry_id: int, size: int = 500) -> bytes:
    seed = f"{ledger_id}:{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def entry(lid, eid):
    return make_entry(lid, eid, payload(lid, eid))


def new_ledgers(ens, store, n):
    meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
    return [store.create_ledger(meta)[0] for _ in range(n)]


def write(c, ledgers, first, batches, per_batch=10):
    """Batches of the ledgers interleaved in the entry logs, as concurrent writers leave them."""
    for b in range(batches):
        for lid in ledgers:
            start = first + b * per_batch
            assert c.add(lid, [entry(lid, e) for e in range(start, start + per_batch)], KEY) == Status.OK


def read_from(c, lid, first, upto, step):
    """Entries first..upto-1 in reads of ``step``, each checked byte for byte."""
    for at in range(first, upto, step):
        status, got = c.read(lid, at, max_count=min(step, upto - at))
        assert status == Status.OK, (lid, at, status)
        assert got == [entry(lid, e) for e in range(at, min(at + step, upto))], (lid, at)


def test_a_catch_up_reader_reads_every_entry_byte_for_byte_from_the_cache(ens):
    before = scrape(ens)
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        a, b = new_ledgers(ens, store, 2)
        write(c, [a, b], 0, 60)  # 600 entries each, interleaved over several entry logs
        read_from(c, a, 0, 600, 10)
        read_from(c, b, 0, 600, 7)
    assert poll(lambda: scrape(ens).get("bookie_read_ahead_hits_total", 0)
                - before.get("bookie_read_ahead_hits_total", 0) > 600, 10)
    m = scrape(ens)
    assert m["bookie_read_ahead_misses_total"] > before.get("bookie_read_ahead_misses_total", 0)
    assert 0 < m["bookie_read_ahead_cache_bytes"] <= 8 << 20


def test_a_request_gets_the_entries_it_asked_for_and_no_more(ens):
    """Read-ahead holds entries past the request and past the last one written: the answers
    are what was asked, an entry not yet written is NO_ENTRY, then its bytes once written
    (the log's tail was preallocated zeros, then appended to, after the read-ahead)."""
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        (lid,) = new_ledgers(ens, store, 1)
        write(c, [lid], 0, 10)
        read_from(c, lid, 0, 10, 10)  # reads ahead as far as the 100 entries written
        status, got = c.read(lid, 10, max_count=5)
        assert status == Status.OK and got == [entry(lid, e) for e in range(10, 15)]
        assert c.read(lid, 100)[0] == Status.NO_ENTRY
        for k in range(10):  # a tailer: each read ahead meets the log's end, then it grows
            write(c, [lid], 100 + 10 * k, 1)
            read_from(c, lid, 95 + 10 * k, 110 + 10 * k, 4)
        assert c.read(lid, 200)[0] == Status.NO_ENTRY


def test_cached_entries_of_a_deleted_ledger_are_never_served(ens):
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        doomed, kept = new_ledgers(ens, store, 2)
        write(c, [doomed, kept], 0, 30)
        read_from(c, doomed, 0, 20, 10)  # the cache holds doomed's entries 20.. by now
        store.remove_ledger(doomed)
        assert poll(lambda: c.read(doomed, 20)[0] == Status.NO_LEDGER, 30)
        for at in range(0, 300, 10):
            assert c.read(doomed, at, max_count=10)[0] in (Status.NO_LEDGER, Status.NO_ENTRY)
        read_from(c, kept, 0, 300, 10)


def test_entries_moved_by_compaction_while_cached_read_back_byte_for_byte(ens):
    ledger_dir = os.path.join(ens.bookie_dir(0), "ledgers", "current")
    with open_metadata(ens.metadata_uri) as store, RawBookieClient(ens.bookies[0]) as c:
        doomed, kept = new_ledgers(ens, store, 2)
        write(c, [doomed, kept], 0, 80)  # 400 KB: both ledgers in several logs
        read_from(c, kept, 0, 400, 10)  # kept's read-ahead spans, of logs compaction rewrites
        logs_before = set(glob.glob(os.path.join(ledger_dir, "*.log")))
        store.remove_ledger(doomed)
        assert poll(lambda: c.read(doomed, 0)[0] == Status.NO_LEDGER, 30)
        start = len(ens.log(0))
        o = ens.overrides(0)
        r = subprocess.run([sys.executable, "-m", "bookie", "shell", "triggergc", "--major",
                            "--set", f"journalDirectory={o['journalDirectory']}",
                            "--set", f"ledgerDirectories={o['ledgerDirectories']}",
                            "--set", f"metadataServiceUri={o['metadataServiceUri']}"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert poll(lambda: "compaction done" in ens.log(0)[start:], 120), ens.log(0)[start:][-3000:]
        assert logs_before - set(glob.glob(os.path.join(ledger_dir, "*.log")))  # old logs gone
        time.sleep(1.5)  # the read worker's prune has run: the deleted logs' spans dropped
        read_from(c, kept, 0, 800, 10)
        read_from(c, kept, 0, 800, 33)
        assert c.read(doomed, 0)[0] == Status.NO_LEDGER


def test_a_bad_read_ahead_setting_is_one_line_naming_the_key():
    for setting, words in (("dbStorage_readAheadCacheMaxSizeMb=-1", "must be >= 0"),
                           ("dbStorage_readAheadCacheMaxSizeMb=600", "above half of workerMemoryLimitMB"),
                           ("dbStorage_readAheadCacheBatchSize=0", "must be >= 1")):
        r = subprocess.run([sys.executable, "-m", "bookie", "run", "--set", setting],
                           capture_output=True, text=True, timeout=60)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert setting.split("=")[0] in lines[0] and words in lines[0], lines[0]


def test_an_unset_cache_size_fits_a_small_memory_limit():
    from bookie.workers.config import BookieConfig
    conf = BookieConfig.from_mapping({"workerMemoryLimitMB": "100"}, check_dirs=False)
    assert conf.read_ahead_cache_max_size_bytes == 25 << 20
    conf = BookieConfig.from_mapping({}, check_dirs=False)
    assert conf.read_ahead_cache_max_size_bytes == 64 << 20
