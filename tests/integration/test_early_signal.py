"""A Ctrl-C while the ``bookie`` command is still importing ends it at once with status 130
(issue 35: under load the imports took 6 s, and a Ctrl-C noted then waited for them), and
``bookie localbookie`` stops on SIGINT or SIGTERM at any moment after launch.  Each test tells
a stop from a wait by what the wait would last (30 s of imports, a 60 s zkTimeout), never by a
speed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

# The console with one of its imports made slow (as under load): a marker line, then 30 s.
SLOW_IMPORTS = """
import importlib, sys, time
real = importlib.import_module
def slow(name, *args):
    if name == "numpy":
        print("importing", flush=True)
        time.sleep(30)
    return real(name, *args)
importlib.import_module = slow
from bookie.appliance import console
sys.argv = ["bookie", "--version"]
sys.exit(console.main())
"""


def test_ctrl_c_during_the_imports_ends_the_command_at_once():
    proc = subprocess.Popen([sys.executable, "-c", SLOW_IMPORTS], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "importing\n"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=25)  # the slow import lasts 30 s
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("Ctrl-C during the imports waited for them")
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err, err


@pytest.mark.parametrize("signo,delay_s", [(signal.SIGINT, 0.5), (signal.SIGINT, 2.0),
                                           (signal.SIGTERM, 1.0), (signal.SIGINT, 4.0)])
def test_localbookie_stops_on_a_signal_at_any_moment(tmp_path, signo, delay_s):
    proc = subprocess.Popen([sys.executable, "-m", "bookie", "localbookie", "2", "--dir",
                             str(tmp_path / "lb")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(delay_s)
    proc.send_signal(signo)
    try:
        out, err = proc.communicate(timeout=60)  # a stop, not a hang; no speed asked
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"localbookie still running 60 s after {signo.name}: {out} {err}")
    assert "Traceback" not in err, err[-3000:]
    assert proc.returncode in (0, 130, 143, -signal.SIGTERM), (proc.returncode, out, err[-3000:])


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_while_the_start_waits_for_the_metadata_store_is_not_held_back(tmp_path, signo):
    """Opening a ZooKeeper store out of reach waits zkTimeout; a stop then waited as long."""
    from bookie.workers.ports import free_port_pair
    dead, port = free_port_pair("127.0.0.1"), free_port_pair("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bookie", "run", "--set", f"journalDirectory={tmp_path}",
         "--set", f"ledgerDirectories={tmp_path}", "--set", f"bookiePort={port}",
         "--set", f"metadataServiceUri=zk://127.0.0.1:{dead}/ledgers", "--set", "zkTimeout=60000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while "Connection refused" not in _stderr_so_far(proc):  # the start is in the store's wait
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(signo)
    try:
        _, err = proc.communicate(timeout=45)  # before the 60 s zkTimeout would end the wait
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"bookie run still waiting for ZooKeeper 45 s after {signo.name}")
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "during the start checks" in err and "Traceback" not in err, err[-2000:]


_seen: dict[int, str] = {}


def _stderr_so_far(proc: subprocess.Popen) -> str:
    """What ``proc`` wrote to stderr so far (non-blocking reads of its pipe)."""
    import os
    os.set_blocking(proc.stderr.fileno(), False)
    try:
        chunk = os.read(proc.stderr.fileno(), 65536)
    except BlockingIOError:
        chunk = b""
    _seen[proc.pid] = _seen.get(proc.pid, "") + chunk.decode(errors="replace")
    return _seen[proc.pid]
