"""Root's tools trust nothing the bookie's user plants (issue 33, items 2 and 7).

The suite runs as root (as CI does); the bookie's directories are handed to ``nobody``, who
plays the bookie's user turned hostile: it may put links and records anywhere in them.
``bookie shell`` verbs run as root then:

- ``readledger`` / ``localconsistencycheck`` with ``index/lock.mdb`` a link to a file of root's:
  root's file is unchanged (before: LMDB wrote its 4 KiB header over it);
- ``readledger`` on a stopped bookie whose ``lock.mdb`` is gone: it reads, and leaves no
  ``lock.mdb`` and nothing of root's behind (before: a root-owned ``lock.mdb`` the bookie could
  no longer open);
- ``triggergc`` against a lock held by nobody's process whose record names a run directory of
  root's, or whose ``gc.request`` is a link to root's file: refused in one line, root's file
  not truncated, nothing made in root's directory;
- ``genkey`` never writes through a dangling link.

And ``triggergc`` reaches a bookie whose run directory is in ``$RUNTIME_DIRECTORY`` (the unit's
``RuntimeDirectory=``, which the shell sees where it cannot see the unit's private /tmp).
"""

from __future__ import annotations

import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile

import orjson
import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies

NOBODY = pwd.getpwnam("nobody")
PASSWORD = b"root-tools"
ROOT_TEXT = b"root's own file, not to be touched\n" * 10


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """A stopped bookie with one ledger of 5 entries; its directories are nobody's."""
    base = tempfile.mkdtemp(prefix="bk-root-tools-", dir="/tmp")
    os.chmod(base, 0o755)
    ens = LocalBookies(1, base_dir=os.path.join(base, "e"))
    ens.start_all()
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(5):
            lh.add_entry(b"entry %d" % i)
        lh.close()
    ens.stop(0)
    chown_tree(base, NOBODY.pw_uid, NOBODY.pw_gid)
    ens.ledger_id = lh.ledger_id
    ens.top = base
    yield ens
    ens.close()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def root_file(tmp_path):
    path = tmp_path / "root-secret"  # in root's 0700 tmp_path: nobody cannot reach it
    path.write_bytes(ROOT_TEXT)
    return path


def chown_tree(top: str, uid: int, gid: int) -> None:
    os.chown(top, uid, gid)
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(parent, name), uid, gid, follow_symlinks=False)


def not_nobodys(top: str) -> list[str]:
    return [os.path.join(p, n) for p, dirs, files in os.walk(top) for n in dirs + files
            if os.lstat(os.path.join(p, n)).st_uid != NOBODY.pw_uid]


def shell(*args, overrides: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bookie", "shell", *args]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={v}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def index_dir(ens) -> str:
    return os.path.join(ens.bookie_dir(0), "ledgers", "current", "index")


def plant(link: str, target) -> None:
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(str(target), link)
    os.chown(link, NOBODY.pw_uid, NOBODY.pw_gid, follow_symlinks=False)


def test_read_only_verbs_never_write_through_a_planted_lock_mdb(stopped, root_file):
    lock = os.path.join(index_dir(stopped), "lock.mdb")
    plant(lock, root_file)
    try:
        for verb in (("readledger", str(stopped.ledger_id)), ("localconsistencycheck",)):
            r = shell(*verb, overrides=stopped.overrides(0))
            assert r.returncode == 2, (verb, r.stdout, r.stderr)
            assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr, r.stderr
            assert "lock.mdb" in r.stderr
            assert root_file.read_bytes() == ROOT_TEXT, verb
            assert os.stat(root_file).st_uid == 0
    finally:
        os.unlink(lock)


def test_read_only_verbs_read_as_root_and_leave_no_lock_file_behind(stopped):
    lock = os.path.join(index_dir(stopped), "lock.mdb")
    if os.path.lexists(lock):
        os.unlink(lock)
    r = shell("readledger", str(stopped.ledger_id), overrides=stopped.overrides(0))
    assert r.returncode == 0, r.stderr
    assert "entry 4" in r.stdout
    r = shell("localconsistencycheck", overrides=stopped.overrides(0))
    assert r.returncode == 0 and "OK: 5 entries" in r.stdout, r.stdout + r.stderr
    r = shell("ledger", str(stopped.ledger_id), overrides=stopped.overrides(0))
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(lock)
    assert not_nobodys(stopped.top) == []


def test_read_only_verbs_refuse_a_linked_index_directory(stopped, tmp_path):
    real = index_dir(stopped)
    moved = real + ".real"
    os.rename(real, moved)
    plant(real, moved)
    try:
        r = shell("readledger", str(stopped.ledger_id), overrides=stopped.overrides(0))
        assert r.returncode == 2 and "symbolic link" in r.stderr, r.stdout + r.stderr
    finally:
        os.unlink(real)
        os.rename(moved, real)


class Holder:
    """A process of nobody's holding the journal's directory lock with a record it wrote."""

    def __init__(self, journal_dir: str, record: dict):
        # started by root's interpreter (nobody may not run it), then nobody's in-process
        code = ("import fcntl, os, sys, time\n"
                f"os.setgroups([]); os.setgid({NOBODY.pw_gid}); os.setuid({NOBODY.pw_uid})\n"
                "fd = os.open(sys.argv[1], os.O_RDWR)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                "os.ftruncate(fd, 0); os.pwrite(fd, sys.argv[2].encode(), 0)\n"
                "print('held', flush=True); time.sleep(60)\n")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, os.path.join(journal_dir, "bookie.lock"),
             orjson.dumps(record).decode()],
            stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "held"

    def close(self):
        self.proc.kill()
        self.proc.wait()


def triggergc(ens) -> subprocess.CompletedProcess:
    o = ens.overrides(0)
    return shell("triggergc", overrides={k: o[k] for k in (
        "journalDirectory", "ledgerDirectories", "metadataServiceUri")})


def test_triggergc_refuses_a_run_directory_the_bookie_user_names_that_is_not_its_own(
        stopped):
    roots = tempfile.mkdtemp(prefix="roots-dir-", dir="/tmp")  # root's, which nobody may see
    os.chmod(roots, 0o755)
    journal = stopped.overrides(0)["journalDirectory"]
    holder = Holder(journal, {"pid": os.getpid(), "run_dir": roots})
    try:
        r = triggergc(stopped)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "not a directory of the bookie's user" in r.stderr and "Traceback" not in r.stderr
        assert os.listdir(roots) == []
    finally:
        holder.close()
        os.rmdir(roots)


def test_triggergc_never_truncates_what_gc_request_points_to(stopped, root_file):
    run_dir = os.path.join(stopped.top, "bk-run")
    os.mkdir(run_dir, 0o700)
    os.chown(run_dir, NOBODY.pw_uid, NOBODY.pw_gid)
    plant(os.path.join(run_dir, "gc.request"), root_file)
    journal = stopped.overrides(0)["journalDirectory"]
    holder = Holder(journal, {"pid": 1, "run_dir": run_dir})
    try:
        r = triggergc(stopped)
        assert r.returncode == 2, r.stdout + r.stderr
        assert "could not ask bookie pid 1" in r.stderr and "Traceback" not in r.stderr
        assert root_file.read_bytes() == ROOT_TEXT
    finally:
        holder.close()
        shutil.rmtree(run_dir)
    assert not_nobodys(stopped.top) == []


def test_triggergc_says_no_bookie_when_nobody_holds_the_lock_whatever_its_record(stopped):
    journal = stopped.overrides(0)["journalDirectory"]
    with open(os.path.join(journal, "bookie.lock"), "wb") as f:
        f.write(orjson.dumps({"pid": os.getpid(), "run_dir": "/tmp"}))
    r = triggergc(stopped)
    assert r.returncode == 2 and "no bookie is running" in r.stderr, r.stderr


def test_genkey_never_writes_through_a_dangling_link(tmp_path):
    target = tmp_path / "planted-target"
    os.symlink(target, tmp_path / "bk.key_secret")
    r = subprocess.run([sys.executable, "-m", "bookie", "shell", "genkey", "bk", "--dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exists" in r.stderr, r.stdout + r.stderr
    assert not target.exists() and not (tmp_path / "bk.key").exists()
    r = subprocess.run([sys.executable, "-m", "bookie", "shell", "genkey", "bk", "--dir",
                        str(tmp_path), "--force"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not target.exists() and not os.path.islink(tmp_path / "bk.key_secret")
    assert os.stat(tmp_path / "bk.key_secret").st_mode & 0o777 == 0o600


def test_triggergc_reaches_a_bookie_whose_run_directory_is_the_units_runtime_directory(
        tmp_path, monkeypatch, request):
    # Short, as /run/bookie is: a socket path under it must fit sun_path (107 bytes), which a
    # pytest tmp_path under xdist (popen-gwN) does not leave room for.
    runtime = pathlib.Path(tempfile.mkdtemp(prefix="bkrt-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(runtime, ignore_errors=True))
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(runtime))  # what systemd sets for the unit
    with LocalBookies(1, base_dir=str(tmp_path / "e"), conf={"gcWaitTime": 600_000}) as ens:
        journal = ens.overrides(0)["journalDirectory"]
        with open(os.path.join(journal, "bookie.lock"), "rb") as f:
            run_dir = orjson.loads(f.read())["run_dir"]
        assert os.path.dirname(run_dir) == str(runtime)
        monkeypatch.delenv("RUNTIME_DIRECTORY")  # the operator's shell has no such variable
        r = triggergc(ens)
        assert r.returncode == 0, r.stderr
        assert "asked bookie pid" in r.stdout
    assert os.listdir(runtime) == []  # a clean stop removes its run directory


def test_metadata_verbs_on_the_embedded_store_leave_nothing_of_roots(stopped):
    uri = stopped.metadata_uri
    assert uri.startswith("lmdb://")
    store_dir = uri[len("lmdb://"):]
    assert store_dir.startswith(stopped.top)
    for name in os.listdir(store_dir):
        if name.endswith("lock.mdb"):
            os.unlink(os.path.join(store_dir, name))  # LMDB makes it anew on open
    r = subprocess.run([sys.executable, "-m", "bookie", "shell", "listledgers", "--metadata", uri],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert str(stopped.ledger_id) in r.stdout
    assert not_nobodys(stopped.top) == []
