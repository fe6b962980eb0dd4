"""Wrong questions answered in one line, exit status 2, never a traceback nor a false success
(issue 44): ``localbookie --dir`` naming a file or a directory this user cannot write,
``--metadata`` naming no store (a typo must not start an empty cluster); a Ctrl-C while it
starts exits 130 (the start did not finish), not 0, and ``bench writes`` cut short by one prints
what it measured; ``readledger`` with its range backwards; a bookie whose port changed is told
its id differs and offered ``updatecookie``; a root-owned directory says ``chown`` to the
bookie's user, and root starting a bookie on that user's directories is told to run as it."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from as_user import run_as


def localbookie(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bookie", "localbookie", *argv],
                          capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr


def test_dir_naming_a_file_is_one_line(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    assert "not a directory" in one_line(localbookie("1", "--dir", str(a_file)))


def test_dir_the_user_cannot_write_is_one_line():
    assert os.geteuid() == 0, "these tests run as root (as CI does) to act as another user"
    closed = tempfile.mkdtemp(prefix="bk-lb-", dir="/tmp")  # root's, 0755: nobody may not write
    os.chmod(closed, 0o755)
    try:
        proc = run_as("nobody", "localbookie", "1", "--dir", os.path.join(closed, "lb"))
        assert "cannot create it: Permission denied" in one_line(proc), proc.stderr
        proc = run_as("nobody", "localbookie", "1", "--dir", closed)
        assert "this user cannot write in it" in one_line(proc), proc.stderr
    finally:
        shutil.rmtree(closed, ignore_errors=True)


def test_metadata_naming_no_store_is_refused_not_made(tmp_path):
    typo = tmp_path / "metdata"
    err = one_line(localbookie("1", "--dir", str(tmp_path / "lb"), "--metadata",
                               f"lmdb://{typo}"))
    assert "no metadata store there" in err and "metaformat" in err, err
    assert not typo.exists()


def test_readledger_with_its_range_backwards_is_refused_not_an_empty_answer(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bookie", "shell", "readledger", "1",
                           "--entry-from", "4", "--entry-to", "1", "--metadata",
                           f"lmdb://{tmp_path}"], capture_output=True, text=True, timeout=120)
    assert "--entry-to 1 is before --entry-from 4" in one_line(proc), proc.stderr


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def ctrl_c_once(argv: list[str], ready: str, on_stderr: bool = False,
                **popen) -> tuple[int, str, str]:
    """``bookie ARGV``, Ctrl-C once a line of its output holds ``ready``; (status, out, err)."""
    # Ctrl-C as a terminal's foreground command gets it: whatever this test process's own
    # SIGINT disposition (an ignored one is inherited, and the command would never see it)
    popen.setdefault("preexec_fn", _sigint_default)
    proc = subprocess.Popen([sys.executable, "-m", "bookie", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)
    try:
        while True:
            line = (proc.stderr if on_stderr else proc.stdout).readline()
            assert line, proc.communicate(timeout=60)
            if ready in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out, err


def test_ctrl_c_while_it_starts_exits_130(tmp_path):
    rc, out, err = ctrl_c_once(["localbookie", "2", "--dir", str(tmp_path / "lb")],
                               "localbookie: starting", start_new_session=True)
    assert rc == 130, (rc, out, err[-2000:])
    assert "Traceback" not in err and "the start did not finish" in out, out


def test_a_bookie_whose_port_changed_is_offered_updatecookie_first(tmp_path):
    """The cookie names the old id: the refusal says the id differs and how to keep the data
    (updatecookie, updateledgers), not only restoring the configuration or wiping."""
    uri = f"lmdb://{tmp_path / 'md'}"
    subprocess.run([sys.executable, "-m", "bookie", "shell", "metaformat", "--metadata", uri,
                    "--non-interactive"], check=True, capture_output=True, timeout=120)
    (tmp_path / "j").mkdir()
    (tmp_path / "l").mkdir()
    conf = tmp_path / "bookie.conf"
    conf.write_text(f"journalDirectory={tmp_path / 'j'}\nledgerDirectories={tmp_path / 'l'}\n"
                    f"metadataServiceUri={uri}\nbookiePort=4181\n")
    init = subprocess.run([sys.executable, "-m", "bookie", "shell", "initbookie", "--conf",
                           str(conf)], capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stderr
    proc = subprocess.run([sys.executable, "-m", "bookie", "run", "--conf", str(conf), "--set",
                           "bookiePort=4183"], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr
    assert re.search(r"cookie is of bookie id \S+:4181 but this configuration makes the id "
                     r"\S+:4183", proc.stderr), proc.stderr
    assert "'bookie shell updatecookie --conf FILE'" in proc.stderr, proc.stderr
    assert re.search(r"updateledgers --from \S+:4181 --to \S+:4183", proc.stderr), proc.stderr
    assert "key differs" not in proc.stderr, proc.stderr


def test_ctrl_c_during_bench_writes_prints_what_it_measured(tmp_path):
    rc, out, err = ctrl_c_once(["bench", "writes", "--localbookie", "1", "--ensemble", "1",
                                "--quorum", "1", "--time", "600", "--data-dir",
                                str(tmp_path / "b")], "adds", on_stderr=True)  # adds running
    assert rc == 130, (rc, err[-2000:])
    assert "Traceback" not in err, err[-3000:]
    assert "interrupted: Ctrl-C:" in err and "adds answered" in err, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result["phases"]["writes"]["ops"] > 0, result


@pytest.fixture
def shared_dir():
    """A directory every user may enter (the suite's tmp_path may be root's 0700)."""
    assert os.geteuid() == 0, "these tests run as root (as CI does) to act as another user"
    d = tempfile.mkdtemp(prefix="bk-own-", dir="/tmp")
    os.chmod(d, 0o755)
    os.mkdir(os.path.join(d, "j"))
    os.mkdir(os.path.join(d, "l"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _run_argv(d: str) -> list[str]:
    return ["run", "--set", f"journalDirectory={d}/j", "--set", f"ledgerDirectories={d}/l",
            "--set", "bookiePort=0"]


@pytest.mark.parametrize("mode", [0o755, 0o700])  # 0700: what mkdir makes under umask 077 (CI)
def test_a_root_owned_journal_directory_says_chown_not_run_as_root(shared_dir, mode):
    os.chown(os.path.join(shared_dir, "l"), pwd.getpwnam("nobody").pw_uid, -1)
    os.chmod(os.path.join(shared_dir, "j"), mode)
    proc = run_as("nobody", *_run_argv(shared_dir))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert f"chown -R nobody: {shared_dir}/j" in proc.stderr, proc.stderr
    assert "run this as root" not in proc.stderr and "sudo -u root" not in proc.stderr


def test_root_starting_a_bookie_on_its_users_directories_is_told_to_run_as_that_user(shared_dir):
    nobody = pwd.getpwnam("nobody").pw_uid
    for sub in ("j", "l"):
        os.chown(os.path.join(shared_dir, sub), nobody, -1)
    proc = subprocess.run([sys.executable, "-m", "bookie", *_run_argv(shared_dir)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "run the bookie as nobody, not root (sudo -u nobody bookie run" in proc.stderr, \
        proc.stderr
    assert "remove it" not in proc.stderr, proc.stderr  # not: delete the recovery secret
    assert not os.listdir(os.path.join(shared_dir, "j")), "root left files in nobody's dir"
