"""``bookie shell`` healing verbs: recover (dry run and real), decommissionbookie,
listunderreplicated, autorecovery --enable/--disable/--status, whoisauditor, triggeraudit,
deleteledger, simpletest, bookiesanity, bookieinfo, and ``--conf FILE`` for the store."""

from __future__ import annotations

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.underreplication import UnderReplication
from bookie.testing import LocalBookies


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["shell", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def uri(tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    open_metadata(uri, create=True).close()
    return uri


def test_the_switch_the_marks_the_auditor_and_the_trigger(capsys, uri, tmp_path):
    conf = tmp_path / "bk.conf"
    conf.write_text(f"metadataServiceUri={uri}\n")
    assert run(capsys, "autorecovery", "--status", "--conf", str(conf))[1] == \
        "autorecovery is enabled\n"
    assert run(capsys, "autorecovery", "--disable", "--metadata", uri)[1] == \
        "autorecovery is disabled\n"
    rc, out, _ = run(capsys, "autorecovery", "-status", "--json", "--metadata", uri)
    assert orjson.loads(out) == {"enabled": False}
    run(capsys, "autorecovery", "--enable", "--metadata", uri)
    with open_metadata(uri) as store:
        ur = UnderReplication(store)
        assert run(capsys, "listunderreplicated", "--metadata", uri)[1] == \
            "no ledger is marked under-replicated\n"
        ur.mark(4, ["h9:3181"])
        ur.mark(5, ["h8:3181"])
        ur.report_lost(6, {"reason": "no live copy"})
        rc, out, _ = run(capsys, "listunderreplicated", "--metadata", uri)
        assert out.splitlines() == ["4: missing h9:3181", "5: missing h8:3181",
                                    "6: LOST ENTRIES (no live copy)"]
        rc, out, _ = run(capsys, "listunderreplicated", "--json", "--missing-replica",
                         "h9:3181", "--metadata", uri)
        assert [r["ledger_id"] for r in orjson.loads(out)["underreplicated"]] == [4]
        assert run(capsys, "whoisauditor", "--metadata", uri)[0] == 1  # nobody stands
        ur.volunteer("h1:3181/42")
        assert run(capsys, "whoisauditor", "--metadata", uri)[1] == \
            "auditor: h1:3181 (worker h1:3181/42)\n"
        assert run(capsys, "triggeraudit", "--metadata", uri)[0] == 0
        assert ur.audit_trigger() == 0


def test_deleteledger_asks_unless_forced_and_refuses_an_unknown_ledger(capsys, uri, monkeypatch):
    with open_metadata(uri) as store:
        a, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, ["h1:3181"])]))
        b, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, ["h1:3181"])]))
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert run(capsys, "deleteledger", str(a), "--metadata", uri)[0] == 1
    assert run(capsys, "deleteledger", "-ledgerid", str(a), "-force", "--metadata", uri)[0] == 0
    assert run(capsys, "deleteledger", str(b), "-nonInteractive", "--metadata", uri)[0] == 0
    rc, _, err = run(capsys, "deleteledger", str(a), "--force", "--metadata", uri)
    assert rc == 2 and err.strip() == f"bookie shell: no ledger {a}"
    with open_metadata(uri) as store:
        assert list(store.list_ledgers()) == []


def test_simpletest_bookieinfo_bookiesanity_decommission_and_recover(capsys, tmp_path):
    with LocalBookies(4, base_dir=str(tmp_path / "b")) as lb:
        uri = lb.metadata_uri
        rc, out, _ = run(capsys, "simpletest", "--ensemble-size", "3", "--entries", "20",
                         "--metadata", uri)
        assert rc == 0 and out.startswith("simpletest: OK: 20 entries"), out
        rc, out, _ = run(capsys, "bookieinfo", "--json", "--metadata", uri)
        rows = orjson.loads(out)["bookies"]
        assert sorted(r["bookie"] for r in rows) == sorted(lb.bookies)
        assert all(0 < r["free_bytes"] <= r["total_bytes"] for r in rows)
        rc, out, _ = run(capsys, "bookiesanity", "--bookie", lb.bookies[1], "--metadata", uri)
        assert (rc, out) == (0, f"bookiesanity: {lb.bookies[1]}: OK\n")
        with BookKeeper(uri, allowEmptyPassword=True) as bk:
            ids = []
            for n in range(4):
                h = bk.create_ledger(2, 2, 2)
                for e in range(30):
                    h.add_entry(b"%d-%d" % (n, e))
                h.close()
                ids.append(h.ledger_id)

            def naming(bookie):
                return [i for i in ids
                        if any(bookie in ens for _, ens in bk.ledger_metadata(i).fragments)]

            # decommission a bookie that still runs: drained, verified, cookie removed
            gone = lb.bookies[3]
            rc, out, err = run(capsys, "decommissionbookie", gone, "--metadata", uri)
            assert rc == 0 and naming(gone) == [], (out, err)
            assert "its cookie is removed" in out
            lb.stop(3)
            # a bookie lost for good: a dry run changes nothing, recover heals
            lost = lb.bookies[0]
            lb.kill(0)
            before = {i: bk.ledger_metadata(i).fragments for i in ids}
            rc, out, err = run(capsys, "recover", lost, "--dry-run", "--metadata", uri)
            assert rc == 0 and out.startswith("recover (dry run):"), (out, err)
            assert {i: bk.ledger_metadata(i).fragments for i in ids} == before
            rc, out, err = run(capsys, "recover", lost, "--json", "--metadata", uri)
            doc = orjson.loads(out)
            assert rc == 0 and doc["failed"] == [] and naming(lost) == [], (doc, err)
            for n, ledger_id in enumerate(ids):
                h = bk.open_ledger(ledger_id)
                assert [x.data for x in h.read_entries(0, 29)] == \
                    [b"%d-%d" % (n, e) for e in range(30)]


def test_bookie_autorecovery_runs_the_worker_alone_and_stands_for_auditor(tmp_path, uri):
    import signal
    import subprocess
    import sys
    import time

    conf = tmp_path / "ar.conf"
    conf.write_text(f"metadataServiceUri={uri}\nbookiePort=3999\nregistrationLeaseMs=1000\n")
    proc = subprocess.Popen([sys.executable, "-m", "bookie", "autorecovery", "--conf", str(conf)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open_metadata(uri) as store:
            ur = UnderReplication(store)
            deadline = time.monotonic() + 60
            while ur.auditor() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ur.auditor()[1] == f"127.0.0.1:3999/{proc.pid}"
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                assert f.read().startswith(b"bookie[3999] autorecovery")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            assert ur.auditor() is None  # the vote is withdrawn on a clean stop
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert b"elected auditor" in proc.stderr.read()


def test_bookie_autorecovery_without_a_store_is_one_line_and_status_2(capsys, tmp_path):
    conf = tmp_path / "none.conf"
    conf.write_text("bookiePort=3999\n")
    assert main(["autorecovery", "--conf", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no metadata store" in err


def test_updatecookie_moves_a_stopped_bookie_to_a_new_id_and_it_starts_again(capsys, tmp_path):
    from bookie.workers.ports import free_port_pair

    base = str(tmp_path / "b")
    with LocalBookies(1, base_dir=base) as lb:
        old_id, overrides = lb.bookies[0], lb.overrides(0)
    new_port = free_port_pair("127.0.0.1")
    overrides["bookiePort"] = str(new_port)
    conf = tmp_path / "bookie.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in overrides.items()))
    rc, out, _ = run(capsys, "updatecookie", "--list", "--conf", str(conf))
    assert rc == 0 and f"cookie of {old_id}" in out
    rc, out, err = run(capsys, "updatecookie", "--conf", str(conf))
    assert rc == 0 and "cookie updated (bookie_id)" in out, (out, err)
    with open_metadata(overrides["metadataServiceUri"]) as store:
        assert store.read_cookie(f"127.0.0.1:{new_port}")
    with LocalBookies(1, base_dir=base) as lb:  # comes back on the port in its cookie
        assert lb.bookies == [f"127.0.0.1:{new_port}"]
    rc, _, err = run(capsys, "updatecookie", "--delete", "--conf", str(conf))
    assert rc == 2 and "--force" in err
