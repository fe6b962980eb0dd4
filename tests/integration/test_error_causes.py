"""Errors that name their real cause and what to do (each against real bookies, stores and
sockets): a CURVE bookie that does not admit the client, a reader's key that adds, bookieinfo
with a bookie that does not answer, another user's metadata store, a privileged port."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import zmq.auth

from bookie.client import BookKeeper
from bookie.client.errors import BookKeeperError, UnauthorizedError
from bookie.metadata import open_metadata
from bookie.testing import LocalBookies
from as_user import run_as

PASSWORD = b"causes"


@pytest.fixture(scope="module")
def curve_bookie(tmp_path_factory):
    """One CURVE bookie; ``keys``: name -> (public, secret) files; rita is enrolled as a reader,
    walt as a writer."""
    root = tmp_path_factory.mktemp("curve")
    keys = {name: zmq.auth.create_certificates(str(root), name)
            for name in ("bookie", "rita", "walt")}
    for role, name in (("reader", "rita"), ("writer", "walt")):
        os.makedirs(root / "clients" / role)
        shutil.copy(keys[name][0], root / "clients" / role / f"{name}.key")
    conf = {"curveSecretKeyFile": keys["bookie"][1],
            "curveClientKeysDirectory": str(root / "clients")}
    with LocalBookies(1, base_dir=str(root / "e"), conf=conf) as ens:
        yield ens, keys


def test_a_client_the_curve_bookie_does_not_admit_is_told_so(curve_bookie):
    ens, _ = curve_bookie
    with BookKeeper(ens.metadata_uri, addEntryTimeout=2) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        with pytest.raises(BookKeeperError) as failed:
            lh.add_entry(b"x", timeout_s=60)
    message = str(failed.value)
    assert "CURVE" in message and "curveSecretKeyFile" in message, message
    assert "start more bookies" not in message, message  # issue 39 item 9


def test_a_readers_key_that_adds_is_not_told_its_password_is_wrong(curve_bookie):
    ens, keys = curve_bookie
    with BookKeeper(ens.metadata_uri, curveSecretKeyFile=keys["rita"][1],
                    curveServerKeys=keys["bookie"][0], addEntryTimeout=5) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        with pytest.raises(UnauthorizedError) as refused:
            lh.add_entry(b"x", timeout_s=60)
    message = str(refused.value)
    assert "wrong password" not in message, message
    assert "reader" in message and "writer/" in message, message


def test_bookieinfo_without_an_answer_exits_non_zero_naming_curve(curve_bookie):
    ens, keys = curve_bookie
    cmd = [sys.executable, "-m", "bookie", "shell", "bookieinfo", "--metadata", ens.metadata_uri]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "no answer" in proc.stdout
    assert "did not answer" in proc.stderr and "CURVE" in proc.stderr
    proc = subprocess.run(cmd + ["--set", f"curveSecretKeyFile={keys['walt'][1]}",
                                 "--set", f"curveServerKeys={keys['bookie'][0]}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "GiB" in proc.stdout, (proc.stdout, proc.stderr)


@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path is root's own, 0700)."""
    d = tempfile.mkdtemp(prefix="bk-cause-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_another_users_metadata_store_is_a_permission_problem_not_a_missing_store(shared_dir):
    path = os.path.join(shared_dir, "metadata")
    open_metadata(f"lmdb://{path}", create=True).close()  # root's, 0700, as the bookie's is its
    proc = run_as("nobody", "shell", "listbookies", "--metadata", f"lmdb://{path}")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "permission denied" in proc.stderr and "sudo -u root" in proc.stderr
    assert "metaformat" not in proc.stderr


def test_a_privileged_port_as_non_root_names_the_permission_and_the_port(shared_dir):
    os.chown(shared_dir, 65534, 65534)
    journal, ledgers = os.path.join(shared_dir, "journal"), os.path.join(shared_dir, "ledgers")
    for d in (journal, ledgers):
        os.makedirs(d)
        os.chown(d, 65534, 65534)
    proc = run_as("nobody", "run", "--set", "bookiePort=181", "--set", f"journalDirectory={journal}",
                  "--set", f"ledgerDirectories={ledgers}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    refusal = [line for line in proc.stderr.splitlines() if "refusing to start" in line]
    assert refusal, proc.stderr[-2000:]
    assert "permission denied" in refusal[-1] and "bookiePort=181" in refusal[-1], refusal
    assert "in use" not in refusal[-1]


def test_a_curve_bookie_says_at_start_what_it_enrols(curve_bookie):
    ens, _ = curve_bookie
    line = [x for x in ens.log(0).splitlines() if "client sockets under CURVE" in x]
    assert line and "2 client keys enrolled (1 reader, 1 writer" in line[0], ens.log(0)[-2000:]
