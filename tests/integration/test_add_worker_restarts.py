"""Restarts on the add path in dependency order (issue 31, item 3), on a real bookie:

- a journal worker that dies while a new add worker waits for it (to make durable what the old
  add worker left in the ring) is restarted by the supervisor during that wait, and the add
  worker then starts: the bookie serves again, with what was in the ring stored;
- the waiting add worker stops at once on SIGTERM (it used to sleep through it).

The journal is held with SIGSTOP so that an add stays in the ring, not durable, when the add
worker is killed: the new add worker must then wait for the journal.
"""

from __future__ import annotations

import os
import signal
import time

from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
import waiting

KEY = b"restart-order-key"
LEDGER = 2


def _new_worker(ens, role: str, old_pid: int, timeout_s: float = 20.0) -> int:
    """The pid of ``role``'s replacement for ``old_pid`` once the process exists (ready or not)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = ens.worker_pid(0, role)
        except LocalBookieError:
            pid = None
        if pid is not None and pid != old_pid:
            return pid
        time.sleep(0.01)
    raise AssertionError(f"no new {role} worker in {timeout_s} s:\n{ens.log(0)[-3000:]}")


def _add_waiting_for_a_stopped_journal(ens) -> tuple[int, int, bytes]:
    """Stop the journal, leave one add in the ring, kill the add worker; returns (journal pid,
    the new add worker's pid, the entry left in the ring)."""
    with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
        assert c.add(LEDGER, [make_entry(LEDGER, 0, b"durable")], KEY) == Status.OK
        journal = ens.kill_worker(0, "journal", signal.SIGSTOP)
        left = make_entry(LEDGER, 1, b"left in the ring")
        c.send_add(LEDGER, [left], KEY)
        time.sleep(0.5)  # placed in the ring; the stopped journal cannot make it durable
    old_add = ens.kill_worker(0, "add")
    new_add = _new_worker(ens, "add", old_add)
    waiting.wait_for(lambda: "waiting for the journals to drain the ring" in ens.log(0), 60,
                     "the new add worker waiting for the stopped journal")
    assert f"worker started role=add pid={new_add}" not in ens.log(0)
    return journal, new_add, left


def test_a_journal_killed_while_the_add_worker_restarts_is_restarted_and_the_bookie_serves():
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        journal, new_add, left = _add_waiting_for_a_stopped_journal(ens)
        os.kill(journal, signal.SIGKILL)
        # well within the 60 s after which the waiting add worker would give up
        ens.wait_worker_restarted(0, "journal", journal, timeout_s=20)
        ens.wait_worker_restarted(0, "add", -1, timeout_s=20)
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            assert c.read(LEDGER, 0, 2) == (Status.OK, [make_entry(LEDGER, 0, b"durable"), left])
            assert c.add(LEDGER, [make_entry(LEDGER, 2, b"after")], KEY) == Status.OK
        assert ens.running(0)


def test_an_add_worker_waiting_for_its_journal_stops_at_once_on_sigterm():
    with LocalBookies(1, conf={"metadataServiceUri": "", "workerRestartLimit": 100}) as ens:
        journal, new_add, _ = _add_waiting_for_a_stopped_journal(ens)
        os.kill(new_add, signal.SIGTERM)
        t0, exited = time.monotonic(), False
        # Ordering, not speed: it exits while its journal is still stopped, and before the
        # 60 s after which a waiting add worker gives up on its own.
        while time.monotonic() - t0 < 50:
            try:
                with open(f"/proc/{new_add}/stat", "rb") as f:
                    if f.read().split(b") ", 1)[1][:1] == b"Z":  # exited, not reaped yet
                        exited = True
                        break
            except OSError:  # exited and reaped
                exited = True
                break
            time.sleep(0.01)
        os.kill(journal, signal.SIGCONT)
        assert exited, "the waiting add worker did not stop on SIGTERM while its journal waited"
        assert "stopped while waiting for the journals to drain the ring" in ens.log(0)
