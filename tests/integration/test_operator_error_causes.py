"""Errors that name their real cause (issue 35), each against a real command, store or bookie:
an invalid ``listeningInterface`` is refused in one line naming the key (not "port in use"),
an interface name (``lo``) is accepted and served on; a directory or a store behind a directory
the user may not enter is a permission problem, not a missing one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from bookie.client import BookKeeper
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from bookie.workers.interfaces import InterfaceError, interface_names, resolve_listening_interface
from as_user import run_as


def _run(tmp_path, *sets: str) -> subprocess.CompletedProcess:
    (tmp_path / "j").mkdir(exist_ok=True)
    (tmp_path / "l").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "bookie", "run", "--set", f"journalDirectory={tmp_path / 'j'}",
            "--set", f"ledgerDirectories={tmp_path / 'l'}",
            "--set", f"metadataServiceUri=lmdb://{tmp_path / 'md'}", "--set", "bookiePort=0"]
    for s in sets:
        argv += ["--set", s]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value", ["foo", "203.0.113.7", "999.1.1.1", "10.0.0.300", "eth0/24"])
def test_an_invalid_listening_interface_is_refused_naming_the_key(tmp_path, value):
    proc = _run(tmp_path, f"listeningInterface={value}")
    assert proc.returncode == 2, (proc.stdout, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "listeningInterface" in lines[0] and value in lines[0], lines
    assert "port" not in lines[0], lines


def test_interface_names_stand_for_their_addresses():
    assert resolve_listening_interface("lo") == "127.0.0.1"
    assert resolve_listening_interface("127.0.0.1") == "127.0.0.1"
    assert resolve_listening_interface("0.0.0.0") == "0.0.0.0"
    assert resolve_listening_interface("localhost") == "localhost"
    for name in interface_names():  # eth0 and the like: accepted wherever it has an address
        try:
            address = resolve_listening_interface(name)
        except InterfaceError as e:
            assert "has no address" in str(e)
        else:
            assert resolve_listening_interface(address) == address
    # read for another host: a name of no local interface is kept, an address is not checked
    assert resolve_listening_interface("bond7", on_this_host=False) == "bond7"
    assert resolve_listening_interface("203.0.113.7", on_this_host=False) == "203.0.113.7"
    with pytest.raises(InterfaceError):
        resolve_listening_interface("999.1.1.1", on_this_host=False)


def test_a_bookie_on_listening_interface_lo_serves(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf={"listeningInterface": "lo"}) as ens:
        assert ens.bookies[0].startswith("127.0.0.1:"), ens.bookies
        with BookKeeper(ens.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1, password=b"lo")
            assert lh.add_entry(b"on lo") == 0


@pytest.fixture
def hidden_dir():
    """A directory every user may enter, holding ``priv`` (root's, 0700) that others may not."""
    assert os.geteuid() == 0, "these tests run as root (as CI does) to act as another user"
    d = tempfile.mkdtemp(prefix="bk-cause-", dir="/tmp")
    os.chmod(d, 0o755)
    os.mkdir(os.path.join(d, "priv"), 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_store_behind_a_directory_the_user_may_not_enter_is_a_permission_problem(hidden_dir):
    path = os.path.join(hidden_dir, "priv", "metadata")
    open_metadata(f"lmdb://{path}", create=True).close()
    proc = run_as("nobody", "shell", "listbookies", "--metadata", f"lmdb://{path}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "permission denied" in proc.stderr and "may not enter" in proc.stderr, proc.stderr
    assert "metaformat" not in proc.stderr and "no metadata store" not in proc.stderr


def test_a_bookie_directory_the_user_may_not_enter_is_a_permission_problem(hidden_dir):
    journal, ledgers = (os.path.join(hidden_dir, "priv", x) for x in ("journal", "ledgers"))
    os.mkdir(journal)
    os.mkdir(ledgers)
    proc = run_as("nobody", "run", "--set", f"journalDirectory={journal}",
                  "--set", f"ledgerDirectories={ledgers}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "journalDirectory: permission denied" in proc.stderr, proc.stderr
    assert "does not exist" not in proc.stderr
