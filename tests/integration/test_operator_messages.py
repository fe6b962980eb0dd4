"""What the operator reads (issue 35, item 5): a bad option of a shell verb shows that verb's
usage; ``bookie --help`` describes ``shell`` as it is; ``readledger 999`` names the missing
ledger once; an add refused by read-only bookies says read-only, with no CURVE hint."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.errors import BookKeeperError
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies


def bookie(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", *argv], capture_output=True,
                          text=True, timeout=120, **kw)


def test_a_bad_option_of_a_shell_verb_prints_that_verbs_usage():
    proc = bookie("shell", "listbookies", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: bookie shell listbookies"), proc.stderr
    assert "unrecognized arguments: --bogus" in proc.stderr
    proc = bookie("run", "--bogus")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: bookie run"), proc.stderr


def test_bookie_help_describes_the_shell_as_it_is():
    out = bookie("--help").stdout
    assert "format, list bookies and ledgers" not in out
    assert "safe-to-stop" in out and "healing" in out, out


def test_readledger_of_a_missing_ledger_names_it_once(tmp_path):
    uri = f"lmdb://{tmp_path / 'md'}"
    open_metadata(uri, create=True).close()
    proc = bookie("shell", "readledger", "999", "--metadata", uri)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "bookie shell: ledger 999 does not exist", proc.stderr


def test_an_add_refused_by_read_only_bookies_says_read_only(tmp_path):
    with LocalBookies(2, base_dir=str(tmp_path / "e")) as ens:
        with BookKeeper(ens.metadata_uri, addEntryTimeout=5) as bk:
            lh = bk.create_ledger(2, 2, 2, password=b"ro")
            lh.add_entry(b"before")
            ens.set_readonly(0, True)
            ens.set_readonly(1, True)
            deadline = time.monotonic() + 30  # the supervisors apply it within a moment
            with open_metadata(ens.metadata_uri) as store:
                while len(store.list_bookies(readonly=True)) < 2:
                    assert time.monotonic() < deadline, "bookies not read-only after 30 s"
                    time.sleep(0.05)
            with pytest.raises(BookKeeperError) as refused:
                lh.add_entry(b"after", timeout_s=60)
    message = str(refused.value)
    assert "read-only" in message and "CURVE" not in message, message


def test_readledger_with_a_wrong_password_gets_no_curve_hint(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        with BookKeeper(ens.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"right")
            lh.add_entry(b"x")
            lh.close()
        proc = bookie("shell", "readledger", str(lh.ledger_id), "--metadata", ens.metadata_uri,
                      "--password", "wrong")
    assert proc.returncode == 2, proc.stderr
    assert "password" in proc.stderr and "CURVE" not in proc.stderr, proc.stderr
