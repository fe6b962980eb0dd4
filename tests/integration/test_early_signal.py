"""A Ctrl-C while the ``bookie`` command is still importing ends it at once with status 130
(issue 35: under load the imports took 6 s, and a Ctrl-C noted then waited for them), and
``bookie localbookie`` stops within 5 s of SIGINT or SIGTERM at any moment after launch."""

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
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("Ctrl-C during the imports waited for them")
    assert proc.returncode == 130 and time.monotonic() - t0 < 5, (proc.returncode, err)
    assert "Traceback" not in err, err


@pytest.mark.parametrize("signo,delay_s", [(signal.SIGINT, 0.5), (signal.SIGINT, 2.0),
                                           (signal.SIGTERM, 1.0), (signal.SIGINT, 4.0)])
def test_localbookie_stops_within_5_s_of_a_signal_at_any_moment(tmp_path, signo, delay_s):
    proc = subprocess.Popen([sys.executable, "-m", "bookie", "localbookie", "2", "--dir",
                             str(tmp_path / "lb")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(delay_s)
    t0 = time.monotonic()
    proc.send_signal(signo)
    try:
        out, err = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"localbookie still running 5 s after {signo.name}: {out} {err}")
    assert time.monotonic() - t0 < 5
    assert "Traceback" not in err, err[-3000:]
    assert proc.returncode in (0, 130, -signal.SIGTERM), (proc.returncode, out, err[-3000:])
