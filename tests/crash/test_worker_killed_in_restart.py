"""A worker killed again while the supervisor restarts it costs one more restart under
``workerRestartLimit``, never the whole bookie (issue 21, defect 4)."""

import os
import signal
import time

from bookie.testing import LocalBookies
from bookie.testing.localbookies import LocalBookieError


def _kill_next_before_ready(ens, role: str, old_pid: int, timeout_s: float = 30.0) -> int:
    """Wait for the replacement of ``old_pid`` to appear and SIGKILL it before it says ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = ens.worker_pid(0, role)
        except LocalBookieError:
            pid = None
        if pid is not None and pid != old_pid:
            assert f"worker started role={role} pid={pid}" not in ens.log(0), \
                "the restarted worker became ready before the test could kill it"
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.002)
    raise AssertionError(f"no new {role} worker within {timeout_s} s")


def test_worker_killed_during_its_restart_is_restarted_again():
    with LocalBookies(1, conf={"metadataServiceUri": "", "workerRestartLimit": 100}) as ens:
        first = ens.kill_worker(0, "gc")
        second = _kill_next_before_ready(ens, "gc", first)
        third = ens.wait_worker_restarted(0, "gc", second, timeout_s=90)
        assert third not in (first, second)
        assert ens.running(0), ens.log(0)[-3000:]
        assert "worker restart failed; retrying" in ens.log(0)


def test_failed_restarts_past_the_limit_stop_the_bookie():
    with LocalBookies(1, conf={"metadataServiceUri": "", "workerRestartLimit": 1}) as ens:
        first = ens.kill_worker(0, "gc")
        _kill_next_before_ready(ens, "gc", first)
        deadline = time.monotonic() + 60
        while ens.running(0) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ens.running(0)
        assert "times in a minute" in ens.log(0), ens.log(0)[-3000:]
