"""A bookie's worker processes: launched with fork+exec, each waiting for its go, then waited
for until ready (the supervisor's process mechanics; what to start and when is the supervisor's,
what a death means is ``core/supervision.py``'s).

``launch`` starts ``python -m bookie.workers ROLE`` (``bookie.autorecovery`` for that role),
which imports its code and then waits for a go byte on a pipe before it opens anything; a
worker whose go pipe closes without one exits at once (status 0), having touched nothing.
``start`` sends the go and waits for the worker's ready byte, saying every 10 s that a long
start (a replay) is still going, and gives up after the role's ``READY_TIMEOUT_S``.  Each worker
gets ``PR_SET_PDEATHSIG`` (``workers/processes.py``) and inherits the directory lock's
descriptors, and the rings' descriptors when it maps them.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Callable

from bookie.storage.journal_set import index_of_role
from bookie.workers.processes import worker_preexec

RING_ROLES = ("add", "read")  # and the journal workers: the rings' descriptors go to them
READY_TIMEOUT_S = {"journal": 120.0, "add": 3600.0, "read": 60.0, "gc": 60.0,
                   "autorecovery": 60.0}
STILL_STARTING_NOTE_S = 10.0


def ready_timeout_s(role: str) -> float:
    return READY_TIMEOUT_S["journal" if index_of_role(role) is not None else role]


class Worker:
    def __init__(self, role: str):
        self.role = role
        self.proc: subprocess.Popen | None = None
        self.restarts_total = 0
        self.memory_kills_total = 0
        self.killed_for_memory = False  # killed by the memory watch: its restart is not a crash


class WorkerStartError(RuntimeError):
    """The bookie could not be started (a worker not ready, the registration failed); exit
    status 1, or the worker's own fatal status."""

    def __init__(self, role: str, returncode, message: str | None = None):
        how = "timed out" if returncode is None else f"exited with status {returncode}"
        super().__init__(message or f"{role} worker did not become ready ({how}); see its log "
                                    f"lines above")
        self.role = role
        self.returncode = returncode

    @classmethod
    def other(cls, message: str) -> "WorkerStartError":
        return cls("", None, message)


def launch(w: Worker, run_dir: str, ring_fds: tuple[int, ...], lock_fds: tuple[int, ...],
           env: dict) -> tuple[int, int]:
    """Start ``w``'s process (``w.proc``), importing its code and then waiting for its go.
    Returns (ready pipe's read end, go pipe's write end)."""
    r, wfd = os.pipe()
    go_r, go_w = os.pipe()
    conf_path = os.path.join(run_dir, "bookie.conf")
    cmd = [sys.executable, "-m", "bookie.workers", w.role, "--conf", conf_path,
           "--run-dir", run_dir, "--ready-fd", str(wfd), "--go-fd", str(go_r)]
    if w.role == "autorecovery":
        cmd = [sys.executable, "-m", "bookie.autorecovery", "--conf", conf_path,
               "--ready-fd", str(wfd), "--go-fd", str(go_r)]
    # The lock's descriptors go to every worker: the directories stay locked while any
    # process of this bookie lives (storage/dirlock.py); the ring's to those that map it.
    if not (w.role in RING_ROLES or index_of_role(w.role) is not None):
        ring_fds = ()
    try:
        w.proc = subprocess.Popen(cmd, pass_fds=(wfd, go_r, *lock_fds, *ring_fds),
                                  preexec_fn=worker_preexec,
                                  stdin=subprocess.DEVNULL, env=env)
    except BaseException:
        for fd in (r, go_w):
            os.close(fd)
        raise
    finally:
        os.close(wfd)
        os.close(go_r)
    return r, go_w


def start(w: Worker, launched: tuple[int, int], log: Callable[..., None],
          while_waiting: Callable[[], None] | None, stopping: Callable[[], bool]) -> None:
    """Send ``w`` (launched: ``launch``'s pipes) its go and wait until it is ready, calling
    ``while_waiting`` meanwhile.  Raises WorkerStartError: it exited, timed out, or
    ``stopping()`` became true."""
    role = w.role
    r, go_w = launched
    try:
        os.write(go_w, b"G")
    except OSError:
        pass  # it is gone already: the wait below says how
    finally:
        os.close(go_w)
    started_at = time.monotonic()
    deadline = started_at + ready_timeout_s(role)
    next_note = started_at + STILL_STARTING_NOTE_S  # a long start (a replay) says it is going
    try:
        while True:
            ready, _, _ = select.select([r], [], [], 0.2)
            if not ready and time.monotonic() >= next_note:
                next_note += STILL_STARTING_NOTE_S
                log("waiting for worker to start", role=role, pid=w.proc.pid,
                    seconds=round(time.monotonic() - started_at),
                    gives_up_after_s=round(ready_timeout_s(role)))
            if ready:
                if os.read(r, 1) == b"R":
                    break
                raise WorkerStartError(role, w.proc.wait(5))
            if w.proc.poll() is not None:
                raise WorkerStartError(role, w.proc.returncode)
            if while_waiting is not None:
                while_waiting()
            if time.monotonic() > deadline:
                w.proc.kill()
                raise WorkerStartError(role, None)
            if stopping():
                raise WorkerStartError(role, None)
    finally:
        os.close(r)
    log("worker started", role=role, pid=w.proc.pid,
        seconds=f"{time.monotonic() - started_at:.2f}")
