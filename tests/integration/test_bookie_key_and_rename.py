"""A bookie's key and id change only on purpose, and a rename loses nothing (issue 30).

Real bookies (``LocalBookies``), real cookies and an embedded store: a key file that changed
or vanished against the cookie refuses the start, naming ``rotatekey``; ``rotatekey`` makes
the change and clients pin the new key; ``updatecookie`` with ``bookiePort=0`` keeps the
cookie's id; the documented rename (``updatecookie`` with the new id, then ``updateledgers``)
keeps a write-quorum-1 ledger readable.
"""

from __future__ import annotations

import os

import pytest

from bookie.appliance.cli import main
from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.storage import server_key
from bookie.storage.layout import KEY_FILE, PUBLIC_KEY_FIELD, cookie_in, current_dir
from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError
from bookie.testing.rawclient import RawBookieClient
from bookie.workers.ports import free_port_pair

PW = b"rename"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["shell", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def conf_file(tmp_path, overrides: dict, **changes) -> str:
    path = tmp_path / "bookie.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in {**overrides, **changes}.items()))
    return str(path)


def test_a_changed_or_vanished_key_refuses_the_start_until_rotatekey(capsys, tmp_path):
    base = str(tmp_path / "b")
    with LocalBookies(1, base_dir=base) as lb:
        overrides = lb.overrides(0)
        key_path = os.path.join(current_dir(lb.journal_dirs(0)[0]), KEY_FILE)
        first = cookie_in(lb.journal_dirs(0)[0])[PUBLIC_KEY_FIELD]
        assert oct(os.stat(key_path).st_mode & 0o777) == "0o600"
        assert first not in lb.log(0)  # the key is never logged
        with open_metadata(lb.metadata_uri) as store:
            assert store.bookie_info(lb.bookies[0])[PUBLIC_KEY_FIELD] == first
    server_key.write_new(key_path)  # replaced behind the bookie's back
    with pytest.raises(LocalBookieError, match="rotatekey"):
        LocalBookies(1, base_dir=base).__enter__()
    os.unlink(key_path)  # gone
    with pytest.raises(LocalBookieError, match="rotatekey"):
        LocalBookies(1, base_dir=base).__enter__()
    rc, out, err = run(capsys, "rotatekey", "--conf", conf_file(tmp_path, overrides))
    assert rc == 0 and "rotatekey: bookie" in out, (out, err)
    with LocalBookies(1, base_dir=base) as lb:
        second = cookie_in(lb.journal_dirs(0)[0])[PUBLIC_KEY_FIELD]
        assert second != first
        with open_metadata(lb.metadata_uri) as store:
            assert store.bookie_info(lb.bookies[0])[PUBLIC_KEY_FIELD] == second
        with RawBookieClient(lb.bookies[0], timeout_s=10) as raw:  # pins the new key
            assert raw.info()


def test_updatecookie_with_bookie_port_0_keeps_the_cookies_id(capsys, tmp_path):
    base = str(tmp_path / "b")
    with LocalBookies(1, base_dir=base) as lb:
        old_id, overrides = lb.bookies[0], lb.overrides(0)
    rc, out, err = run(capsys, "updatecookie", "--conf", conf_file(tmp_path, overrides,
                                                                   bookiePort="0"))
    assert rc == 0 and "nothing changed" in out, (out, err)
    with open_metadata(overrides["metadataServiceUri"]) as store:
        assert store.read_cookie(old_id)
    with LocalBookies(1, base_dir=base) as lb:  # starts again: the same bookie
        assert lb.bookies == [old_id]


def test_the_documented_rename_keeps_a_write_quorum_1_ledger_readable(capsys, tmp_path):
    base = str(tmp_path / "b")
    with LocalBookies(2, base_dir=base) as lb:
        with BookKeeper(lb.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=PW)
            for e in range(20):
                lh.add_entry(b"only copy %d" % e)
            lh.close()
            old_id = lh.metadata.fragments[0][1][0]
        i = lb.bookies.index(old_id)
        overrides = lb.overrides(i)
    new_port = free_port_pair("127.0.0.1")
    new_id = f"127.0.0.1:{new_port}"
    conf = conf_file(tmp_path, overrides, bookiePort=str(new_port))
    rc, out, err = run(capsys, "updatecookie", "--conf", conf)
    assert rc == 0 and "updateledgers" in out, (out, err)
    rc, out, err = run(capsys, "updateledgers", "--conf", conf, "--from", old_id, "--to", new_id)
    assert rc == 0 and "in 1 ledger(s)" in out, (out, err)
    with LocalBookies(2, base_dir=base) as lb:
        assert lb.bookies[i] == new_id
        with BookKeeper(lb.metadata_uri) as bk:
            rh = bk.open_ledger(lh.ledger_id, password=PW)
            assert [bytes(e.data) for e in rh.read_entries(0, 19)] == \
                [b"only copy %d" % e for e in range(20)]
