"""What a worker loop does when it has nothing to do: spin, then yield, then park.

Theory of operation
-------------------
On an idle machine a process that parks in a blocking ``poll`` costs more to wake than most of
its work: the kernel's wake-up of a halted virtual CPU, and code and data gone cold in its
caches (bench/README.md, issue 40: a numpy check of one entry took 19 us warm and 60-72 us
right after a 1 ms sleep; each wake-up of another process or thread 40-150 us).  Where an
answer is due soon (the add worker waiting for its journal's DURABLE cursor, the client's I/O
thread waiting for its caller's next add), the loop looks again without sleeping for a short
while: ``spin_s`` in all, the first ``SPIN_SHARE`` of it back to back, the rest giving its CPU
to any other runnable thread between looks (``sched_yield``), and then parks as before.  This
is Aeron's and LMAX's backoff idle strategy, without the exponential park (the loops' own poll
timeouts are the park).

The spin buys latency with CPU: it runs only where a loop knows something is due (an answer
waiting), never while the loop is simply idle; it parks at once when a gap between two looks
shows the thread lost its CPU to another (``PREEMPTED_S``), or while the host's load average
is at its core count or above (``observe_load``): on a busy host a spinning thread only delays
the one that would do the work.  ``spin_s = 0`` parks at once always (a host where another
process could use the CPU).  Pure: the loop gives it the clock; it says what to
do next.
"""

from __future__ import annotations

SPIN = 0  # look again at once
YIELD = 1  # give the CPU away (sched_yield), then look again
PARK = 2  # stop looking: block in the loop's poll

SPIN_SHARE = 0.1  # of ``spin_s``, spent looking back to back before yielding between looks
# A gap this long between two looks means the spinning thread lost its CPU to another (a busy
# host): it parks at once, leaving the CPU to whoever needs it.  One look takes 2-5 us.
PREEMPTED_S = 50e-6


class Backoff:
    """The idle strategy of one loop: ``start(now)`` when it finds nothing to do, then
    ``step(now)`` before each further look says SPIN, YIELD or PARK."""

    __slots__ = ("spin_s", "yield_after_s", "_started", "_last", "preempted", "host_busy")

    def __init__(self, spin_s: float):
        if spin_s < 0:
            raise ValueError(f"spin time {spin_s!r} is negative")
        self.spin_s = spin_s
        self.yield_after_s = spin_s * SPIN_SHARE
        self._started = 0.0
        self._last = 0.0
        self.preempted = 0  # spins cut short because the thread lost its CPU (a busy host)
        self.host_busy = False  # ``observe_load``: no spin at all while it holds

    def __bool__(self) -> bool:
        """False when the loop parks at once (``spin_s`` 0)."""
        return self.spin_s > 0

    def observe_load(self, load_1min: float, cores: int) -> None:
        """The host's 1-minute load average, given by the loop about once a second: with as
        many runnable threads as cores or more, a spin could only take a CPU from a thread with
        work to do (measured at load 18 on 2 cores: a 300 us spin made lone adds 2-6x slower),
        so the loop parks at once until the load falls again."""
        self.host_busy = load_1min >= cores

    def start(self, now_s: float) -> None:
        self._started = self._last = now_s

    def step(self, now_s: float) -> int:
        waited = now_s - self._started
        if waited >= self.spin_s or self.host_busy:
            return PARK
        if now_s - self._last >= PREEMPTED_S:  # another thread had the CPU meanwhile
            self.preempted += 1
            return PARK
        self._last = now_s
        if waited >= self.yield_after_s:
            return YIELD
        return SPIN
