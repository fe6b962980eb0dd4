"""The workload of one round: client processes (``client_proc``) started, signalled and reaped.

Slots: writer ``i`` (modes sync, async, bulk in turn, each with a tailer following it), one log
writer and one log reader.  A killed writer's slot gets a new process (a new generation) when
the fault ends; concurrent recoveries and log takeovers are short-lived extra processes.
Every process writes its own history file in the round's directory.  Each round also runs
one ``quota`` writer (client_proc.py): the bookies run with ``QUOTA_BYTES`` of
``ledgerStorageQuotaBytes`` (runner.py's ``BOOKIE_CONF``), which the other writers' ledgers
rarely reach in a round and this one reaches in seconds: its refused adds are never
acknowledged, the others write on, and its ledger is recovered (re-added to the bookie over
quota) and checked as every other one.

The run's own workload (``tag="run"``, no log, no deleter) is a ``Workload`` too: one writer
and its tailer started with the run and stopped at its end, whose ledgers (and tailer) live
across every round and meet every fault.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

from bookie.testing.nemesis.history import read_events
from bookie.workers.processes import set_pdeathsig

WRITER_MODES = ("sync", "async", "bulk")
# With lifecycle faults also create_ledger_adv writers and DEFERRED_SYNC writers; the modes turn
# with the round (slot + round), so every mode writes within two rounds
LIFECYCLE_MODES = ("adv", "deferred", "sync", "async", "bulk")
RACKS = 2  # with lifecycle faults bookie i is in rack /nemesis/rack(i % RACKS)
# (ensemble, write quorum, ack quorum): Qw > Qa exercises fencing's (Qw - Qa) + 1 rule.
QUORUMS = ((3, 2, 2), (3, 3, 2), (2, 2, 2), (3, 2, 1), (2, 2, 1))
# With lifecycle faults a bookie may be lost for good: an entry acknowledged by one bookie
# alone may legitimately go with it, so every ack quorum is at least 2.
LIFECYCLE_QUORUMS = ((3, 2, 2), (3, 3, 2), (2, 2, 2))


def rack_quorum(quorum: tuple[int, int, int]) -> tuple[int, int, int]:
    """A quorum ``RACKS`` racks can place with ``enforceMinNumRacksPerWriteQuorum``: an odd
    ensemble whose write sets are pairs cannot alternate two racks round its ring (E3 Qw2 is
    refused a ledger for good), so such a writer writes to every bookie of its ensemble."""
    e, qw, qa = quorum
    return (e, e, qa) if e % RACKS and qw < e else quorum
LOG_NAME = "nemesis-log"  # one log for the whole run: each round's log writer takes it over
QUOTA_BYTES = 2 << 20  # the bookies' ledgerStorageQuotaBytes (runner.py BOOKIE_CONF)
QUOTA_QUORUM = (2, 2, 2)  # every entry on both bookies: the quota writer reaches it soonest
CLIENT_CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 30.0,
                 "zkTimeout": 6000, "explicitLacInterval": 50}


class Workload:
    """The client processes of one round.

    Args:
        directory: the round's directory (history files go there).
        metadata_uri: the store every client opens.
        seed, round_no: what the writers' quorums and modes are drawn from.
        writers: number of writer slots.
        bookies: number of bookies (quorums keep one bookie spare when they can).
        prefix: ``prefix(name)`` -> argv prefix to start a client process with (a network
            namespace), or None.
        lifecycle: quorums with an ack quorum of at least 2 (``LIFECYCLE_QUORUMS``).
        tag: prefix of the process names (default ``r<round_no>``).
        with_log: start the log writer and reader (the run's own workload does not).
        deletes: ledger ids a deleter process deletes during the round.
    """

    def __init__(self, directory: str, metadata_uri: str, seed: int, round_no: int,
                 writers: int, bookies: int, prefix=None, *, lifecycle: bool = False,
                 tag: str | None = None, with_log: bool = True, deletes=(),
                 round_s: float = 15.0):
        self.directory = directory
        self.metadata_uri = metadata_uri
        self.round_no = round_no
        self.tag = tag or f"r{round_no}"
        self.n_writers = writers
        self.prefix = prefix or (lambda name: [])
        rng = random.Random(f"workload:{seed}:{self.tag}")
        menu = LIFECYCLE_QUORUMS if lifecycle else QUORUMS
        fits = [q for q in menu if q[0] <= max(2, bookies - 1)] or [menu[-1]]
        self.quorums = [rng.choice(fits) for _ in range(writers)]
        self.log_name = LOG_NAME
        self.with_log = with_log
        self.deletes = list(deletes)
        self.round_s = round_s
        self.procs: dict[str, subprocess.Popen] = {}
        self.writer_names: list[str] = []
        self.writer_modes: dict[int, str] = {}  # slot -> its writer's mode
        self.paused: set[str] = set()
        self._generation = [0] * (writers + 1)
        self._extra = 0
        self.lifecycle = lifecycle

    def history_path(self, name: str) -> str:
        return os.path.join(self.directory, f"{name}.jsonl")

    def _spawn(self, name: str, role: str, **spec) -> None:
        spec.setdefault("config", CLIENT_CONFIG)
        spec.update(role=role, name=name, history=self.history_path(name),
                    metadata=self.metadata_uri)
        cmd = [*self.prefix(name), sys.executable, "-m", "bookie.testing.nemesis.client_proc",
               json.dumps(spec)]
        with open(os.path.join(self.directory, f"{name}.out"), "ab") as out:
            self.procs[name] = subprocess.Popen(cmd, stdout=out, stderr=out,
                                                stdin=subprocess.DEVNULL, preexec_fn=set_pdeathsig)

    def _writer_name(self, slot: int) -> str:
        return f"{self.tag}w{slot}g{self._generation[slot]}"

    def _start_writer(self, slot: int) -> None:
        name = self._writer_name(slot)
        turn = slot + (self.round_no if self.lifecycle else 0)
        modes = LIFECYCLE_MODES if self.lifecycle else WRITER_MODES
        # with lifecycle faults every other writer enforces 2 racks a write quorum
        racks = self.lifecycle and turn % 2 == 1
        quorum = self.quorums[slot]
        if racks:
            quorum = rack_quorum(quorum)
        self.writer_modes[slot] = modes[turn % len(modes)]
        # bookies on this host serve local sockets too (workers/local_sockets.py): writers of
        # even slots and their tailers take them, the others TCP with the pinned key
        config = dict(CLIENT_CONFIG, useLocalSockets=slot % 2 == 0)
        self._spawn(name, "writer", mode=self.writer_modes[slot],
                    quorum=quorum, seed=f"{self.tag}:{slot}",
                    close_at_end=slot % 2 == 0, racks=racks, config=config)
        self._spawn(f"{name}t", "tailer", follow=self.history_path(name), seed=slot,
                    config=config)
        self.writer_names[slot] = name

    def _start_log_writer(self) -> None:
        gen = self._generation[self.n_writers]
        name = f"{self.tag}log" + (f"g{gen}" if gen else "")
        self._spawn(name, "log_writer", log=self.log_name)
        self.writer_names[self.n_writers] = name

    def start(self) -> None:
        self.writer_names = [""] * (self.n_writers + 1)  # the last slot: the log writer
        for slot in range(self.n_writers):
            self._start_writer(slot)
        if self.with_log:
            self._start_log_writer()
            self._spawn(f"{self.tag}logread", "log_reader", log=self.log_name)
        if self.with_log:  # a round's workload: one writer meant to pass its quota
            # over TCP: its ledger is its own quota identity (runner.py BOOKIE_CONF's
            # localClientRoles makes this uid admin, exempt, over the local sockets)
            self._spawn(f"{self.tag}quota", "writer", mode="quota", quorum=QUOTA_QUORUM,
                        seed=f"{self.tag}:quota",
                        config=dict(CLIENT_CONFIG, useLocalSockets=False))
        if self.deletes:
            self._spawn(f"{self.tag}del", "deleter", ledgers=self.deletes,
                        pace_s=max(0.05, self.round_s * 0.8 / (len(self.deletes) + 1)))

    def wait_writing(self, timeout_s: float = 30.0) -> bool:
        """Wait until every writer has created its first ledger (client processes take seconds
        to start on a loaded machine, and the faults are meant for a running workload).
        Returns False if ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.current_ledger(slot) is not None for slot in range(self.n_writers)):
                return True
            time.sleep(0.1)
        return False

    # -- faults ----------------------------------------------------------------------------------
    def writer_proc(self, slot: int) -> subprocess.Popen:
        return self.procs[self.writer_names[slot]]

    def kill_writer(self, slot: int) -> None:
        """SIGKILL writer ``slot`` (its tailer keeps reading the ledgers it left); slot
        ``writers`` is the log writer."""
        p = self.writer_proc(slot)
        if p.poll() is None:
            p.kill()
            p.wait(10)

    def restart_writer(self, slot: int) -> None:
        """A new writer process in ``slot`` if the old one is gone (its tailer is replaced too)."""
        if self.writer_proc(slot).poll() is None:
            return
        if slot == self.n_writers:
            self._generation[slot] += 1
            self._start_log_writer()  # its open_log takes the log over from the dead one
            return
        old_tailer = self.procs.get(f"{self.writer_names[slot]}t")
        if old_tailer is not None and old_tailer.poll() is None:
            old_tailer.terminate()
        self._generation[slot] += 1
        self._start_writer(slot)

    def pause_writer(self, slot: int) -> None:
        name = self.writer_names[slot]
        if self.procs[name].poll() is None:
            os.kill(self.procs[name].pid, signal.SIGSTOP)
            self.paused.add(name)

    def resume_all(self) -> None:
        for name in list(self.paused):
            if self.procs[name].poll() is None:
                os.kill(self.procs[name].pid, signal.SIGCONT)
            self.paused.discard(name)

    def current_ledger(self, slot: int) -> int | None:
        created = [ev["l"] for ev in read_events(self.history_path(self.writer_names[slot]))
                   if ev["ev"] == "create"]
        return created[-1] if created else None

    def deferred_ledgers(self) -> list[int]:
        """The current ledgers of the DEFERRED_SYNC writers (``mode`` deferred)."""
        slots = [s for s, mode in self.writer_modes.items() if mode == "deferred"]
        return [lid for lid in map(self.current_ledger, slots) if lid is not None]

    def recover_race(self, slot: int) -> int | None:
        """Two processes recover writer ``slot``'s current ledger at once; returns the ledger."""
        ledger_id = self.current_ledger(slot)
        if ledger_id is None:
            return None
        for _ in range(2):
            self._extra += 1
            self._spawn(f"{self.tag}rec{self._extra}", "recover", ledger=ledger_id)
        return ledger_id

    def log_takeover(self) -> None:
        """A one-shot writer opens the log (fencing its writer), appends a few entries, closes."""
        self._extra += 1
        self._spawn(f"{self.tag}take{self._extra}", "log_writer", log=self.log_name,
                    max_appends=5)

    # -- end of round ----------------------------------------------------------------------------
    def stop(self, drain_s: float = 15.0) -> list[str]:
        """SIGTERM every client, wait up to ``drain_s`` for them to finish, SIGKILL the rest.
        Returns the names of those that had to be killed."""
        self.resume_all()
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + drain_s
        killed = []
        for name, p in self.procs.items():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
                killed.append(name)
        return killed
