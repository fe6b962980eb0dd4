"""Disk usage states, with hysteresis: the supervisor's decision, as plain code (no I/O).

A directory's state follows its used fraction ``u`` and its previous state::

    full   u >= diskUsageThreshold, or it was full and u >= diskUsageLwmThreshold
    warn   not full and u >= diskUsageWarnThreshold
    ok     otherwise

The gap between the threshold and the low-water mark keeps a disk that hovers at the threshold
from flapping between read-only and writable (each flip re-registers the bookie).  The
supervisor turns the bookie read-only while any of its directories is full (ledgers map to
directories by id, so adds cannot go around a full one), asks the GC worker for a pass with a
major compaction when one fills, and turns writable again once none is.
"""

from __future__ import annotations

OK, WARN, FULL = "ok", "warn", "full"


def used_fraction(total: int, free: int) -> float:
    return (total - free) / total if total else 0.0


def classify(used: float, previous: str, threshold: float, warn: float, lwm: float) -> str:
    """The state of one directory (module docstring); ``previous`` is its last state."""
    if used >= threshold or (previous == FULL and used >= lwm):
        return FULL
    return WARN if used >= warn else OK
