"""``bookie shell``: metaformat, listbookies, listledgers, ledgermetadata, bookieformat."""

from __future__ import annotations

import orjson
import pytest

from bookie.appliance.cli import main
from bookie.metadata import LedgerMetadata, open_metadata


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["shell", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(params=["lmdb", "zk"])
def uri(request, tmp_path):
    if request.param == "lmdb":
        return f"lmdb://{tmp_path}/md"
    return request.getfixturevalue("zk_uri")


def test_metaformat_then_lists_and_ledger_metadata(capsys, uri):
    assert run(capsys, "metaformat", "--metadata", uri, "--non-interactive")[0] == 0
    with open_metadata(uri) as store:
        ledger_id, _ = store.create_ledger(LedgerMetadata(
            2, 2, 1, custom={"owner": "me"}, fragments=[(0, ["h1:3181", "h2:3181"])]))
        store.register_bookie("h1:3181")
        store.register_bookie("h2:3181", readonly=True)
        assert run(capsys, "listbookies", "--metadata", uri)[1] == \
            "h1:3181 address=h1:3181 location=/default-region/default-rack\n"
        rc, out, _ = run(capsys, "listbookies", "--readonly", "--json", "--metadata", uri)
        assert orjson.loads(out) == {"readonly": ["h2:3181"], "bookies": [
            {"bookie_id": "h2:3181", "address": "h2:3181",
             "location": "/default-region/default-rack", "readonly": True}]}
    rc, out, _ = run(capsys, "listledgers", "--metadata", uri)
    assert out.split() == [str(ledger_id)]
    rc, out, _ = run(capsys, "ledgermetadata", str(ledger_id), "--metadata", uri)
    assert "state:          OPEN" in out and "from entry 0: h1:3181, h2:3181" in out
    rc, out, _ = run(capsys, "ledgermetadata", str(ledger_id), "--json", "--metadata", uri)
    doc = orjson.loads(out)
    assert doc["ledger_id"] == ledger_id and doc["custom"] == {"owner": "me"}
    assert doc["fragments"] == [[0, ["h1:3181", "h2:3181"]]]
    # Existing data: refused without --force, wiped with it.
    rc, _, err = run(capsys, "metaformat", "--metadata", uri, "--non-interactive")
    assert rc == 2 and "--force" in err
    assert run(capsys, "metaformat", "--metadata", uri, "--non-interactive", "--force")[0] == 0
    assert run(capsys, "listledgers", "--json", "--metadata", uri)[1].split() == \
        ["{", '"ledgers":', "[]", "}"]


def test_interactive_metaformat_asks_before_wiping(capsys, monkeypatch, tmp_path):
    uri = f"lmdb://{tmp_path}/md"
    with open_metadata(uri, create=True) as store:
        store.create_ledger(LedgerMetadata(1, 1, 1))
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert run(capsys, "metaformat", "--metadata", uri)[0] == 1
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert run(capsys, "metaformat", "--metadata", uri)[0] == 0
    with open_metadata(uri) as store:
        assert list(store.list_ledgers()) == []


def test_uri_comes_from_the_environment_or_is_a_clear_error(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("BOOKIE_METADATA_URI", raising=False)
    rc, _, err = run(capsys, "listledgers")
    assert rc == 2 and "BOOKIE_METADATA_URI" in err
    rc, _, err = run(capsys, "listledgers", "--metadata", "zk://nohostport")
    assert rc == 2 and "host:port" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setenv("BOOKIE_METADATA_URI", f"lmdb://{tmp_path}/md")
    rc, _, err = run(capsys, "listledgers")  # names no store yet: refused, and not created
    assert rc == 2 and f"metaformat --metadata lmdb://{tmp_path}/md" in err
    assert run(capsys, "metaformat", "--non-interactive")[0] == 0
    assert run(capsys, "listledgers") == (0, "", "")


def test_missing_ledger_is_one_line_error(capsys, tmp_path):
    open_metadata(f"lmdb://{tmp_path}/md", create=True).close()
    rc, _, err = run(capsys, "ledgermetadata", "42", "--metadata", f"lmdb://{tmp_path}/md")
    # a lookup that finds nothing exits 1, as every "not found" does (docs/appliance.md)
    assert rc == 1 and err.strip() == ("ledgermetadata: no ledger 42 in the store "
                                       "('bookie shell listledgers' lists them)")


def test_bookieformat_wipes_the_configured_directories(capsys, tmp_path):
    from bookie.workers.config import BookieConfig
    from bookie.storage.layout import check_or_stamp

    (tmp_path / "j").mkdir()
    (tmp_path / "l").mkdir()
    conf = tmp_path / "bk.conf"
    conf.write_text(f"journalDirectory={tmp_path}/j\nledgerDirectories={tmp_path}/l\n")
    check_or_stamp(BookieConfig.load(str(conf), {}))
    assert run(capsys, "bookieformat", "--conf", str(conf), "--non-interactive")[0] == 1
    assert (tmp_path / "j" / "current").exists()
    assert run(capsys, "bookieformat", "--conf", str(conf), "--non-interactive", "--force")[0] == 0
    assert not (tmp_path / "j" / "current").exists() and not (tmp_path / "l" / "current").exists()
