"""The supervisor's policy as plain code: which worker deaths are restarted, when restarts stop
the bookie, which exits are fatal, and whether the bookie is read-only.

Theory of operation
-------------------
Events in, actions out: ``Supervision.handle(event, now)`` returns the actions to carry out, in
order.  The supervisor (``appliance/supervisor.py``) is the loop around it: it turns process
exits, failed starts, signals, disk checks and the rings' flags into events, and carries out
the actions (start a worker, stop the bookie, flip the ring's read-only flag and the
registration, write a log line).  Nothing here reads a clock, a process or a file.

Rules:

1. A worker that exits with a status in ``fatal_exits`` (corruption found, the journal could not
   be made durable) stops the bookie with that status; it is not restarted.  So does such a
   status from a restart that failed.
2. Any other death is restarted.  It counts toward the role's limit unless the supervisor killed
   the worker itself for memory (``workerMemoryLimitMB``: no client may stop a bookie that way).
   A restart that failed (the new worker gone before it was ready) counts too, and is retried.
3. More than ``restart_limit`` counted deaths of one role within ``window_s`` stop the bookie
   (status 1), naming the role and the last cause.
4. The bookie is read-only exactly while one of its causes holds: forced by an operator
   (SIGUSR1, the admin API), a full disk, no room on a ledger disk (the add worker's flag), a
   full journal disk.  Each change of that answer is one ``ReadOnly`` action and one line at
   warning: an operator must see a bookie stop taking adds, and take them again.
5. A full disk while ``read_only_mode_enabled`` is false stops the bookie (status 1).
6. While disks are full, a GC pass with a major compaction (it may free what adds cannot) is
   asked for when they fill and again every ``gc_wait_s`` while they stay full; never without
   ``gc_wait_s`` (no metadata store: no GC to ask).
"""

from __future__ import annotations

import collections
import dataclasses

CAUSES = ("forced", "disks_full", "no_room", "journal_full")  # of read-only, rule 4


# -- events ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class WorkerDied:
    role: str
    returncode: int  # negative: killed by that signal
    killed_for_memory: bool = False  # by the supervisor itself (rule 2)


@dataclasses.dataclass(frozen=True)
class RestartFailed:
    role: str
    returncode: int | None  # the new worker's exit status, if it exited
    error: str


@dataclasses.dataclass(frozen=True)
class ReadOnlyCause:
    cause: str  # one of CAUSES
    on: bool


@dataclasses.dataclass(frozen=True)
class DisksFull:
    full: tuple[str, ...]  # the directories full now (empty: every one has room)


# -- actions -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Restart:
    role: str


@dataclasses.dataclass(frozen=True)
class Stop:
    reason: str
    code: int


@dataclasses.dataclass(frozen=True)
class ReadOnly:
    on: bool


@dataclasses.dataclass(frozen=True)
class RequestGc:
    major: bool = True


@dataclasses.dataclass(frozen=True)
class Log:
    event: str
    level: str | None = None  # None: info
    fields: tuple[tuple[str, object], ...] = ()


def _how(returncode: int) -> str:
    return f"signal {-returncode}" if returncode < 0 else f"exit status {returncode}"


class Supervision:
    """The policy's state: recent restarts per role and the causes of read-only."""

    def __init__(self, restart_limit: int, fatal_exits: dict[int, str],
                 read_only_mode_enabled: bool = True, window_s: float = 60.0,
                 gc_wait_s: float | None = None):
        self.restart_limit = restart_limit
        self.gc_wait_s = gc_wait_s  # rule 6; None: no GC pass is ever asked for
        self.next_full_gc = 0.0  # while disks are full, ask for a GC pass again from then on
        self.fatal_exits = dict(fatal_exits)
        self.read_only_mode_enabled = read_only_mode_enabled
        self.window_s = window_s
        self.restarts: dict[str, collections.deque[float]] = collections.defaultdict(
            collections.deque)
        self.causes = dict.fromkeys(CAUSES, False)
        self.readonly = False  # what the workers and the store were last told
        self.stopped = False  # a Stop was returned: later events change nothing

    def handle(self, event, now: float) -> list:
        if self.stopped:
            return []
        if isinstance(event, WorkerDied):
            return self._died(event, now)
        if isinstance(event, RestartFailed):
            return self._restart_failed(event, now)
        if isinstance(event, ReadOnlyCause):
            return self._cause(event.cause, event.on)
        if isinstance(event, DisksFull):
            return self._disks(event.full, now)
        raise TypeError(f"not a supervision event: {event!r}")

    # -- restarts (rules 1-3) ------------------------------------------------------------------
    def _died(self, e: WorkerDied, now: float) -> list:
        how = _how(e.returncode)
        if e.returncode in self.fatal_exits:
            return self._stop(f"{e.role} worker {self.fatal_exits[e.returncode]} ({how}); "
                              f"stopping the bookie", e.returncode)
        if not e.killed_for_memory:
            self.restarts[e.role].append(now)
        out = [Log("worker died; restarting it", None, (("role", e.role), ("cause", how)))]
        return out + self._restart_or_stop(e.role, how, now)

    def _restart_failed(self, e: RestartFailed, now: float) -> list:
        if e.returncode in self.fatal_exits:
            return self._stop(f"{e.role} worker {self.fatal_exits[e.returncode]} (exit status "
                              f"{e.returncode}) while restarting; stopping the bookie",
                              e.returncode)
        self.restarts[e.role].append(now)
        out = [Log("worker restart failed; retrying", "warning",
                   (("role", e.role), ("error", e.error)))]
        return out + self._restart_or_stop(e.role, f"a failed restart ({e.error})", now)

    def _restart_or_stop(self, role: str, how: str, now: float) -> list:
        recent = self.restarts[role]
        while recent and now - recent[0] > self.window_s:
            recent.popleft()
        if len(recent) > self.restart_limit:
            return self._stop(f"{role} worker died with {how} {len(recent)} times in a minute; "
                              f"stopping the bookie", 1)
        return [Restart(role)]

    def _stop(self, reason: str, code: int) -> list:
        self.stopped = True
        return [Stop(reason, code)]

    # -- read-only (rules 4-6) -----------------------------------------------------------------
    def _disks(self, full: tuple[str, ...], now: float) -> list:
        if full and not self.read_only_mode_enabled:
            return self._stop(f"disks full ({', '.join(full)}) and readOnlyModeEnabled=false", 1)
        out = []
        if full and self.gc_wait_s is not None and (
                not self.causes["disks_full"] or now >= self.next_full_gc):
            self.next_full_gc = now + self.gc_wait_s
            out.append(RequestGc())
        if bool(full) != self.causes["disks_full"]:
            out.append(Log("disks full" if full else "disks have room again", None,
                           (("full", ",".join(full) or "-"),)))
        return out + self._cause("disks_full", bool(full))

    def _cause(self, cause: str, on: bool) -> list:
        if cause not in self.causes:
            raise ValueError(f"not a cause of read-only: {cause!r}")
        self.causes[cause] = on
        readonly = any(self.causes.values())
        if readonly == self.readonly:
            return []
        self.readonly = readonly
        return [ReadOnly(readonly),
                Log("bookie is now read-only" if readonly else "bookie is writable again",
                    "warning", tuple((c, int(v)) for c, v in self.causes.items()))]
