"""The index is a cache of the entry logs: a real bookie refuses to start on a deleted or damaged
index, naming the fix, and ``bookie shell rebuild-index`` restores it so that every entry reads
back byte for byte and every ledger rule (master key, fence, LAC) still holds.

Opt-in (``-m crash``, about a minute): every kind of ledger record over the raw wire protocol,
a damaged LMDB file, a log cut short.  The default run has the end-to-end case through the
client in tests/integration/test_rebuild_index.py."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

pytestmark = pytest.mark.crash

KEY = b"master-key-0123456789"
CONF = {"metadataServiceUri": "", "flushInterval": 50, "logSizeLimit": 65536}


def shell(ens, verb, *extra, ok=(0,)):
    """Run ``bookie shell VERB`` on bookie 0's directories in a process of its own."""
    cmd = [sys.executable, "-m", "bookie", "shell", verb]
    for k, v in ens.overrides(0).items():
        cmd += ["--set", f"{k}={v}"]
    proc = subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=300)
    assert proc.returncode in ok, proc.stderr
    return proc


def index_dir(ens):
    return os.path.join(ens.bookie_dir(0), "ledgers", "current", "index")


def write_ledgers(c):
    """Ledgers of every kind a rebuild must restore; returns {ledger: entries} and the
    ledgers' expected read-LAC answers."""
    written = {}
    # 1: many batches of varied sizes over several entry logs, an explicit LAC above them
    entries = [make_entry(1, i, bytes([i % 251]) * (i * 37 % 3000), lac=i - 1) for i in range(400)]
    for k in range(0, 400, 40):
        assert c.add(1, entries[k:k + 40], KEY) == Status.OK
    assert c.write_lac(1, 450, KEY) == Status.OK
    written[1] = entries
    # 2: fenced after two entries; a recovery add after the fence
    entries = [make_entry(2, i, b"two %d" % i, lac=i - 1) for i in range(3)]
    assert c.add(2, entries[:2], KEY) == Status.OK
    assert c.fence(2, KEY) == Status.OK
    assert c.add(2, entries[2:], KEY, recovery=True) == Status.OK
    written[2] = entries
    # 3: fenced before anything was written (a fence creates the ledger)
    assert c.fence(3, KEY) == Status.OK
    # 4: one entry sent twice with the same bytes (a resend): stored once (write-once entries)
    entries = [make_entry(4, 0, b"four")]
    assert c.add(4, entries, KEY) == Status.OK
    assert c.add(4, entries, KEY) == Status.OK
    written[4] = entries
    lacs = {lid: c.read_lac(lid) for lid in (1, 2, 3, 4)}
    return written, lacs


def check_everything(ens, written, lacs):
    with RawBookieClient(ens.bookies[0]) as c:
        for lid, entries in written.items():
            status, got = c.read(lid, 0, len(entries) + 5)
            assert status == Status.OK and got == entries, f"ledger {lid}"
        assert {lid: c.read_lac(lid) for lid in lacs} == lacs
        # key checks and fences hold
        assert c.add(1, [make_entry(1, 400, b"evil")], b"wrong-key") == Status.UNAUTHORIZED
        assert c.add(2, [make_entry(2, 3, b"late")], KEY) == Status.FENCED
        assert c.add(3, [make_entry(3, 0, b"late")], KEY) == Status.FENCED
        assert c.read(3, 0)[0] == Status.NO_ENTRY


def test_a_deleted_index_refuses_start_and_a_rebuild_restores_entries_fences_and_keys(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=CONF) as ens:
        with RawBookieClient(ens.bookies[0]) as c:
            written, lacs = write_ledgers(c)
        ens.stop(0)
        logs = [n for n in os.listdir(os.path.join(ens.bookie_dir(0), "ledgers", "current"))
                if n.endswith(".log")]
        assert len(logs) > 3  # the entries span several entry logs

        shutil.rmtree(index_dir(ens))
        with pytest.raises(LocalBookieError):
            ens.start(0)
        refusal = [line for line in ens.log(0).splitlines() if "refusing to start" in line]
        assert refusal and "does not exist" in refusal[-1]
        assert "bookie shell rebuild-index --conf FILE" in refusal[-1]

        proc = shell(ens, "rebuild-index")
        assert "rebuild-index: entry logs" in proc.stderr  # the progress line
        assert "index rebuilt" in proc.stdout and "404 entries" in proc.stdout
        # ledger 4 entry 0, added twice with the same bytes: entries are write-once, the second
        # add is answered OK and stores nothing, so no log holds it twice
        assert "(0 found twice" in proc.stdout

        ens.start(0)
        check_everything(ens, written, lacs)
        with RawBookieClient(ens.bookies[0]) as c:  # not fenced where it was not
            assert c.add(1, [make_entry(1, 400, b"more", lac=399)], KEY) == Status.OK
            written[1].append(make_entry(1, 400, b"more", lac=399))
            lacs[1] = c.read_lac(1)
        ens.stop(0)
        ens.start(0)  # and again after a restart (the rebuilt index replays like any other)
        check_everything(ens, written, lacs)


def test_a_damaged_index_is_refused_and_rebuilt_and_a_rebuild_refuses_a_running_bookie(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=CONF) as ens:
        with RawBookieClient(ens.bookies[0]) as c:
            written, lacs = write_ledgers(c)
        proc = shell(ens, "rebuild-index", ok=(2,))
        assert "in use" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        ens.stop(0)

        data = os.path.join(index_dir(ens), "data.mdb")
        with open(data, "r+b") as f:  # both meta pages and the first tree pages: junk
            f.write(os.urandom(4 * 4096))
        with pytest.raises(LocalBookieError):
            ens.start(0)
        refusal = [line for line in ens.log(0).splitlines() if "refusing to start" in line][-1]
        assert "rebuild-index" in refusal

        doc = json.loads(shell(ens, "rebuild-index", "--json").stdout)
        assert doc["entries"] == 404 and doc["ledgers"] == 4 and doc["fenced"] == 2
        assert not doc["salvaged_from_old_index"]  # its meta pages are junk: nothing to keep
        ens.start(0)
        check_everything(ens, written, lacs)


def test_an_index_pointing_past_a_log_tail_is_refused_naming_the_fix(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf=CONF) as ens:
        with RawBookieClient(ens.bookies[0]) as c:
            write_ledgers(c)
        ens.stop(0)
        ledgers = os.path.join(ens.bookie_dir(0), "ledgers", "current")
        newest = max(n for n in os.listdir(ledgers) if n.endswith(".log"))
        os.truncate(os.path.join(ledgers, newest), 64)  # the log loses its records
        with pytest.raises(LocalBookieError):
            ens.start(0)
        refusal = [line for line in ens.log(0).splitlines() if "refusing to start" in line][-1]
        assert f"{newest}" in refusal and "past the end" in refusal
        assert "bookie shell rebuild-index --conf FILE" in refusal


def test_killed_mid_load_then_index_lost_every_acknowledged_entry_comes_back(tmp_path):
    """SIGKILL under adds (unsynced log tails, a journal past LastLogMark), then the index is
    deleted: the rebuild indexes the logs' whole records and the start's replay adds the rest."""
    acked: dict[int, bytes] = {}
    stop = threading.Event()

    def writer(ens):
        with RawBookieClient(ens.bookies[0], timeout_s=5) as c:
            i = 0
            while not stop.is_set():
                batch = [make_entry(9, i + k, bytes([(i + k) % 251]) * ((i + k) * 13 % 1500),
                                    lac=i + k - 1) for k in range(20)]
                try:
                    if c.add(9, batch, KEY) != Status.OK:
                        return
                except Exception:  # noqa: BLE001 - the bookie was killed under us
                    return
                acked.update((i + k, e) for k, e in enumerate(batch))
                i += 20

    with LocalBookies(1, base_dir=str(tmp_path / "e"),
                      conf={**CONF, "flushInterval": 200}) as ens:
        t = threading.Thread(target=writer, args=(ens,))
        t.start()
        deadline = time.monotonic() + 60
        while len(acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        ens.kill(0)
        stop.set()
        t.join(30)
        assert len(acked) >= 2000
        shutil.rmtree(index_dir(ens))
        shell(ens, "rebuild-index")
        ens.start(0)
        with RawBookieClient(ens.bookies[0]) as c:
            for first in range(0, max(acked) + 1, 500):
                status, got = c.read(9, first, 500)
                want = [acked[e] for e in range(first, min(first + 500, max(acked) + 1))]
                assert status == Status.OK and got[:len(want)] == want
