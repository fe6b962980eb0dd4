"""The package's prerm, run as root at every upgrade and removal, trusts the kernel, not the
bookie user's files (issue 33, item 3).

The script itself (systemd/debian/prerm) runs here without building the package, with
``BOOKIE_CONF`` naming a test bookie's configuration (``-m package`` runs it installed):

- a lock held by a process of the directories' owner that is no bookie, whose record names
  a pid of root's: that pid is not signalled, the holder neither, and prerm returns at once
  (before: SIGTERM to whatever pid the record named, and an upgrade failed for as long as
  anything held the lock);
- a "bookie run" of the owner that ignores SIGTERM: killed after the stop wait, prerm returns;
- a real bookie started by hand: stopped cleanly (SIGTERM), its lock released.

And ``gentoken --owner`` (postinst's way of making the admin token) never follows a link.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

import orjson
import pytest

from bookie.testing import LocalBookies

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
PRERM = os.path.join(REPO, "systemd", "debian", "prerm")
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def dirs():
    """A bookie's journal and ledger directories, nobody's (the package's bookie user)."""
    top = tempfile.mkdtemp(prefix="bk-prerm-", dir="/tmp")
    os.chmod(top, 0o755)
    journal, ledgers = os.path.join(top, "journal"), os.path.join(top, "ledgers")
    for d in (journal, ledgers):
        os.mkdir(d, 0o700)
        os.chown(d, NOBODY.pw_uid, NOBODY.pw_gid)
    conf = os.path.join(top, "bookie.conf")
    with open(conf, "w") as f:
        f.write(f"journalDirectory={journal}\nledgerDirectories={ledgers}\n")
    yield {"top": top, "journal": journal, "ledgers": ledgers, "conf": conf}
    shutil.rmtree(top, ignore_errors=True)


def nobodys_process(lock: str, record: dict, argv: tuple[str, ...] = (),
                    ignore_term: bool = False) -> subprocess.Popen:
    """A process that becomes nobody, takes ``lock`` (flock) and writes ``record`` into it."""
    code = ("import fcntl, os, signal, sys, time\n"
            f"os.setgroups([]); os.setgid({NOBODY.pw_gid}); os.setuid({NOBODY.pw_uid})\n"
            + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
            + "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.ftruncate(fd, 0); os.pwrite(fd, sys.argv[2].encode(), 0)\n"
            "print('held', flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, lock, orjson.dumps(record).decode(),
                             *argv], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def prerm(conf: str, wait_s: int = 60) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "BOOKIE_CONF": conf, "BOOKIE_STOP_WAIT_S": str(wait_s)}
    start = time.monotonic()
    r = subprocess.run(["sh", PRERM, "upgrade"], capture_output=True, text=True, timeout=120,
                       env=env)
    return r, time.monotonic() - start


def test_a_foreign_lock_holder_is_left_alone_and_the_pid_it_names_is_never_signalled(dirs):
    victim = subprocess.Popen(["sleep", "300"])  # root's, named in the record
    holder = nobodys_process(os.path.join(dirs["journal"], "bookie.lock"),
                             {"pid": victim.pid, "run_dir": "/tmp"})
    try:
        r, took_s = prerm(dirs["conf"])
        assert r.returncode == 0, r.stderr
        assert took_s < 10, took_s
        assert "left alone" in r.stderr and f"pid {holder.pid}" in r.stderr, r.stderr
        assert victim.poll() is None and holder.poll() is None
    finally:
        for p in (victim, holder):
            p.kill()
            p.wait()


def test_a_lock_file_that_is_a_link_is_not_looked_through(dirs, tmp_path):
    target = tmp_path / "roots"
    target.write_text("root's\n")
    os.symlink(target, os.path.join(dirs["ledgers"], "bookie.lock"))
    r, _ = prerm(dirs["conf"])
    assert r.returncode == 0, r.stderr
    assert target.read_text() == "root's\n"


def test_a_bookie_of_the_owner_that_ignores_sigterm_is_killed_and_prerm_returns(dirs):
    holder = nobodys_process(os.path.join(dirs["journal"], "bookie.lock"), {"pid": 1},
                             argv=("/usr/lib/bookie/bin/bookie", "run"), ignore_term=True)
    try:
        r, took_s = prerm(dirs["conf"], wait_s=2)
        assert r.returncode == 0, r.stderr
        assert took_s < 30, took_s
        assert f"stopping the bookie (pid {holder.pid})" in r.stderr
        assert "killed" in r.stderr
        assert holder.wait(timeout=10) != 0
    finally:
        holder.kill()
        holder.wait()


def test_a_bookie_started_by_hand_is_stopped_cleanly(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        o = ens.overrides(0)
        conf = tmp_path / "bookie.conf"
        conf.write_text(f"journalDirectory={o['journalDirectory']}\n"
                        f"ledgerDirectories={o['ledgerDirectories']}\n")
        r, _ = prerm(str(conf))
        assert r.returncode == 0, r.stderr
        assert "stopping the bookie" in r.stderr and "killed" not in r.stderr, r.stderr
        assert ens.procs[0].wait(timeout=30) == 0  # a clean stop: SIGTERM, not a kill
        assert "bookie stopped" in ens.log(0), ens.log(0)[-2000:]


def test_gentoken_owner_makes_the_users_private_token_and_never_follows_a_link(tmp_path):
    os.chmod(tmp_path, 0o755)
    target = tmp_path / "roots"
    target.write_text("root's\n")
    link = tmp_path / "admin.token"
    os.symlink(target, link)
    cmd = [sys.executable, "-m", "bookie", "shell", "gentoken", str(link), "--owner", "nobody"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "exists" in r.stderr, r.stderr
    assert os.stat(target).st_uid == 0 and target.read_text() == "root's\n"
    os.unlink(link)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    st = os.lstat(link)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (NOBODY.pw_uid, NOBODY.pw_gid, 0o600)
