"""Disk usage states, with hysteresis: the supervisor's decision, as plain code (the I/O,
``disk_usage``, is passed in).

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

import shutil
from collections.abc import Callable

OK, WARN, FULL = "ok", "warn", "full"


def used_fraction(total: int, free: int) -> float:
    return (total - free) / total if total else 0.0


def classify(used: float, previous: str, threshold: float, warn: float, lwm: float) -> str:
    """The state of one directory (module docstring); ``previous`` is its last state."""
    if used >= threshold or (previous == FULL and used >= lwm):
        return FULL
    return WARN if used >= warn else OK


def disk_usage(directory: str) -> tuple[int, int]:
    """(total, free) bytes of the filesystem holding ``directory`` (the real ``usage``)."""
    u = shutil.disk_usage(directory)
    return u.total, u.free


def check(dirs: list[str], states: dict[str, str], conf, usage: Callable) -> tuple[list, list]:
    """Classify every directory, updating ``states`` (directory -> state) in place.

    ``usage(d)`` returns (total, free) or raises OSError (counted full).
    Returns:
        (the full directories, [(directory, new state, used fraction)] for each that changed).
    """
    full, changed = [], []
    for d in dirs:
        try:
            used = used_fraction(*usage(d))
            state = classify(used, states.get(d, OK), conf.disk_usage_threshold,
                             conf.disk_usage_warn_threshold, conf.disk_usage_lwm_threshold)
        except OSError:
            used, state = 1.0, FULL
        if state != states.get(d, OK):
            changed.append((d, state, used))
        states[d] = state
        if state == FULL:
            full.append(d)
    return full, changed
