"""BookKeeper's names where operators reach first (issue 35): ``clusterinfo``, ``cookie_generate``
/ ``cookie_create`` / ``cookie_update`` over a real embedded store, the ``rebuild-db-*`` names of
rebuild-index, and BookKeeper's exact spellings of three client keys that mean nothing here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bookie.client.config import ClientConfig
from bookie.metadata import open_metadata


def shell(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", "shell", *argv], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def store_uri(tmp_path):
    uri = f"lmdb://{tmp_path / 'md'}"
    open_metadata(uri, create=True).close()
    return uri


def test_clusterinfo_prints_bookkeepers_fields(store_uri):
    proc = shell("clusterinfo", "--metadata", store_uri, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["totalBookiesCount"] == 0 and info["auditorElected"] is False, info
    assert set(info) == {"auditorElected", "auditorId", "clusterUnderReplicated",
                         "ledgerReplicationEnabled", "totalBookiesCount", "writableBookiesCount",
                         "readonlyBookiesCount", "unavailableBookiesCount"}
    text = shell("clusterinfo", "--metadata", store_uri).stdout
    assert "auditorElected: false" in text and "totalBookiesCount: 0" in text, text


def test_cookie_generate_create_update_round(store_uri, tmp_path):
    with open_metadata(store_uri) as store:
        instance = store.instance_id()
    out = tmp_path / "bk-9.cookie"
    proc = shell("cookie_generate", "bk-9", "-j", str(tmp_path / "j"), "-l",
                 f"{tmp_path / 'l1'},{tmp_path / 'l2'}", "-o", str(out), "--metadata", store_uri)
    assert proc.returncode == 0, proc.stderr
    cookie = json.loads(out.read_text())
    assert cookie["bookie_id"] == "bk-9" and cookie["instance_id"] == instance, cookie
    assert cookie["ledger_dirs"] == [str(tmp_path / "l1"), str(tmp_path / "l2")], cookie
    assert cookie["index_dirs"] == cookie["ledger_dirs"]

    assert shell("cookie_update", "bk-9", "-cf", str(out), "--metadata", store_uri).returncode == 1
    assert shell("cookie_create", "bk-9", "-cf", str(out), "--metadata", store_uri).returncode == 0
    again = shell("cookie_create", "bk-9", "-cf", str(out), "--metadata", store_uri)
    assert again.returncode == 2 and "cookie_update" in again.stderr, again.stderr
    got = json.loads(shell("cookie_get", "bk-9", "--metadata", store_uri, "--json").stdout)
    assert got["cookie"] == cookie

    cookie["ledger_dirs"] = [str(tmp_path / "l3")]
    out.write_text(json.dumps(cookie))
    assert shell("cookie_update", "bk-9", "-cf", str(out), "--metadata", store_uri).returncode == 0
    got = json.loads(shell("cookie_get", "bk-9", "--metadata", store_uri, "--json").stdout)
    assert got["cookie"]["ledger_dirs"] == [str(tmp_path / "l3")]

    wrong = shell("cookie_update", "bk-8", "-cf", str(out), "--metadata", store_uri)
    assert wrong.returncode == 2 and "not of bk-8" in wrong.stderr, wrong.stderr
    cookie["instance_id"] = "another-cluster"
    out.write_text(json.dumps(cookie))
    other = shell("cookie_update", "bk-9", "-cf", str(out), "--metadata", store_uri)
    assert other.returncode == 2 and "instance" in other.stderr, other.stderr


@pytest.mark.parametrize("name", ["rebuild-db-ledger-locations-index", "rebuild-db-ledgers-index"])
def test_bookkeepers_rebuild_db_names_are_rebuild_index(name):
    proc = shell(name, "--help")
    assert proc.returncode == 0 and "--fence-all" in proc.stdout, proc.stderr


@pytest.mark.parametrize("key", ["stickyReadSEnabled", "clientTcpUserTimeoutMillis",
                                 "nettyUsePooledBuffers"])
def test_bookkeepers_own_client_key_spellings_are_accepted_as_ignored(key):
    conf = ClientConfig.build(**{key: "true" if "Enabled" in key or "Buffers" in key else "5"})
    assert key in conf.ignored_keys


def test_metaformat_force_asks_when_stdin_is_not_a_terminal(store_uri):
    with open_metadata(store_uri) as store:
        store.write_cookie("bk-1", b"{}")
    for answer in ("", "n\n"):  # end of input, and a no: nothing wiped
        proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "metaformat", "-force",
                               "--metadata", store_uri], input=answer, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 1 and "Wipe it?" in proc.stdout + proc.stderr, proc
        with open_metadata(store_uri) as store:
            assert store.read_cookie("bk-1")[0] == b"{}"
    proc = shell("metaformat", "-nonInteractive", "-force", "--metadata", store_uri)
    assert proc.returncode == 0, proc.stderr
