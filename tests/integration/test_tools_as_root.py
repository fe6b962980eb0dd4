"""Offline tools started as root leave the bookie's directories usable by the bookie's user.

A real bookie writes a ledger and stops; its directories (and the embedded metadata store) are
handed to ``nobody``, as the package hands /var/lib/bookie to ``bookie``; then ``rebuild-index``,
``updatecookie`` and ``bookieformat`` run as root (the suite runs as root, as CI does) and no file
under the directories may be root's afterwards.  Directories of two owners are refused in one
line naming them, exit status 2.  The bookie's start check names a permission problem (a
root-owned index) as one, instead of an index that "does not exist"."""

import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

PASSWORD = b"owner"
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def shared_dir():
    """A directory every user may enter (pytest's tmp_path is root's own, 0700)."""
    d = tempfile.mkdtemp(prefix="bk-owner-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def chown_tree(top: str, uid: int, gid: int) -> None:
    os.chown(top, uid, gid)
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(os.path.join(parent, name), uid, gid, follow_symlinks=False)


def owned_by_root(top: str) -> list[str]:
    found = []
    for parent, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(parent, name)
            if os.lstat(path).st_uid == 0:
                found.append(path)
    return found


def conf_file(directory: str, overrides: dict) -> str:
    path = os.path.join(directory, "bookie.conf")
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in overrides.items()))
    os.chmod(path, 0o644)
    return path


def shell(*args, overrides: dict, user=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bookie", "shell", *args]
    for k, v in overrides.items():
        cmd += ["--set", f"{k}={v}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, user=user)


def written_bookie(base: str) -> tuple[LocalBookies, int]:
    """A bookie with one closed ledger of 20 entries, stopped, its files nobody's."""
    ens = LocalBookies(1, base_dir=base)
    ens.start_all()
    with BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PASSWORD)
        for i in range(20):
            lh.add_entry(b"entry %d" % i)
        lh.close()
    ens.stop(0)
    chown_tree(base, NOBODY.pw_uid, NOBODY.pw_gid)
    return ens, lh.ledger_id


def read_back(ens: LocalBookies, ledger_id: int) -> list[bytes]:
    with BookKeeper(ens.metadata_uri) as bk:
        return [e.data for e in bk.open_ledger(ledger_id, password=PASSWORD).read_entries(0, 19)]


def test_rebuild_index_as_root_leaves_nothing_of_root_and_the_bookie_serves(shared_dir):
    ens, ledger_id = written_bookie(os.path.join(shared_dir, "e"))
    try:
        proc = shell("rebuild-index", overrides=ens.overrides(0))
        assert proc.returncode == 0, proc.stderr
        assert "20 entries" in proc.stdout
        assert owned_by_root(shared_dir) == []
        # The bookie here runs as root (the suite's interpreter is root's): its files go back
        # to it, as they would stay the bookie user's in the package; the rebuilt index serves.
        chown_tree(shared_dir, 0, 0)
        ens.start(0)
        assert read_back(ens, ledger_id) == [b"entry %d" % i for i in range(20)]
    finally:
        ens.close()


def test_updatecookie_as_root_writes_the_owners_private_cookie(shared_dir):
    ens, ledger_id = written_bookie(os.path.join(shared_dir, "e"))
    try:
        overrides = {**ens.overrides(0), "bookiePort": str(free_port_pair("127.0.0.1"))}
        proc = shell("updatecookie", "--conf", conf_file(shared_dir, overrides), overrides={})
        assert proc.returncode == 0, proc.stderr
        assert "cookie updated (bookie_id)" in proc.stdout
        assert owned_by_root(ens.base_dir) == []
        for name in ("cookie", "VERSION"):
            st = os.stat(os.path.join(overrides["journalDirectory"], "current", name))
            assert (st.st_uid, st.st_mode & 0o777) == (NOBODY.pw_uid, 0o600), name
    finally:
        ens.close()


def test_bookieformat_as_root_leaves_nothing_of_root(shared_dir):
    ens, _ = written_bookie(os.path.join(shared_dir, "e"))
    try:
        for d in ("journal", "ledgers"):  # the tool makes the directory locks afresh
            os.remove(os.path.join(ens.bookie_dir(0), d, "bookie.lock"))
        proc = shell("bookieformat", "-nonInteractive", "-force", overrides=ens.overrides(0))
        assert proc.returncode == 0, proc.stderr
        assert owned_by_root(shared_dir) == []
    finally:
        ens.close()


def test_directories_of_two_owners_are_refused_in_one_line_naming_them(shared_dir):
    journal, ledgers = os.path.join(shared_dir, "journal"), os.path.join(shared_dir, "ledgers")
    os.makedirs(journal)
    os.makedirs(ledgers)
    os.chown(journal, NOBODY.pw_uid, NOBODY.pw_gid)
    overrides = {"journalDirectory": journal, "ledgerDirectories": ledgers, "bookiePort": "3181"}
    proc = shell("bookieformat", "--non-interactive", "--force", overrides=overrides)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "nobody" in proc.stderr and "root" in proc.stderr and "sudo -u" in proc.stderr


# The bookie as its user: the interpreter here may live where nobody cannot read (root's home),
# so the child imports what the start check needs and then becomes nobody, as the package's
# bookie is its user from the start.  The refusal comes before any worker is started.
AS_NOBODY = """
import os, sys
from bookie.appliance import cli, supervisor
import lmdb, lmdb._envid
os.setgroups([]); os.setgid(%d); os.setuid(%d)
sys.exit(cli.main(["run", "--conf", sys.argv[1]]))
"""


def test_a_root_owned_index_is_named_a_permission_problem_at_start(shared_dir):
    """A bookie running as its directories' owner meets a file root left behind: the refusal
    says whose it is and what to run, not that the index is missing."""
    ens, _ = written_bookie(os.path.join(shared_dir, "e"))
    try:
        index = os.path.join(ens.bookie_dir(0), "ledgers", "current", "index")
        chown_tree(index, 0, 0)
        os.chmod(index, 0o700)
        conf = conf_file(shared_dir, ens.overrides(0))
        script = AS_NOBODY % (NOBODY.pw_gid, NOBODY.pw_uid)
        proc = subprocess.run([sys.executable, "-c", script, conf], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr[-2000:]
        refusal = [line for line in proc.stderr.splitlines() if "refusing to start" in line]
        assert refusal, proc.stderr[-2000:]
        assert "permission denied" in refusal[-1] and "owned by root" in refusal[-1], refusal
        assert "chown -R nobody" in refusal[-1] and "does not exist" not in refusal[-1]
    finally:
        ens.close()


def test_rotatekey_as_root_follows_no_link_and_the_owners_bookie_reads_its_new_key(shared_dir):
    """Issue 39 item 3: a link planted at the key's and a cookie's tmp path does not redirect
    the write (a root-only file stays as it was); the key and the cookies end up the owner's,
    0600; that user reads the new key, and the bookie starts with it (a client pinning it from
    the registration gets an answer)."""
    from bookie.storage.layout import KEY_FILE, PUBLIC_KEY_FIELD, cookie_in
    from bookie.testing.rawclient import RawBookieClient

    ens, _ = written_bookie(os.path.join(shared_dir, "e"))
    try:
        overrides = ens.overrides(0)
        journal_cur = os.path.join(overrides["journalDirectory"], "current")
        ledgers_cur = os.path.join(overrides["ledgerDirectories"], "current")
        old = cookie_in(overrides["journalDirectory"])[PUBLIC_KEY_FIELD]
        victim = os.path.join(shared_dir, "root-only")  # root's, 0600
        with open(victim, "wb") as f:
            f.write(b"root's own\n")
        os.chmod(victim, 0o600)
        for planted in (os.path.join(journal_cur, KEY_FILE + ".tmp"),
                        os.path.join(ledgers_cur, "cookie.tmp")):
            os.symlink(victim, planted)
            os.lchown(planted, NOBODY.pw_uid, NOBODY.pw_gid)
        proc = shell("rotatekey", "--conf", conf_file(shared_dir, overrides), overrides={})
        assert proc.returncode == 0, proc.stderr
        with open(victim, "rb") as f:
            assert f.read() == b"root's own\n", "a planted link redirected rotatekey's write"
        assert owned_by_root(ens.base_dir) == []
        for path in (os.path.join(journal_cur, KEY_FILE), os.path.join(journal_cur, "cookie"),
                     os.path.join(ledgers_cur, "cookie")):
            st = os.lstat(path)
            assert (st.st_uid, st.st_mode & 0o777) == (NOBODY.pw_uid, 0o600), path
        new = cookie_in(overrides["journalDirectory"])[PUBLIC_KEY_FIELD]
        assert new != old
        # the owner reads its new key (a process of that user, as the bookie's workers are; the
        # suite's interpreter lives where that user may not run it, so not the bookie itself)
        reader = ("import os, sys\nfrom bookie.storage import server_key\n"
                  "os.setgroups([]); os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[1]))\n"
                  "print(server_key.load(sys.argv[3])[0].decode())\n")
        got = subprocess.run([sys.executable, "-c", reader, str(NOBODY.pw_uid), str(NOBODY.pw_gid),
                              os.path.join(journal_cur, KEY_FILE)], capture_output=True, text=True,
                             timeout=60)
        assert got.returncode == 0 and got.stdout.strip() == new, got.stderr
        # and the bookie starts with it (as root here, as the other tests: its files go back to
        # it); a client pinning the key its registration publishes gets an answer
        chown_tree(shared_dir, 0, 0)
        ens.start(0)
        with RawBookieClient(ens.bookies[0], timeout_s=10) as raw:
            assert raw.info()
    finally:
        ens.close()
