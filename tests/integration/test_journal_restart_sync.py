"""A journal worker restarted after SIGKILL makes durable what its scan found before it counts
it durable (issue 31, item 4), on a real bookie.

The journal worker is killed (strace injects SIGKILL at its fdatasync) after writing the group
of an add and before syncing it: the group is whole in the page cache, where the next worker's
scan finds it.  That worker must fdatasync the file before it publishes the group as durable
and the add is acknowledged; otherwise a machine crash would lose an acknowledged entry.  A
second strace, on the supervisor and the workers it starts, records the fdatasyncs.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time

import pytest

from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"journal-sync-key"
LEDGER = 2



def _strace(*args: str) -> subprocess.Popen:
    """strace with ``args``, once it has attached (tests/setup.sh installs strace; CI runs as root)."""
    assert shutil.which("strace"), "needs strace: run tests/setup.sh"
    p = subprocess.Popen(["strace", *args], stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = ""
    if select.select([p.stderr], [], [], 10)[0]:
        line = p.stderr.readline().decode(errors="replace")
    if "attached" not in line:
        p.kill()
        p.wait()
        pytest.fail(f"strace cannot attach here (ptrace refused?): {line.strip()}")
    return p


def _gone(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().split(b") ", 1)[1][:1] == b"Z":
                    return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still alive after {timeout_s} s")


def test_a_journal_restarted_after_sigkill_syncs_what_its_scan_found_before_the_ack(tmp_path):
    out = tmp_path / "fdatasync.trace"
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        jdir = ens.journal_dirs(0)[0]
        sup = ens.procs[0].pid
        with RawBookieClient(ens.bookies[0], timeout_s=30) as c:
            assert c.add(LEDGER, [make_entry(LEDGER, 0, b"before")], KEY) == Status.OK
            journal = ens.worker_pid(0, "journal")
            killer = _strace("-p", str(journal), "-e", "trace=fdatasync",
                             "-e", "inject=fdatasync:signal=KILL")
            os.kill(sup, signal.SIGSTOP)  # no restart before the recording strace is on
            try:
                rid = c.send_add(LEDGER, [make_entry(LEDGER, 1, b"written, not synced")], KEY)
                _gone(journal)  # killed at the fdatasync of that add's group
                killer.wait(10)
                tracer = _strace("-f", "-y", "-p", str(sup), "-e", "trace=fdatasync",
                                 "-o", str(out))
            finally:
                os.kill(sup, signal.SIGCONT)
            try:
                status, _ = c.wait(c.add_sock, rid)
                assert status == Status.OK
                synced = [line for line in out.read_text().splitlines()
                          if "fdatasync(" in line and jdir in line and "= 0" in line]
            finally:
                tracer.send_signal(signal.SIGINT)  # detaches
                tracer.wait(10)
        assert synced, f"the add was acknowledged with no fdatasync of the journal " \
                       f"its group is in:\n{out.read_text()[-2000:]}"
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            assert c.read(LEDGER, 1, 1) == (Status.OK, [make_entry(LEDGER, 1, b"written, not synced")])
