"""The nemesis: turns a scheduled ``Fault`` into signals, restarts, full disks and cut links.

``Nemesis.inject(fault)`` starts a fault and returns how to heal it (a callable, or None for a
fault that heals itself, like a worker the supervisor restarts); ``heal_all()`` ends whatever is
still active and brings every bookie, ZooKeeper and the clients back, so that a round's check
runs against a healthy cluster.  A fault whose target is not there at the moment (a bookie
already down, a worker being restarted) is skipped and counted as such: the schedule stays the
seed's, what happens to it depends on the moment.
"""

from __future__ import annotations

import collections
import os
import signal
import threading

from bookie.testing.localbookies import LocalBookieError
from bookie.testing.nemesis.lifecycle import LifecycleFaults
from bookie.testing.nemesis.schedule import Fault
from bookie.testing.nemesis.tamper import TamperFault


class Nemesis(LifecycleFaults, TamperFault):
    """Injects faults into one cluster.

    Args:
        bookies: the ``LocalBookies``.
        workload: the current round's ``Workload`` (set by the runner each round).
        zookeeper: a ``RestartableZooKeeper`` or None.
        disk: a ``DiskFaults`` or None.
        network: a ``Network`` or None.
        zk_session_s: the bookies' ZooKeeper session timeout (``expire_bookie`` pauses longer).
        client_session_s: the clients' session timeout (``expire_client`` pauses longer).
        log: ``log(line)`` for what the nemesis does.
    """

    def __init__(self, bookies, zookeeper=None, disk=None, network=None,
                 zk_session_s: float = 4.0, client_session_s: float = 6.0, log=print):
        self.bookies = bookies
        self.workload = None
        self.zookeeper = zookeeper
        self.disk = disk
        self.network = network
        self.zk_session_s = zk_session_s
        self.client_session_s = client_session_s
        self.log = log
        self.injected = collections.Counter()
        self.skipped = collections.Counter()
        self.paused_pids: set[int] = set()
        self.bookie_exits: list[str] = []
        self._starting: set[int] = set()
        self._restarts: list[threading.Thread] = []
        self._restarting: set[int] = set()  # being stopped and started by a thread
        # Bookies a thread has stopped and wants started: started by ``tick`` in the runner's
        # own thread, because a bookie gets SIGTERM (PDEATHSIG) when the thread that started
        # it ends.
        self._to_start: list[int] = []
        self._to_start_lock = threading.Lock()
        self._lifecycle_init()

    # -- one fault -------------------------------------------------------------------------------
    def inject(self, fault: Fault):
        """Start ``fault``; returns a callable that heals it, or None."""
        try:
            heal = getattr(self, f"_{fault.kind}")(*fault.target)
        except _Skip as why:
            self.skipped[fault.kind] += 1
            self.log(f"nemesis: skip {fault.describe()}: {why}")
            return None
        self.injected[fault.kind] += 1
        self.log(f"nemesis: {fault.describe()}")
        return heal

    def _alive(self, i: int) -> None:
        if i in self._restarting:
            raise _Skip(f"bookie {i} is restarting")
        if i in self._starting and self._serving(i):
            self._starting.discard(i)
        if not self.bookies.running(i) or i in self._starting:
            raise _Skip(f"bookie {i} is not running")

    def _serving(self, i: int) -> bool:
        """Has bookie ``i``'s current start reached "serving"? (LocalBookies.wait_serving's
        test, without waiting.)"""
        try:
            with open(self.bookies.log_path(i), "rb") as f:
                f.seek(self.bookies._log_offsets.get(i, 0))
                return b"supervisor: bookie serving" in f.read()
        except OSError:
            return False

    def _kill_bookie(self, i: int):
        self._alive(i)
        self.bookies.kill(i)
        return lambda: self._start(i)

    def _restart_bookie(self, i: int):
        """SIGTERM bookie ``i`` and start it again, in a thread of its own (a clean stop takes
        seconds, and the schedule goes on meanwhile); the bookie counts as starting until
        then, so no other fault picks it."""
        self._alive(i)
        self._cont_group(i)
        self._restarting.add(i)

        def restart() -> None:
            try:
                self.bookies.stop(i)
            except LocalBookieError as exc:
                self.log(f"nemesis: {exc}")
            finally:
                self.start_later(i)
        thread = threading.Thread(target=restart, name=f"restart-bookie-{i}", daemon=True)
        thread.start()
        self._restarts.append(thread)
        return None

    def _pause_bookie(self, i: int):
        self._alive(i)
        pgid = self.bookies.procs[i].pid
        os.killpg(pgid, signal.SIGSTOP)
        self.paused_pids.add(-pgid)
        return lambda: self._cont(-pgid)

    def _pid(self, i: int, role: str) -> int:
        self._alive(i)
        if role == "supervisor":
            return self.bookies.procs[i].pid
        try:
            return self.bookies.worker_pid(i, role)
        except LocalBookieError:
            raise _Skip(f"bookie {i} has no {role} worker right now") from None

    def _kill_role(self, i: int, role: str):
        pid = self._pid(i, role)
        os.kill(pid, signal.SIGKILL)
        if role == "supervisor":
            # Its workers stop by PDEATHSIG; the bookie comes back when the fault ends.
            return lambda: self._start(i)
        return None

    def _pause_role(self, i: int, role: str):
        pid = self._pid(i, role)
        os.kill(pid, signal.SIGSTOP)
        self.paused_pids.add(pid)
        return lambda: self._cont(pid)

    def _expire_bookie(self, i: int):
        """SIGSTOP the supervisor (it holds the ZooKeeper session) past the session timeout
        (``min_duration_s`` makes the runner keep it stopped that long)."""
        pid = self._pid(i, "supervisor")
        os.kill(pid, signal.SIGSTOP)
        self.paused_pids.add(pid)
        return lambda: self._cont(pid)

    def _expire_client(self, slot: int):
        """SIGSTOP a writer past its ZooKeeper session timeout (``min_duration_s``)."""
        if self.zookeeper is None:
            raise _Skip("no ZooKeeper")
        self.workload.pause_writer(slot)
        return self.workload.resume_all

    def min_duration_s(self, kind: str) -> float:
        """The least time a fault of ``kind`` must last to do what it says."""
        if kind == "expire_bookie":
            return self.zk_session_s * 1.5
        if kind == "expire_client":
            return self.client_session_s * 1.5
        return 0.0

    def _readonly(self, i: int):
        self._alive(i)
        self.bookies.set_readonly(i, True)
        return lambda: self.bookies.running(i) and self.bookies.set_readonly(i, False)

    def _kill_client(self, slot: int):
        self.workload.kill_writer(slot)
        return lambda: self.workload.restart_writer(slot)

    def _pause_client(self, slot: int):
        self.workload.pause_writer(slot)
        return self.workload.resume_all

    def _recover_race(self, slot: int):
        if self.workload.recover_race(slot) is None:
            raise _Skip(f"writer {slot} has no ledger yet")
        return None

    def _log_takeover(self):
        self.workload.log_takeover()
        return None

    def _zk_restart(self):
        if self.zookeeper is None:
            raise _Skip("no ZooKeeper")
        self.zookeeper.kill()
        return self._zk_back

    def _zk_pause(self):
        if self.zookeeper is None:
            raise _Skip("no ZooKeeper")
        self.zookeeper.pause()
        return self.zookeeper.resume

    def _zk_back(self) -> None:
        if not self.zookeeper.running:
            self.zookeeper.relaunch()

    def _disk_full(self, i: int, which: str):
        if self.disk is None:
            raise _Skip("no tmpfs disks")
        self.disk.fill(i, which)
        return lambda: self.disk.free(i, which)

    def _partition(self, shape: str, way: str, *nodes):
        if self.network is None:
            raise _Skip("no network namespaces")
        return self.network.partition(shape, way, nodes)

    def _partitioned_recovery(self, slot: int, *cut):
        """The writers lose bookies ``cut`` while two recoveries (in a namespace that still
        reaches every bookie) fence and close writer ``slot``'s ledger."""
        if self.network is None:
            raise _Skip("no network namespaces")
        if self.workload.current_ledger(slot) is None:
            raise _Skip(f"writer {slot} has no ledger yet")
        heal = self.network.partition("clients_from_bookies", "both", cut)
        self.workload.recover_race(slot)
        return heal

    def _lossy(self, i: int, percent: int):
        if self.network is None:
            raise _Skip("no network namespaces")
        return self.network.lossy(i, percent)

    def _slow(self, i: int, kbit: int):
        if self.network is None:
            raise _Skip("no network namespaces")
        return self.network.slow(i, kbit)

    # -- healing ---------------------------------------------------------------------------------
    def _cont(self, pid: int) -> None:
        try:
            if pid < 0:
                os.killpg(-pid, signal.SIGCONT)
            else:
                os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.paused_pids.discard(pid)

    def _cont_group(self, i: int) -> None:
        p = self.bookies.procs[i]
        if p is not None:
            for pid in list(self.paused_pids):
                if pid == -p.pid or pid == p.pid or pid in _group_members(p.pid):
                    self._cont(pid)

    def start_later(self, i: int) -> None:
        """From a thread: bookie ``i`` is to be started (by ``tick``, in the runner's thread);
        it counts as restarting until then."""
        with self._to_start_lock:
            self._to_start.append(i)

    def tick(self) -> None:
        """Start the bookies threads asked for (``start_later``); the runner calls this often."""
        with self._to_start_lock:
            pending, self._to_start = self._to_start, []
        for i in pending:
            try:
                self._start(i)
            finally:
                self._restarting.discard(i)

    def _start(self, i: int) -> None:
        """Start bookie ``i`` without waiting (``heal_all`` waits)."""
        if self.bookies.running(i):
            return
        self._cont_group(i)
        # A supervisor killed alone leaves workers that stop on PDEATHSIG: wait for the ports.
        self.bookies._wait_ports_free(i)
        self.bookies.start(i, wait=False)
        self._starting.add(i)

    def settle(self, attempts: int = 3) -> None:
        """Wait for bookies started by heals.  A bookie that exits while starting (say it
        found ZooKeeper down, which a bookie refuses to start without) is started again, up to
        ``attempts`` times; one that still cannot start is logged."""
        for i in sorted(self._starting):
            for attempt in range(attempts):
                try:
                    self.bookies.wait_serving(i)
                    break
                except LocalBookieError as exc:
                    self.log(f"nemesis: bookie {i} did not come back (try {attempt + 1}): "
                             f"{str(exc).splitlines()[0]}")
                    if attempt + 1 == attempts or self.bookies.running(i):
                        self.bookie_exits.append(f"bookie {i} did not come back: "
                                                 f"{str(exc).splitlines()[0]}")
                        break
                    self.bookies._wait_ports_free(i)
                    self.bookies.start(i, wait=False)
        self._starting.clear()

    def heal_all(self, heals: list) -> None:
        """Run the pending heals, then bring every part of the cluster back."""
        for thread in self._restarts:
            thread.join(300.0)  # a decommission or a rebuild takes a while
        self._restarts.clear()
        self.tick()
        if self.network is not None:
            self.network.heal()
        for pid in list(self.paused_pids):
            self._cont(pid)
        if self.zookeeper is not None:
            self.zookeeper.resume()
        for heal in heals:
            try:
                heal()
            except Exception as exc:  # noqa: BLE001 - a heal that fails is retried below
                self.log(f"nemesis: heal failed: {exc}")
        if self.disk is not None:
            self.disk.free_all()
        if self.zookeeper is not None and not self.zookeeper.running:
            self.zookeeper.relaunch()
        for i in range(self.bookies.n):
            p = self.bookies.procs[i]
            if p is not None and p.poll() is not None and i not in self._starting:
                self.bookie_exits.append(f"bookie {i} had exited with status {p.returncode}")
            self._start(i)
        self.settle()
        for i in range(self.bookies.n):
            if self.bookies.running(i):
                self.bookies.set_readonly(i, False)


class _Skip(Exception):
    """The fault's target is not there at the moment."""


Nemesis._Skip = _Skip  # the lifecycle faults raise it too


def _group_members(pgid: int) -> set[int]:
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.add(int(entry))
            except OSError:
                pass
    return members
