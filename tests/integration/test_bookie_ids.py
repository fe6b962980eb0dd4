"""Stable bookie ids (``bookieId``, BookKeeper's BP-41) with real bookies and real commands.

Two bookies run as ``bk-a`` and ``bk-b``: ledgers written to them name the ids; both are
stopped and started again on other ports (bk-b on another address too) with the same directories, and everything written
before the move reads back byte for byte, through a client opened before the move, a new
client and ``bookie shell readledger``.  ``listbookies`` shows each id with its address now
and its location.  A malformed id, an id shaped like another bookie's address and an id that
another bookie's cookie holds are each refused at start in one line, exit status 2.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys

import orjson
import pytest

from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

IDS = ["bk-a", "bk-b"]
PASSWORD = b"ids"


def bookie(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def payload(n: int) -> bytes:
    return os.urandom(16) + b"entry %d " % n + bytes(range(256)) * (n % 3)


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """Two id-named bookies; a ledger written to both; both moved to new ports since, bk-b
    to another host address as well (127.0.0.2).

    Yields (ensemble, ledger id, entries written, ports before, a client opened before the
    move)."""
    base = str(tmp_path_factory.mktemp("ids"))
    ens = LocalBookies(2, base_dir=base, bookie_ids=IDS, conf={"bookieLocation": "/dc1/r1"},
                       admin_http=True)
    ens.__enter__()
    try:
        bk = BookKeeper(ens.metadata_uri)
        lh = bk.create_ledger(2, 2, 2, password=PASSWORD)
        written = [payload(n) for n in range(40)]
        for data in written:
            lh.add_entry(data)
        lh.close()
        before = list(ens.ports)
        for i in range(2):
            ens.stop(i)
        ens.hosts[1] = "127.0.0.2"  # bk-b moves to another address (of the loopback) too
        for i in range(2):
            ens.ports[i] = free_port_pair(ens.hosts[i])
        for i in range(2):
            ens.start(i, wait=False)
        for i in range(2):
            ens.wait_serving(i)
        yield ens, lh.ledger_id, written, before, bk
        bk.close()
    finally:
        ens.close()


def test_ensembles_and_cookies_name_the_bookie_id_not_an_address(moved):
    ens, ledger_id, _, before, _ = moved
    assert ens.ports != before
    with open_metadata(ens.metadata_uri) as store:
        meta, _ = store.read_ledger(ledger_id)
        assert [sorted(e) for _, e in meta.fragments] == [IDS]
        assert sorted(store.list_bookies()) == IDS
        for i, bookie_id in enumerate(IDS):
            assert orjson.loads(store.read_cookie(bookie_id)[0])["bookie_id"] == bookie_id
            with open(os.path.join(ens.bookie_dir(i), "journal", "current", "cookie"), "rb") as f:
                assert orjson.loads(f.read())["bookie_id"] == bookie_id
            info = store.bookie_info(bookie_id)
            assert (info["host"], info["add_port"]) == (ens.hosts[i], ens.ports[i])


def test_a_moved_bookie_serves_what_was_written_before_the_move(moved):
    ens, ledger_id, written, _, old_client = moved
    # the client that wrote it, opened before the move: finds the bookies where they are now
    rh = old_client.open_ledger(ledger_id, password=PASSWORD)
    assert [e.data for e in rh.read_entries(0, len(written) - 1)] == written
    with BookKeeper(ens.metadata_uri) as bk:
        rh = bk.open_ledger(ledger_id, password=PASSWORD)
        assert rh.last_add_confirmed == len(written) - 1
        assert [e.data for e in rh.read_entries(0, len(written) - 1)] == written


def test_readledger_through_the_client_reads_a_moved_bookie(moved):
    ens, ledger_id, written, _, _ = moved
    r = bookie("shell", "readledger", str(ledger_id), "--metadata", ens.metadata_uri,
               "--password", PASSWORD.decode(), "--json")
    assert r.returncode == 0, r.stderr
    entries = orjson.loads(r.stdout)["entries"]
    assert [bytes.fromhex(e["data_hex"]) for e in entries] == written


def test_listbookies_shows_each_id_with_its_address_now_and_its_location(moved):
    ens, _, _, before, _ = moved
    r = bookie("shell", "setrack", "bk-b", "/dc2/r9", "--metadata", ens.metadata_uri)
    assert r.returncode == 0, r.stderr
    r = bookie("shell", "listbookies", "--metadata", ens.metadata_uri)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"bk-a address=127.0.0.1:{ens.ports[0]} location=/dc1/r1",
        f"bk-b address=127.0.0.2:{ens.ports[1]} location=/dc2/r9"]
    assert not any(str(p) in r.stdout for p in before)
    r = bookie("shell", "listbookies", "-a", "--json", "--metadata", ens.metadata_uri)
    doc = orjson.loads(r.stdout)
    assert doc["writable"] == IDS and doc["readonly"] == []
    assert doc["bookies"][0] == {"bookie_id": "bk-a", "address": f"127.0.0.1:{ens.ports[0]}",
                                 "location": "/dc1/r1", "readonly": False}


def test_the_admin_api_names_each_bookies_registered_host(moved):
    ens = moved[0]
    conn = http.client.HTTPConnection("127.0.0.1", ens.http_ports[0], timeout=30)
    try:
        conn.request("GET", "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true")
        r = conn.getresponse()
        assert r.status == 200
        assert orjson.loads(r.read()) == {"bk-a": "127.0.0.1", "bk-b": "127.0.0.2"}
    finally:
        conn.close()


def run_refused(tmp_path, **keys) -> str:
    """``bookie run`` with a small configuration plus ``keys``: must be refused with exit
    status 2 in one line; returns the output."""
    for name in ("journal", "ledgers"):
        (tmp_path / name).mkdir(exist_ok=True)
    conf = {"journalDirectory": str(tmp_path / "journal"),
            "ledgerDirectories": str(tmp_path / "ledgers"), "journalRingSizeMB": "8",
            "indexMapSizeMB": "64", "journalPreAllocSizeMB": "1",
            "bookiePort": str(free_port_pair("127.0.0.1")), "metadataServiceUri": "", **keys}
    r = bookie("run", *[a for k, v in conf.items() for a in ("--set", f"{k}={v}")])
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out
    return out


def test_a_malformed_bookie_id_is_refused_in_one_line(tmp_path):
    """(Every rule, in process: tests/unit/test_bookie_ids.py.)"""
    out = run_refused(tmp_path, bookieId="bk/1")
    assert "bookieId" in out and len(out.strip().splitlines()) == 1, out
    assert not os.path.exists(tmp_path / "journal" / "current")  # nothing stamped


def test_a_bookie_id_shaped_like_another_address_is_refused(tmp_path):
    out = run_refused(tmp_path, bookieId="127.0.0.1:4000")
    assert "refusing to start" in out and "looks like the address of another bookie" in out
    assert "bookieId=127.0.0.1:4000" in out


def test_an_id_another_bookie_holds_is_refused(moved, tmp_path):
    """bk-a runs (and its cookie is in the store): a second bookie, other directories, the
    same id, is refused before it registers; bk-a stays registered where it was."""
    ens = moved[0]
    out = run_refused(tmp_path, bookieId="bk-a", metadataServiceUri=ens.metadata_uri,
                      registrationLeaseMs="1000")
    assert "another cookie for bk-a" in out, out
    with open_metadata(ens.metadata_uri) as store:
        assert store.bookie_info("bk-a")["add_port"] == ens.ports[0]


def test_on_zookeeper_a_bookie_id_registers_and_survives_a_move(tmp_path, zk_uri):
    with LocalBookies(1, metadata_uri=zk_uri, base_dir=str(tmp_path / "e"),
                      bookie_ids=["bk-zk"]) as ens, BookKeeper(zk_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        written = [payload(n) for n in range(10)]
        for data in written:
            lh.add_entry(data)
        lh.close()
        assert bk.ledger_metadata(lh.ledger_id).fragments == [(0, ["bk-zk"])]
        ens.stop(0)
        ens.ports[0] = free_port_pair("127.0.0.1")
        ens.start(0)
        with open_metadata(zk_uri) as store:
            assert store.list_bookies() == ["bk-zk"]
            assert store.bookie_info("bk-zk")["add_port"] == ens.ports[0]
        rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)
        assert [e.data for e in rh.read_entries(0, 9)] == written


def test_shell_verbs_that_take_a_bookie_reach_id_named_bookies(tmp_path):
    """bookiesanity, bookieinfo and recover connect through the registrations: a lost
    ``bk-x`` is recovered onto the spare by reading ``bk-y``, wherever it listens."""
    ids = ["bk-x", "bk-y", "bk-z"]
    with LocalBookies(3, base_dir=str(tmp_path / "e"), bookie_ids=ids) as ens, \
            BookKeeper(ens.metadata_uri, allowEmptyPassword=True) as bk:
        uri = ens.metadata_uri
        r = bookie("shell", "bookiesanity", "--bookie", "bk-y", "--metadata", uri)
        assert (r.returncode, r.stdout) == (0, "bookiesanity: bk-y: OK\n"), r.stderr
        r = bookie("shell", "bookieinfo", "--json", "--metadata", uri)
        rows = orjson.loads(r.stdout)["bookies"]
        assert sorted(row["bookie"] for row in rows) == ids
        assert all(row["free_bytes"] > 0 for row in rows), rows
        ledgers = []
        for n in range(3):
            h = bk.create_ledger(2, 2, 2)
            for e in range(10):
                h.add_entry(b"%d-%d" % (n, e))
            h.close()
            ledgers.append(h.ledger_id)
        ens.kill(0)
        r = bookie("shell", "recover", "bk-x", "--json", "--metadata", uri)
        assert r.returncode == 0 and orjson.loads(r.stdout)["failed"] == [], (r.stdout, r.stderr)
        for n, ledger_id in enumerate(ledgers):
            assert not any("bk-x" in e for _, e in bk.ledger_metadata(ledger_id).fragments)
            h = bk.open_ledger(ledger_id)
            assert [x.data for x in h.read_entries(0, 9)] == [b"%d-%d" % (n, e) for e in range(10)]


def test_a_read_while_its_bookie_is_unregistered_fails_fast_and_then_finds_it_moved(tmp_path):
    """Issue 30: a bookie registered nowhere is down: a read of its only replica is not left
    waiting on the old address (something else may listen there) but fails at once as
    unreachable; once the bookie registers at its new address, the same handle reads it
    there.  (Before, the read waited on the old address until the move was seen.)"""
    import time
    ens = LocalBookies(1, base_dir=str(tmp_path), bookie_ids=["bk-m"])
    with ens:
        with BookKeeper(ens.metadata_uri, readTimeout=30) as bk:
            lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
            written = [payload(n) for n in range(10)]
            for data in written:
                lh.add_entry(data)
            lh.close()
            rh = bk.open_ledger(lh.ledger_id, password=PASSWORD)
            ens.stop(0)
            with pytest.raises(Exception, match="unreachable"):  # not a read timeout
                list(rh.read_entries(0, 9))
            ens.ports[0] = free_port_pair(ens.hosts[0])
            ens.start(0)
            deadline = time.monotonic() + 30
            while True:  # the registration watch tells the client where it is now
                try:
                    assert [e.data for e in rh.read_entries(0, 9)] == written
                    break
                except AssertionError:
                    raise
                except Exception:  # noqa: BLE001 - not seen registered yet
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
