"""Several journals (journalDirectories), as an operator meets them: the configuration's checks,
the shell tools that read journals, and the directory layout (a journal directory missing,
added, or swapped with another is refused at start in one line, exit status 2).

Real ``bookie run`` / ``bookie shell`` processes on real directories.  Ledger 2 goes to journal 0
and ledger 3 to journal 1 (ledger_id % 2: storage/journal_set.py).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from bookie.testing import LocalBookies
from bookie.workers.config import BookieConfig, ConfigError
from bookie_load import AddLoad


def bookie(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def sets(overrides: dict) -> list[str]:
    return [arg for k, v in overrides.items() for arg in ("--set", f"{k}={v}")]


def refusal(r: subprocess.CompletedProcess) -> str:
    """The one line a refused start or a refused configuration printed (asserts exit 2)."""
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if "warning" not in x]
    assert len(lines) == 1, r.stderr
    return lines[0]


# -- configuration -----------------------------------------------------------------------------

def test_journal_directories_give_the_journals_in_order_and_journal_directory_is_the_one_form(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    conf = BookieConfig.from_mapping({"journalDirectories": f"{a},{b}", "ledgerDirectories": str(a)})
    assert conf.journal_dirs == [str(a), str(b)] and conf.journal_dir == str(a)
    assert not any("journalDirectories" in w for w in conf.warnings)
    one = BookieConfig.from_mapping({"journalDirectory": str(a), "ledgerDirectories": str(a)})
    assert one.journal_dirs == [str(a)]
    # both set and agreeing (journalDirectories names journalDirectory alone) is accepted
    both = BookieConfig.from_mapping({"journalDirectory": str(a), "journalDirectories": str(a),
                                      "ledgerDirectories": str(a)})
    assert both.journal_dirs == [str(a)]
    # what the supervisor hands its workers reads back as the same journals
    again = BookieConfig.from_mapping(dict(line.split("=", 1) for line in
                                           conf.to_properties().splitlines()))
    assert again.journal_dirs == [str(a), str(b)]


def test_journal_directories_win_over_journal_directory_and_a_directory_twice_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    # both set and saying different things: journalDirectories wins, as in BookKeeper
    both = BookieConfig.from_mapping({"journalDirectory": str(b), "journalDirectories": f"{a},{b}",
                                      "ledgerDirectories": str(a)})
    assert both.journal_dirs == [str(a), str(b)] and both.journal_dir == str(a)
    other = BookieConfig.from_mapping({"journalDirectory": str(tmp_path / "nowhere"),
                                       "journalDirectories": str(a), "ledgerDirectories": str(a)})
    assert other.journal_dirs == [str(a)]
    other.check_directories()  # the journalDirectory not used is not checked either
    with pytest.raises(ConfigError, match="named twice"):
        BookieConfig.from_mapping({"journalDirectories": f"{a},{a}/", "ledgerDirectories": str(a)})


@pytest.mark.parametrize("case", ["twice", "missing"])
def test_a_bad_journal_configuration_is_one_line_and_exit_2(tmp_path, case):
    a, b, ledgers = tmp_path / "a", tmp_path / "b", tmp_path / "ledgers"
    for d in (a, b, ledgers):
        d.mkdir()
    o = {"ledgerDirectories": str(ledgers), "metadataServiceUri": "",
         "journalDirectories": f"{a},{b}"}
    if case == "twice":
        o["journalDirectories"] = f"{a},{a}"
    else:
        o["journalDirectories"] = f"{a},{tmp_path / 'nowhere'}"
    line = refusal(bookie("run", *sets(o)))
    assert "journalDirectories" in line
    assert {"twice": "named twice", "missing": "does not exist"}[case] in line
    assert not os.path.exists(a / "current")  # nothing stamped


# -- one bookie with two journals: tools and layout --------------------------------------------

@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A bookie with two journals that took adds on ledgers 2 and 3, then stopped cleanly;
    yields (its overrides for ``bookie run`` / ``bookie shell``, its journal directories, what
    its admin API answered while it ran: {path: document or text})."""
    base = str(tmp_path_factory.mktemp("journals"))
    j0, j1 = os.path.join(base, "bookie-0", "journal"), os.path.join(base, "bookie-0", "journal-b")
    with LocalBookies(1, base_dir=base, conf={"metadataServiceUri": "",
                                              "journalDirectories": f"{j0},{j1}"},
                      admin_http=True) as ens:
        loads = [AddLoad(ens.bookies[0], lid, batch=10, window=4) for lid in (2, 3)]
        for load in loads:
            load.start()
        deadline = time.monotonic() + 30
        while min(len(x.acked) for x in loads) < 100 and time.monotonic() < deadline:
            time.sleep(0.02)
        for load in loads:
            load.stop()
        assert min(len(x.acked) for x in loads) >= 100
        time.sleep(1.5)  # the journal workers publish their figures once a second
        answered = {path: _get(ens.http_ports[0], path) for path in (
            "/metrics", "/api/v1/bookie/last_log_mark", "/api/v1/bookie/list_disk_file")}
        o = {k: v for k, v in ens.overrides(0).items()
             if k in ("bookiePort", "ledgerDirectories", "journalDirectories", "metadataServiceUri",
                      "journalRingSizeMB", "indexMapSizeMB", "journalPreAllocSizeMB")}
        assert ens.stop(0) == 0
    yield o, [j0, j1], answered


def _get(port: int, path: str):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read().decode()
        assert r.status == 200, (path, r.status, body[:300])
        return body if path == "/metrics" else json.loads(body)
    finally:
        conn.close()


def test_metrics_and_admin_paths_speak_of_each_journal(stopped):
    o, (j0, j1), answered = stopped
    text = answered["/metrics"]
    for journal in ("0", "1"):  # per-journal labels; each journal took bytes
        line = next(x for x in text.splitlines()
                    if x.startswith(f'bookie_journal_bytes_total{{journal="{journal}"}}'))
        assert float(line.split()[-1]) > 0, line
        assert f'bookie_journal_sync_seconds_count{{journal="{journal}"}}' in text
    assert 'bookie_worker_up{role="journal-1"} 1.0' in text
    assert f'directory="{j1}",kind="journal"' in text  # disk figures of every journal directory
    marks = answered["/api/v1/bookie/last_log_mark"]
    assert list(marks) == [o["ledgerDirectories"]] and list(marks[o["ledgerDirectories"]]) == [j0, j1]
    files = answered["/api/v1/bookie/list_disk_file"]["journal files"]
    assert os.path.join(j0, "current") in files and os.path.join(j1, "current") in files


def test_readjournal_and_lastmark_read_every_journal(stopped):
    o, (j0, j1), _ = stopped
    r = bookie("shell", "readjournal", "--json", *sets(o))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    by_journal = {(rec["journal"], rec["ledger_id"]) for rec in doc["records"]}
    assert (0, 2) in by_journal and (1, 3) in by_journal
    assert (0, 3) not in by_journal and (1, 2) not in by_journal  # a ledger stays in its journal
    r = bookie("shell", "readjournal", "--json", "--journal", "1", *sets(o))
    assert {rec["ledger_id"] for rec in json.loads(r.stdout)["records"]} == {3}
    r = bookie("shell", "readjournal", "1", *sets(o))  # a file id alone is ambiguous here
    assert r.returncode == 2 and "--journal" in r.stderr
    r = bookie("shell", "lastmark", "--json", *sets(o))
    assert r.returncode == 0, r.stderr
    marks = json.loads(r.stdout)["journals"]
    assert [m["directory"] for m in marks] == [j0, j1]
    assert all(m["replay_from"] > 0 for m in marks)  # the clean stop checkpointed both


def _start_refused(o: dict) -> str:
    return refusal(bookie("run", *sets(o)))


def test_a_journal_directory_swapped_missing_or_added_is_refused_in_one_line(stopped, tmp_path):
    o, (j0, j1), _ = stopped
    # the configuration names them the other way round
    line = _start_refused({**o, "journalDirectories": f"{j1},{j0}"})
    assert "cookie does not match" in line and "journal_dir" in line
    # the disks are mounted the other way round (same paths, each holding the other journal)
    swap = os.path.join(str(tmp_path), "swap")
    os.rename(j0, swap), os.rename(j1, j0), os.rename(swap, j1)
    try:
        line = _start_refused(o)
        assert "holds journal 1 of this bookie" in line and "journal 0" in line
    finally:
        os.rename(j1, swap), os.rename(j0, j1), os.rename(swap, j0)
    # one journal fewer in the configuration
    line = _start_refused({**o, "journalDirectories": j0})
    assert "cookie does not match" in line and "journal_dirs" in line
    # a journal directory whose disk was replaced (empty)
    kept = os.path.join(str(tmp_path), "kept")
    shutil.move(os.path.join(j1, "current"), kept)
    try:
        line = _start_refused(o)
        assert j1 in line and "has no cookie" in line
    finally:
        shutil.move(kept, os.path.join(j1, "current"))


# -- disks ---------------------------------------------------------------------------------------

def test_a_full_second_journal_disk_turns_the_bookie_read_only_until_it_has_room(tmp_path):
    from bookie.testing.rawclient import RawBookieClient, make_entry
    from bookie.wire import Status
    from tmpfs import mounted_tmpfs

    base = tmp_path / "e"
    with mounted_tmpfs(tmp_path / "small-journal-disk", "8m") as disk:
        conf = {"metadataServiceUri": "", "diskCheckInterval": 200, "journalPreAllocSizeMB": 1,
                "journalDirectories": f"{base}/bookie-0/journal,{disk}"}
        with LocalBookies(1, base_dir=str(base), conf=conf) as ens:
            with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
                assert c.add(2, [make_entry(2, 0, b"before")], b"k") == Status.OK
                assert c.add(3, [make_entry(3, 0, b"before")], b"k") == Status.OK
                filler = os.path.join(disk, "filler")
                with open(filler, "wb") as f:  # what else shares the journal's disk
                    try:
                        while True:
                            f.write(b"\1" * (256 << 10))
                            f.flush()
                    except OSError:
                        pass
                deadline = time.monotonic() + 30
                while "disks full" not in ens.log(0) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert any("disk full" in x and f"directory={disk}" in x for x in ens.log(0).splitlines())
                assert "bookie is now read-only" in ens.log(0)
                # the whole bookie refuses adds, those of journal 0's ledgers too
                assert c.add(2, [make_entry(2, 1, b"during")], b"k") == Status.READ_ONLY
                os.unlink(filler)
                deadline = time.monotonic() + 30
                while "bookie is writable again" not in ens.log(0) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert c.add(3, [make_entry(3, 1, b"after")], b"k") == Status.OK
