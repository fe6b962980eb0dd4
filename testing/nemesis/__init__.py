"""A seeded, Jepsen-style fault-injection harness for bookies and their clients.

    python -m bookie.testing.nemesis --seed 7 --time 60 --bookies 5 --metadata lmdb|zk \\
        [--disk] [--network]

or from Python::

    from bookie.testing.nemesis import Options, run
    summary = run(Options(seed=7, time_s=60))
    assert summary.ok, summary.text()

Writers (sync, async and bulk adds, a log), tailers and log readers run as client processes
against N local bookies; a nemesis kills, pauses, restarts, fills disks under and partitions
them (and ZooKeeper, and the clients) on a schedule drawn from the seed; after each round
every fault is healed, every ledger recovered and read back, and a checker tests the recorded
history against what recovery found.  docs/testing.md describes it in full.

Modules: ``schedule`` (seed -> faults), ``faults`` (the nemesis), ``workload`` and
``client_proc`` (client processes), ``history`` (what they record), ``payload`` (traceable
entry bytes), ``checker`` (the rules), ``zkserver``, ``disk``, ``network`` (fault targets),
``runner`` (rounds and the summary).
"""

from __future__ import annotations

import importlib

__all__ = ["Options", "Summary", "run"]


def __getattr__(name: str):
    # The face is lazy: a module of the package (``runner`` importing ``disk``) passes through
    # this file without it importing ``runner`` back.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("bookie.testing.nemesis.runner"), name)
    globals()[name] = value
    return value
