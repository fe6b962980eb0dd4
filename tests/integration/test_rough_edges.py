"""The operator's rough edges (issue 25, finding 8), each against the real command or bookie:
Ctrl-C in the first moments of ``bookie run``, kazoo's lines under ``--log-format json``, an
entry that is not bytes, ``bookie shell --help`` in plain text, and ``tests/run.sh -q`` printing
its pass count, and only the test extra set up for tests/unit.  (EOF at the deleteledger prompt: test_bookkeeper_verbs.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from bookie.client import BookKeeper
from bookie.client.errors import InvalidArgumentError
from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def bookie_run(tmp_path, *extra: str, **popen) -> subprocess.Popen:
    port = free_port_pair("127.0.0.1")
    # Ctrl-C as a terminal's foreground command gets it, whatever this test process's own SIGINT
    # disposition: an ignored one is inherited, and between the console's handling of the
    # imports and the supervisor's own handler the signal was then lost (CI, [2-0.05])
    popen.setdefault("preexec_fn", _sigint_default)
    return subprocess.Popen(
        [sys.executable, "-m", "bookie", "run", "--set", f"journalDirectory={tmp_path}",
         "--set", f"ledgerDirectories={tmp_path}", "--set", f"bookiePort={port}", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


# Extension modules only the bookie's own code loads (the console imports them right after it
# installs its Ctrl-C handling): one of them mapped means Python's own start-up (site, the
# editable install's finder) is over.  A Ctrl-C before that is the interpreter's start failing,
# which no code of ours can handle (under load that window lasts a second).
_OUR_EXTENSIONS = ("/lmdb/", "/orjson/", "/zmq/", "/numpy/", "crc32c", "setproctitle")


def _past_interpreter_start(pid: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/maps") as f:
                if any(x in f.read() for x in _OUR_EXTENSIONS):
                    return
        except OSError:
            return  # it ended already: the test's assertions say how
        time.sleep(0.002)
    raise AssertionError(f"process {pid} still starting Python after {timeout_s} s")


# Every moment after launch (issue 35): the imports, the start checks, the workers' starts, the
# registration, serving.  The signal stops it (no step holds the stop back until it is done);
# STOP_S only tells a stop from a hang, it is no speed target (a loaded machine is slow).
STOP_S = 60.0


@pytest.mark.parametrize("signo,delay_s", [(signal.SIGINT, d) for d in
                                           (0.0, 0.02, 0.05, 0.1, 0.15, 0.3, 0.6, 1.0, 1.5, 2.5)]
                         + [(signal.SIGTERM, d) for d in (0.0, 0.3, 1.0, 2.0)])
def test_ctrl_c_early_in_bookie_run_stops_without_a_traceback(tmp_path, signo, delay_s):
    proc = bookie_run(tmp_path)
    _past_interpreter_start(proc.pid)
    time.sleep(delay_s)
    proc.send_signal(signo)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        # the first lines too: what the signal met (a "KeyboardInterrupt" printed as ignored
        # would be there, before the workers' lines), then how the start went on
        raise AssertionError(f"still running {STOP_S} s after {signo.name}: {err[:2000]}"
                             f"\n...\n{err[-3000:]}")
    assert "Traceback" not in err, err[-3000:]
    # 130: interrupted before the bookie's own handler; 0: stopped cleanly by it; -15 / -2:
    # the signal's default action before any handler was installed (nothing made yet; ended by
    # the signal itself, as a shell expects of Ctrl-C: seen once under load at 0.05 s)
    assert proc.returncode in (0, 130, -signal.SIGTERM, -signal.SIGINT), \
        (proc.returncode, err[-3000:])


def test_a_terminals_ctrl_c_early_in_bookie_run_prints_no_traceback_from_any_process(tmp_path):
    """A terminal's Ctrl-C signals the whole process group: the supervisor and the workers it
    launched early, still importing.  Before the fix the workers met it as KeyboardInterrupt and
    printed tracebacks (5 of 12 tries in the first 1.5 s); now only the supervisor acts on it."""
    for i, delay_s in enumerate((0.3, 0.5, 0.7, 0.9, 1.2)):
        d = tmp_path / f"b{i}"
        d.mkdir()
        proc = bookie_run(d, start_new_session=True)
        # Past Python's own start (a Ctrl-C inside its site import is the interpreter's fatal
        # error, before any of ours runs): at load 47 that took over 0.3 s.
        _past_interpreter_start(proc.pid)
        time.sleep(delay_s)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, (delay_s, err[-3000:])
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay_s, proc.returncode, err[-3000:])


def test_kazoos_lines_are_json_under_log_format_json(tmp_path):
    dead = free_port_pair("127.0.0.1")
    proc = bookie_run(tmp_path, "--log-format", "json", "--set",
                      f"metadataServiceUri=zk://127.0.0.1:{dead}/ledgers", "--set", "zkTimeout=1500")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    lines = err.splitlines()
    docs = [json.loads(line) for line in lines]  # every line, kazoo's too
    assert any(d["process"].startswith("kazoo") for d in docs), err[-3000:]
    assert any(d["event"] == "refusing to start" for d in docs)


def test_an_entry_that_is_not_bytes_is_a_clear_error_and_the_ledger_goes_on(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens, BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=b"edges")
        for bad, named in (("text", "not str"), (5, "not int")):
            with pytest.raises(InvalidArgumentError) as refused:
                lh.add_entry(bad)
            assert not isinstance(refused.value, TypeError)
            assert named in str(refused.value)
        assert lh.add_entry(bytearray(b"ok")) == 0
        assert lh.add_entry(memoryview(b"also ok")) == 1
        lh.close()
        got = [e.data for e in bk.open_ledger(lh.ledger_id, password=b"edges").read_entries(0, 1)]
    assert got == [b"ok", b"also ok"]


def test_shell_help_is_plain_text():
    out = subprocess.run([sys.executable, "-m", "bookie", "shell", "--help"], capture_output=True,
                         text=True, timeout=60).stdout
    assert "``" not in out and "bookie shell: administration" in out


def test_run_sh_quiet_prints_the_pass_count():
    env = {**os.environ, "BOOKIE_SKIP_SETUP": "1", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", "tests/run.sh", "-q", "-p", "no:randomly",
                           "tests/unit/test_metrics.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


def test_run_sh_refuses_a_worker_count_that_is_not_a_number_before_any_setup():
    env = {**os.environ, "BOOKIE_TEST_WORKERS": "two", "PYTHON": sys.executable}
    env.pop("BOOKIE_SKIP_SETUP", None)
    proc = subprocess.run(["bash", "tests/run.sh", "tests/unit/test_metrics.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout[-2000:]
    assert proc.stderr == "run.sh: BOOKIE_TEST_WORKERS must be a whole number, got 'two'\n"


def test_run_sh_sets_up_only_the_test_extra_for_unit_tests():
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("BOOKIE_SKIP_SETUP", None)
    proc = subprocess.run(["bash", "tests/run.sh", "-p", "no:randomly", "tests/unit/test_metrics.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "setup: tests/unit only: the test extra (no Debian packages, no Spark)" in proc.stdout
    assert " passed" in proc.stdout.splitlines()[-1], proc.stdout[-2000:]
    bad = subprocess.run(["bash", "tests/setup.sh", "--spark-only"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "unknown argument '--spark-only'" in bad.stderr


def test_simpletest_defaults_fit_the_one_bookie_appliance(tmp_path, capsys):
    from bookie.appliance.cli import main

    with LocalBookies(1, base_dir=str(tmp_path / "e")) as ens:
        rc = main(["shell", "simpletest", "--metadata", ens.metadata_uri, "--entries", "5"])
        out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.startswith("simpletest: OK: 5 entries") and "(E=1 Qw=1 Qa=1)" in out, out


def test_localbookie_started_again_on_its_dir_gathers_no_smoke_ledgers(tmp_path):
    from bookie.metadata import open_metadata

    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "bookie", "localbookie", "1", "--dir",
                               str(tmp_path / "d"), "--exit-after-smoke"],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0 and "smoke: wrote and read back" in proc.stdout, proc.stderr
    with open_metadata(f"lmdb://{tmp_path / 'd' / 'metadata'}") as store:
        assert list(store.list_ledgers()) == []


def test_a_second_localbookie_on_a_dir_in_use_says_so_without_the_first_ones_log(tmp_path):
    first = subprocess.Popen([sys.executable, "-m", "bookie", "localbookie", "1", "--dir",
                              str(tmp_path / "d"), "--no-smoke"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        for line in first.stdout:
            if "serving" in line or time.monotonic() > deadline:
                break
        second = subprocess.run([sys.executable, "-m", "bookie", "localbookie", "1", "--dir",
                                 str(tmp_path / "d"), "--no-smoke"], capture_output=True,
                                text=True, timeout=180)
        assert second.returncode == 2, second.stderr
        assert "refusing to start" in second.stderr
        assert "bookie serving" not in second.stderr  # the running instance's lines stay out
        assert len(second.stderr.splitlines()) <= 3, second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
