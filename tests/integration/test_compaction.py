"""Compaction with a real bookie: interleaved ledgers, one deleted, its space comes back and the
other reads back byte for byte, before and after a restart (bookie.storage.compaction)."""

import glob
import os
import re
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

KEY = b"compaction-key"
CONF = {"gcWaitTime": 600_000, "logSizeLimit": 128 * 1024, "flushInterval": 50,
        "entryLogFilePreallocationEnabled": "false", "compactionRateByEntries": 0,
        "minorCompactionInterval": 0, "majorCompactionInterval": 0}


def wait(pred, timeout_s=60.0):
    return poll(pred, timeout_s)


def ledger_dir(ens, i=0):
    return os.path.join(ens.bookie_dir(i), "ledgers", "current")


def log_bytes(ens, i=0) -> int:
    """Disk space the entry logs take (blocks, as df counts them)."""
    return sum(os.stat(p).st_blocks * 512 for p in glob.glob(os.path.join(ledger_dir(ens, i), "*.log")))


def payload(ledger_id: int, entry_id: int, size: int = 1000) -> bytes:
    seed = f"{ledger_id}:{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


def write_interleaved(c, ledgers, batches, per_batch=10, size=1000):
    for b in range(batches):
        for lid in ledgers:
            entries = [make_entry(lid, b * per_batch + i, payload(lid, b * per_batch + i, size))
                       for i in range(per_batch)]
            assert c.add(lid, entries, KEY) == Status.OK
    return batches * per_batch


def read_all(c, lid, n):
    got = []
    while len(got) < n:
        status, entries = c.read(lid, len(got), max_count=n - len(got))
        assert status == Status.OK, (lid, len(got), status)
        got += entries
    return got


def check_ledger(c, lid, n, size=1000):
    got = read_all(c, lid, n)
    assert [bytes(e) for e in got] == [make_entry(lid, e, payload(lid, e, size)) for e in range(n)]


def triggergc(ens, i=0, *flags):
    """``bookie shell triggergc`` as an operator runs it, against bookie i's directories."""
    o = ens.overrides(i)
    cmd = [sys.executable, "-m", "bookie", "shell", "triggergc", *flags,
           "--set", f"journalDirectory={o['journalDirectory']}",
           "--set", f"ledgerDirectories={o['ledgerDirectories']}",
           "--set", f"metadataServiceUri={o['metadataServiceUri']}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def log_since(ens, i, start):
    return ens.log(i)[start:]


def wait_compaction_done(ens, i, start, timeout_s=120.0):
    ok = wait(lambda: "compaction done" in log_since(ens, i, start), timeout_s)
    assert ok, log_since(ens, i, start)[-3000:]
    line = [ln for ln in log_since(ens, i, start).splitlines() if "compaction done" in ln][-1]
    return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}


@pytest.fixture
def ens():
    port = free_port_pair("127.0.0.1")
    with LocalBookies(1, conf=dict(CONF, prometheusStatsHttpPort=port)) as e:
        e.metrics_port = port
        yield e


def scrape(ens) -> dict:
    """{sample name: value} of the bookie's /metrics (unlabelled samples)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ens.metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_deleted_ledger_space_comes_back_and_the_other_reads_back_after_restart(ens):
    with open_metadata(ens.metadata_uri) as store:
        meta = LedgerMetadata(1, 1, 1, fragments=[(0, [ens.bookies[0]])])
        doomed, _ = store.create_ledger(meta)
        kept, _ = store.create_ledger(meta)
        with RawBookieClient(ens.bookies[0]) as c:
            n = write_interleaved(c, [doomed, kept], batches=40)  # ~800 KB, ~6 logs half each
            logs_before = sorted(glob.glob(os.path.join(ledger_dir(ens), "*.log")))
            assert len(logs_before) >= 5
            time.sleep(0.3)  # a checkpoint syncs the logs (not needed for correctness)
            before = log_bytes(ens)
            store.remove_ledger(doomed)
            start = len(ens.log(0))
            r = triggergc(ens, 0, "--major")
            assert r.returncode == 0, r.stderr
            assert "asked bookie pid" in r.stdout and "major compaction" in r.stdout
            done = wait_compaction_done(ens, 0, start)
            assert int(done["logs_done"]) >= len(logs_before) - 2, done
            assert int(done["reclaimed_bytes"]) > 0
            assert wait(lambda: scrape(ens).get("bookie_compaction_logs_total", 0) >= int(done["logs_done"]))
            m = scrape(ens)
            assert m["bookie_compaction_major_runs_total"] >= 1 and m["bookie_compaction_logs_todo"] == 0
            assert m["bookie_compaction_bytes_reclaimed_total"] == int(done["reclaimed_bytes"])
            after = log_bytes(ens)
            # half the data was the deleted ledger's: at most ~60 % of the space stays taken
            assert after < before * 0.65, (before, after)
            assert c.read(doomed, 0)[0] == Status.NO_LEDGER
            check_ledger(c, kept, n)
            # the bookie goes on taking adds for the kept ledger, into the new logs' sequence
            assert c.add(kept, [make_entry(kept, n, payload(kept, n))], KEY) == Status.OK
    ens.stop(0)
    ens.start(0)
    with RawBookieClient(ens.bookies[0]) as c:
        check_ledger(c, kept, n + 1)
        assert c.read(doomed, 0)[0] == Status.NO_LEDGER
    assert "compaction recovered" not in ens.log(0)  # nothing was left half done


def test_triggergc_without_a_running_bookie_is_one_line_and_status_2(tmp_path):
    cmd = [sys.executable, "-m", "bookie", "shell", "triggergc", "--major",
           "--set", f"journalDirectory={tmp_path}", "--set", f"ledgerDirectories={tmp_path}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no bookie is running" in r.stderr
    assert "Traceback" not in r.stderr
