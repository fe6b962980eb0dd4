"""The process helpers the supervisor, the workers and the test harness share: the parent-death
signal, a worker's start (``worker_preexec``, ``wait_for_go``) and the wait for a process's exit."""

from __future__ import annotations

import ctypes
import os
import select
import signal

def set_pdeathsig() -> None:
    """In a child before exec: receive SIGTERM when the parent (thread) that started it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def worker_preexec() -> None:
    """In a bookie worker before exec: ``set_pdeathsig``, and Ctrl-C ignored from the first
    instruction on (an ignored signal stays ignored across exec, and Python then leaves it so).
    A terminal's Ctrl-C signals the whole process group; the supervisor handles it and stops
    its workers with SIGTERM.  The workers are launched early, to import while the ones before
    them start, so a Ctrl-C in the first second of ``bookie run`` used to meet them inside
    Python's own start-up and print KeyboardInterrupt tracebacks (5 of 12 tries)."""
    set_pdeathsig()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def wait_for_go(fd: int) -> bool:
    """Block until the supervisor's go (a byte on ``fd``): True, or False when it closed the
    pipe without one (the start was abandoned).  Workers are launched early so that their
    imports overlap the start of the workers before them (appliance/supervisor.py)."""
    try:
        while True:
            try:
                return os.read(fd, 1) != b""
            except InterruptedError:
                continue
    finally:
        os.close(fd)


def wait_exited(proc, timeout_s: float) -> int:
    """``proc.wait(timeout_s)`` woken by the process's exit itself (a pidfd), not by
    ``Popen.wait``'s polling, whose sleeps grow to 50 ms: a bookie's stop waits on three groups
    of workers in turn, and its owner on the bookie.

    Raises:
        subprocess.TimeoutExpired: still running after ``timeout_s``.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # reaped already, or no pidfd here: Popen's own wait
        return proc.wait(timeout_s)
    try:
        exited = select.select([fd], [], [], timeout_s)[0]
    finally:
        os.close(fd)
    if not exited:
        import subprocess  # lazy: subprocess (the workers import this module, never wait on one)
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return proc.wait()
