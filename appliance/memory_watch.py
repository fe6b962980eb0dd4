"""Each worker's memory budget (``workerMemoryLimitMB``), watched by the supervisor.

Theory of operation
-------------------
The workers bound what a client can make them hold: message sizes, pending requests, queued
replies, long polls (docs/security.md "Limits").  One thing no worker can bound is what ZeroMQ
buffers before the worker sees it: a message of many frames, each under ``ZMQ_MAXMSGSIZE``, is
held whole by libzmq until its last frame arrives.  The budget is the last line behind those
limits: five times a second the supervisor reads each worker's *anonymous* resident memory
(``RssAnon`` in /proc/PID/status: heap and ZeroMQ buffers; not the LMDB index or entry logs
mapped from files, nor the shared journal ring, which the kernel can page out or share), and a
worker over the budget is killed (SIGKILL: every worker is crash-safe, DESIGN.md) and started
again, which drops its connections and whatever they had buffered.

Such a restart is logged as one warning line naming the worker, its memory and the budget, and
counted in ``bookie_worker_memory_kills_total``; it does not count towards
``workerRestartLimit``, so a client that keeps pushing a worker over its budget cannot make the
bookie stop.  0 turns the watch off.
"""

from __future__ import annotations

import time


def anon_rss_bytes(pid: int) -> int | None:
    """The process's anonymous resident memory (bytes); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"RssAnon:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryWatch:
    """Which workers are over the budget; ``due`` says when to look again."""

    INTERVAL_S = 0.2  # a message arrives at 1-3 GB/s: the budget is passed by at most that much

    def __init__(self, limit_bytes: int, clock=time.monotonic):
        self.limit = limit_bytes
        self.clock = clock
        self.next_check = 0.0

    def due(self) -> bool:
        now = self.clock()
        if self.limit <= 0 or now < self.next_check:
            return False
        self.next_check = now + self.INTERVAL_S
        return True

    def over(self, pids: dict[str, int]) -> list[tuple[str, int]]:
        """(role, bytes) of the workers (role -> pid) whose anonymous memory is over the budget."""
        out = []
        for role, pid in pids.items():
            rss = anon_rss_bytes(pid)
            if rss is not None and rss > self.limit:
                out.append((role, rss))
        return out
