"""The fault schedule: a pure function of (seed, round, options), so a failing seed replays.

``make_schedule`` draws every fault of a round - when, what, against which target, for how
long - from ``random.Random(f"{seed}:{round_no}")`` alone: no clock, no process state.  The
runner maps a target (a bookie index, a worker role, a client slot) onto whatever process
holds it at that moment.  Faults may overlap (at most ``max_active`` at once); each one ends
(is healed) at ``at_s + duration_s``, and every fault left is healed when the round ends.

Fault kinds (``KINDS``; which are drawn depends on the run's options, ``enabled_kinds``):

=====================  =================================================================
``kill_bookie``        SIGKILL a bookie (supervisor and workers); restart it when it ends
``restart_bookie``     SIGTERM a bookie and start it again at once
``pause_bookie``       SIGSTOP a bookie's process group; SIGCONT when it ends
``kill_role``          SIGKILL one process of a bookie: its supervisor (the bookie is
                       restarted when the fault ends) or a journal/add/read/gc worker (its
                       supervisor restarts it)
``pause_role``         SIGSTOP one process of a bookie (supervisor or a worker)
``readonly``           flip a bookie read-only; back to writable when it ends
``kill_client``        SIGKILL a writer process (slot ``writers`` is the log writer); a new
                       one takes its slot when it ends
``pause_client``       SIGSTOP a writer process
``recover_race``       two clients recover a writer's current ledger at the same time
``log_takeover``       another client opens the log, fencing its writer
``zk_restart``         stop ZooKeeper; start it again (same data) when the fault ends
``zk_pause``           SIGSTOP ZooKeeper (sessions time out meanwhile)
``expire_bookie``      SIGSTOP a bookie's supervisor past its ZooKeeper session timeout
``expire_client``      SIGSTOP a writer process past its ZooKeeper session timeout
``disk_full``          fill the tmpfs under a bookie's journal or ledger directory
``partition``          cut the network: a bookie from everyone, clients from some bookies,
                       a bookie from ZooKeeper, or a random split (both ways or one way)
``partitioned_recovery``  cut the writers off from some bookies (both ways) and recover a
                       writer's ledger from clients that still reach every bookie
``lossy``              drop a share of the packets between a node and everyone else
``slow``               rate-limit a node's outgoing link (queueing delay, no netem needed)
=====================  =================================================================

Lifecycle kinds (``--lifecycle``; ``lifecycle.py`` injects them):

=====================  =================================================================
``compaction``         a GC pass with a forced minor or major compaction (``triggergc``)
``rebuild_index``      stop a bookie, lose or damage its index, ``rebuild-index``, start
``lost_for_good``      SIGKILL a bookie, wipe its disks, start an empty replacement under a
                       new id; autorecovery heals around it (and, for target ``operator``,
                       ``bookie shell recover`` too)
``decommission``       ``bookie shell decommissionbookie`` of a live, read-only bookie,
                       then the same replacement
``squat``              a hostile client: adds with a wrong key to live ledgers, adds that
                       squat ledger ids not created yet, a fence with a wrong key
``disk_readonly``      fill a bookie's ledger disk past ``diskUsageThreshold`` (it turns
                       read-only), then drain it (tmpfs disks: root)
``readdress``          stop a bookie and start it on another port under its ``bookieId``
``overreplicated``     copy a closed ledger's position to a bookie it does not name (a
                       replication whose repoint never happened), wait for that bookie's GC
                       to drop the copy, then heal the position onto that very bookie (copy
                       again, repoint): it is chosen again as the replacement
``tamper``             change an entry of a verifiable ledger on a stopped bookie's disk,
                       digest recomputed (``tamper.py``); reads must never return it
``journal_full``       fill one journal disk of a bookie (tmpfs; the bookie has several
                       journals), then free it; a bookie that stopped over it is started again
``rename``             the documented rename of a bookie with the writers open and autorecovery
                       on: stop, ``updatecookie`` with a new ``bookieId``, a pause,
                       ``updateledgers --from OLD --to NEW``, start under the new id
``deferred_loss``      SIGKILL a bookie that a DEFERRED_SYNC writer's current ledger names; it
                       is started again when the fault ends (the writer replaces it meanwhile)
=====================  =================================================================

Every lifecycle kind happens in every run long enough for a few rounds: each round also gets
``owed_faults`` for up to ``OWED_PER_ROUND`` (4) lifecycle kinds not injected yet in the run
(the runner says which), at fixed times, besides the seed's random draw.

At most one of ``LOSS_KINDS`` per round: a loss before the last one's healing could take two
copies of an entry, which no ack quorum the workload uses promises to survive.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

ROLES = ("supervisor", "journal", "add", "read", "gc")
PROCESS_KINDS = ("kill_bookie", "restart_bookie", "pause_bookie", "kill_role", "pause_role",
                 "readonly", "kill_client", "pause_client", "recover_race", "log_takeover")
ZK_KINDS = ("zk_restart", "zk_pause", "expire_bookie", "expire_client")
DISK_KINDS = ("disk_full",)
NET_KINDS = ("partition", "partitioned_recovery", "lossy", "slow")
LIFECYCLE_KINDS = ("compaction", "rebuild_index", "lost_for_good", "decommission", "squat",
                   "disk_readonly", "readdress", "overreplicated", "journal_full", "rename",
                   "deferred_loss", "tamper")
DISK_LIFECYCLE_KINDS = ("disk_readonly", "journal_full")  # need tmpfs disks
OWED_PER_ROUND = 4
# the order owed kinds are forced in: the newest mechanisms first; ``overreplicated`` last (it
# writes a closed ledger of its own when none fits)
OWED_ORDER = ("rename", "deferred_loss", "tamper", "lost_for_good", "readdress", "journal_full", "squat",
              "compaction",
              "rebuild_index", "decommission", "disk_readonly", "overreplicated")
LOSS_KINDS = ("lost_for_good", "decommission")
KINDS = PROCESS_KINDS + ZK_KINDS + DISK_KINDS + NET_KINDS + LIFECYCLE_KINDS


@dataclass(frozen=True)
class Fault:
    """One fault: starts ``at_s`` seconds into the round, healed ``duration_s`` later.

    ``target`` is a tuple whose shape depends on ``kind`` (see ``_target``)."""
    at_s: float
    kind: str
    target: tuple
    duration_s: float

    def describe(self) -> str:
        return (f"t+{self.at_s:5.2f}s {self.kind}{list(self.target)} "
                f"for {self.duration_s:.2f}s")


def enabled_kinds(*, zookeeper: bool, disk: bool, network: bool,
                  lifecycle: bool = False) -> tuple[str, ...]:
    """The fault kinds a run with these capabilities draws from, in a fixed order."""
    kinds = list(PROCESS_KINDS)
    if zookeeper:
        kinds += ZK_KINDS
    if disk:
        kinds += DISK_KINDS
    if network:
        kinds += NET_KINDS
    if lifecycle:
        kinds += LIFECYCLE_KINDS
    return tuple(kinds)


def owed_faults(seed: int, round_no: int, round_s: float, owed, bookies: int, writers: int,
                disk_bookies: int = 0, per_round: int = OWED_PER_ROUND) -> list[Fault]:
    """Faults of up to ``per_round`` of the ``owed`` lifecycle kinds (in ``OWED_ORDER``, at
    most one of ``LOSS_KINDS``, none needing disks a run has not), at fixed times spread over
    the round, each on a bookie of its own where it can; targets drawn from the seed, the
    round and the kind."""
    end_by = round_s - 1.0
    picked: list[str] = []
    for kind in OWED_ORDER:
        if kind not in owed or len(picked) >= per_round:
            continue
        if kind in DISK_LIFECYCLE_KINDS and not disk_bookies:
            continue
        if kind in LOSS_KINDS and any(k in LOSS_KINDS for k in picked):
            continue
        picked.append(kind)
    out = []
    used: set[int] = set()
    for n, kind in enumerate(picked):
        rng = random.Random(f"{seed}:{round_no}:owed:{kind}")
        target = _target(rng, kind, bookies, writers, disk_bookies)
        for _ in range(8):  # another bookie than the other owed faults', if there is one
            if target is None or not target or target[0] not in used:
                break
            target = _target(rng, kind, bookies, writers, disk_bookies)
        if target:
            used.add(target[0])
        at_s = round(1.0 + n * max(0.5, (round_s - 4.0) / per_round), 3)
        if target is None or at_s >= end_by - 0.5:
            continue
        duration_s = math.floor(min(3.0, end_by - at_s) * 1000) / 1000
        out.append(Fault(at_s, kind, target, duration_s))
    return out


def make_schedule(seed: int, round_no: int, round_s: float, kinds: tuple[str, ...],
                  bookies: int, writers: int, disk_bookies: int = 0, *,
                  mean_gap_s: float = 1.5, max_active: int = 2, owed=()) -> list[Fault]:
    """Every fault of round ``round_no``, by start time; the same arguments give the same list.

    Faults start in [0.5 s, round_s - 2 s) and end before round_s - 1 s, leaving the end of
    the round quiet; at most ``max_active`` of the seed's draw overlap.  ``owed``: lifecycle
    kinds the run has not injected yet: ``owed_faults`` are added for them (the draw then
    takes no other loss kind)."""
    if not kinds:
        return []
    rng = random.Random(f"{seed}:{round_no}")
    forced = owed_faults(seed, round_no, round_s, [k for k in owed if k in kinds], bookies,
                         writers, disk_bookies) if owed else []
    faults: list[Fault] = []
    at_s = 0.5 + rng.uniform(0, mean_gap_s)
    end_by = round_s - 1.0
    while at_s < round_s - 2.0:
        kind = rng.choice(kinds)
        target = _target(rng, kind, bookies, writers, disk_bookies)
        start_s = round(at_s, 3)
        # Floored to the millisecond, so that start + duration never passes end_by.
        duration_s = math.floor(min(rng.uniform(0.5, 4.0), end_by - start_s) * 1000) / 1000
        active = [f for f in faults if f.at_s + f.duration_s > start_s]
        if kind in LOSS_KINDS and any(f.kind in LOSS_KINDS for f in faults + forced):
            target = None
        if target is not None and len(active) < max_active:
            faults.append(Fault(start_s, kind, target, duration_s))
        at_s += rng.expovariate(1.0 / mean_gap_s)
    return sorted(faults + forced, key=lambda f: f.at_s)


def _target(rng: random.Random, kind: str, bookies: int, writers: int,
            disk_bookies: int) -> tuple | None:
    """The target of one fault of ``kind``, or None if this run has nothing it could hit."""
    bookie = rng.randrange(bookies)
    if kind in ("kill_role", "pause_role"):
        return bookie, rng.choice(ROLES)
    if kind == "kill_client":
        return (rng.randrange(writers + 1),)  # the last slot is the log writer
    if kind in ("pause_client", "expire_client", "recover_race"):
        return (rng.randrange(writers),) if writers else None
    if kind == "disk_full":
        if not disk_bookies:
            return None
        return rng.randrange(disk_bookies), rng.choice(("journal", "ledgers"))
    if kind == "partition":
        shape = rng.choice(("isolate_bookie", "clients_from_bookies", "bookie_from_zk", "split"))
        way = rng.choice(("both", "inbound", "outbound"))
        if shape == "isolate_bookie" or shape == "bookie_from_zk":
            return shape, way, bookie
        if shape == "clients_from_bookies":
            cut = sorted(rng.sample(range(bookies), rng.randint(1, max(1, bookies // 2))))
            return shape, way, *cut
        side = sorted(rng.sample(range(bookies), rng.randint(1, bookies - 1 or 1)))
        return shape, way, *side
    if kind == "partitioned_recovery":
        if not writers:
            return None
        cut = sorted(rng.sample(range(bookies), rng.randint(1, max(1, bookies // 2))))
        return rng.randrange(writers), *cut
    if kind == "lossy":
        return bookie, rng.choice((10, 30, 60))
    if kind == "slow":
        return bookie, rng.choice((64, 256, 1024))  # kbit/s
    if kind in ("log_takeover", "zk_restart", "zk_pause"):
        return ()
    if kind == "compaction":
        return bookie, rng.choice(("gc", "minor", "major"))
    if kind == "rebuild_index":
        return bookie, rng.choice(("lost", "damaged"))
    if kind == "lost_for_good":
        return bookie, rng.choice(("auto", "operator"))
    if kind in ("disk_readonly", "journal_full"):
        return (rng.randrange(disk_bookies),) if disk_bookies else None
    return (bookie,)
