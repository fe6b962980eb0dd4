"""`bookie localbookie N`: prints what a user needs, passes its smoke check, stops cleanly."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from bookie.testing.localbookies import children_of


def _bookie_processes(base_dir):
    """pids of processes still running from this ensemble (by their command line)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if base_dir.encode() in cmd:
            out.append(int(pid))
    return out


@pytest.mark.parametrize("backend", ["embedded", "zookeeper"])
def test_localbookie_serves_and_stops_cleanly_on_sigterm(tmp_path, backend, request):
    base = str(tmp_path / "ens")
    cmd = [sys.executable, "-m", "bookie", "localbookie", "3", "--dir", base]
    if backend == "zookeeper":
        cmd += ["--metadata", request.getfixturevalue("zk_uri")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "serving" in line:
                break
        text = "".join(lines)
        assert "localbookie: serving" in text, text + p.stderr.read() if p.poll() is not None else text
        assert re.search(r"^metadata: (lmdb|zk)://", text, re.M)
        assert len(re.findall(r"^bookie \d: 127\.0\.0\.1:\d+", text, re.M)) == 3
        assert re.search(r"^smoke: wrote and read back 100 entries .*: ok$", text, re.M)
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 0  # a clean stop (the wait only tells it from a hang)
        assert _bookie_processes(base) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_localbookie_rejects_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "bookie", "localbookie", "0"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "N must be between 1 and 64" in r.stderr
    r = subprocess.run([sys.executable, "-m", "bookie", "localbookie", "2", "--set", "nokey"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "expected key=value" in r.stderr


def test_bookies_stop_when_the_process_that_started_them_dies(tmp_path):
    """A test run killed mid-way (timeout, Ctrl-\\, OOM) must not leave bookies behind."""
    base = str(tmp_path / "orphans")
    script = ("import sys, time\n"
              "from bookie.testing import LocalBookies\n"
              f"ens = LocalBookies(2, base_dir={base!r}, conf={{'metadataServiceUri': ''}})\n"
              "ens.start_all()\n"
              "print('up', flush=True)\n"
              "time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "up"
        supervisors = [pid for pid in _bookie_processes(base) if pid != p.pid]
        workers = [w for pid in supervisors for w in children_of(pid)]
        assert len(supervisors) == 2 and len(workers) == 8
        p.kill()  # no cleanup runs in the parent
        p.wait(10)
        deadline = time.monotonic() + 30
        while any(os.path.exists(f"/proc/{pid}") for pid in supervisors + workers) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid in supervisors + workers if os.path.exists(f"/proc/{pid}")]
        assert left == [], f"still running: {left}"
    finally:
        if p.poll() is None:
            p.kill()
