"""CPU per operation, per process role, from /proc: the figure a shared machine disturbs least.

Theory of operation
-------------------
Wall-clock rates move by tens of percent with whatever else runs on the cores; the CPU time a
process spent on the work moves far less.  So every phase of a run (``report.Meter``) takes a
``Snapshot`` when it starts and another when it finishes, and divides the difference by the
operations it completed: microseconds of CPU per operation.

A snapshot is ``utime + stime`` (/proc/PID/stat: every thread of the process, living or exited,
not its children) of this process and of every process descended from it, each under a *role*:

* ``client``: this process (the bench's own client, or the journal itself for ``bench journal``);
* a bookie worker, by its process title (``bookie[3181] journal-1`` -> ``journal``, the worker's
  ``setproctitle`` name, workers/common.py): ``journal``, ``add``, ``read``, ``gc``, ...;
* ``supervisor``: a bookie's supervisor (``python -m bookie run``, the parent of the workers);
* ``other``: any other descendant (the tailed writer of ``bench reads --listen``).

Roles are summed over processes (three local bookies: ``add`` is their three add workers).
Only descendants are seen: bookies this run did not start (``--metadata``, ``--bookie``) are not
counted, and the figures then hold ``client`` alone.  A process that exits during the phase is
lost from the figure (its counters go with it); one that starts during it counts from zero.
The kernel counts in clock ticks (``SC_CLK_TCK``, usually 10 ms), so a phase of a few seconds
and thousands of operations is what makes the figure meaningful.
"""

from __future__ import annotations

import os
import re

from bookie.testing.localbookies import children_of

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_TITLE = re.compile(r"^bookie\[[^\]]*\] ([a-z]+)")


def _cpu_s(pid: int) -> float | None:
    """utime + stime of one process, in seconds; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S  # fields 14 and 15 of stat(5)


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").strip().decode(errors="replace")
    except OSError:
        return ""


def role_of(title: str) -> str:
    """The role of a process from its title (/proc/PID/cmdline)."""
    m = _TITLE.match(title)
    if m:
        return m.group(1)
    if " -m bookie run" in title or title.endswith(" bookie run"):
        return "supervisor"
    return "other"


def snapshot(root: int | None = None) -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds so far) of ``root`` (default: this process) and every process
    descended from it."""
    root = os.getpid() if root is None else root
    out: dict[int, tuple[str, float]] = {}
    todo = [(root, "client")]
    while todo:
        pid, role = todo.pop()
        cpu = _cpu_s(pid)
        if cpu is None:
            continue
        out[pid] = (role, cpu)
        todo += [(c, role_of(_title(c))) for c in children_of(pid)]
    return out


def per_op_us(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
              ops: int) -> dict[str, float]:
    """CPU microseconds per operation by role, and their ``total``, between two snapshots.

    A process only in ``after`` counts from zero; one only in ``before`` (gone) not at all.
    Every role seen in ``after`` has a key; no operations: every figure 0.
    """
    roles: dict[str, float] = {"client": 0.0}
    for pid, (role, cpu) in after.items():
        was = before.get(pid)
        spent = cpu - (was[1] if was is not None else 0.0)
        roles[role] = roles.get(role, 0.0) + max(spent, 0.0)
    scale = 1e6 / ops if ops > 0 else 0.0
    figures = {"total": sum(roles.values()) * scale}
    figures.update((role, spent * scale) for role, spent in sorted(roles.items()))
    return figures
