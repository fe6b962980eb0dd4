"""Runs the nemesis: a cluster, rounds of workload under seeded faults, a check after each.

One round: start the workload (``workload.Workload``: writers, tailers, the run's log writer
and reader, a deleter of earlier rounds' ledgers); inject the round's faults at their times
and heal each when it ends (``faults.Nemesis``); at the end heal everything, stop the round's
clients, recover every ledger the round wrote and the log (from a client of the runner, on the
healed cluster), read them back and check the history against them (``checker``).  Then the
quiescent point (``quiescent.check_state``): healing around bookies lost for good is waited
for, every acknowledged entry still known (``catalogue``: this round's ledgers, those kept
from earlier rounds, the run writer's) is read from every bookie of its write set, and no
deleted ledger may be back.  The run's own writer and tailer (``tag="run"``) go on through
every round; at the end they stop, their ledgers are recovered and checked, and (with
``--lifecycle``, autorecovery on) the auditor is asked for a full check and every kept entry
must be on Qw bookies.  The summary adds it all up and ends with one JSON line.
"""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from bookie.metadata import open_metadata
from bookie.testing.localbookies import LocalBookies
from bookie.testing.nemesis import disk as disk_mod
from bookie.testing.nemesis.client_proc import DIGEST, PASSWORD
from bookie.testing.nemesis.checker import FinalLedger, FinalLog, RoundReport, Violation, check_round
from bookie.testing.nemesis.catalogue import Catalogue, acked_entries
from bookie.testing.nemesis.faults import Nemesis
from bookie.testing.nemesis.history import load_history, read_events
from bookie.testing.nemesis.lifecycle import rack_of, set_rack
from bookie.testing.nemesis.payload import make_payload
from bookie.testing.nemesis.quiescent import audit_and_wait, check_state
from bookie.testing.nemesis.schedule import LIFECYCLE_KINDS, enabled_kinds, make_schedule
from bookie.testing.nemesis.workload import CLIENT_CONFIG, LOG_NAME, Workload
from bookie.testing.nemesis.zkserver import RestartableZooKeeper

# Bookies under the nemesis: quick failure detection, small files (tmpfs disks), many restarts.
BOOKIE_CONF = {"gcWaitTime": 2000, "diskCheckInterval": 1000, "workerRestartLimit": 1000,
               "zkTimeout": 4000, "journalMaxSizeMB": 8, "journalMaxBackups": 2,
               "logSizeLimit": 8 << 20, "journalPreAllocSizeMB": 1,
               "ledgerStorageQuotaBytes": 2 << 20,  # workload.py QUOTA_BYTES: its quota writer
               # Every nemesis process runs as this uid, and a local uid is one quota identity
               # for all its clients (docs/security.md): after half an hour of writing it holds
               # the whole quota on every bookie, and a writer's first add and a recovery's
               # re-adds to a replacement bookie are refused OVER_QUOTA (the 30-minute soak of
               # 2026-12-02).  So this uid is admin over the local sockets, as docs/security.md
               # advises for a recovering service, and the quota writer writes over TCP, where
               # without enrolment its ledger is its own identity.
               "localClientRoles": f"{os.getuid()}:admin",
               # read-ahead on (as by default), small: the log reader's catch-up reads of
               # closed ledgers are served from it while GC, compaction and restarts go on, and
               # spans are evicted often (storage/read_ahead.py)
               "dbStorage_readAheadCacheMaxSizeMb": 2, "dbStorage_readAheadCacheBatchSize": 256}
# With --lifecycle: autorecovery on every bookie, quick to act on a lost bookie and on an
# open ledger whose writer is gone; a bookie that comes back after it was healed around drops
# the copies no fragment names it for after 20 s (gcOverreplicatedLedgerWaitTime), so the
# checker meets that GC under faults too.
# With --metadata zk the cluster has no recovery secret (no zkBookieDigestAuthFile: the nemesis
# edits ZooKeeper as an operator would), so autorecovery copies with the writers' password or
# not at all (docs/autorecovery.md "No key, no copy, no repoint"; issue 39).
LIFECYCLE_CONF = {"autoRecoveryDaemonEnabled": "true", "lostBookieRecoveryDelay": 0,
                  "openLedgerRereplicationGracePeriod": 5000,
                  "gcOverreplicatedLedgerWaitTime": 20000,
                  "autoRecoveryLedgerPasswords": PASSWORD.decode()}
RECOVERY_ATTEMPTS = 3
HEAL_TIMEOUT_S = 120.0
SAMPLE = 200  # entries read per ledger kept from an earlier round, at each round's check
LOG_KINDS = ("append", "log_ack", "log_fail", "log_open")


@dataclass
class Options:
    """What one run does.  The same options and seed give the same fault schedule."""
    seed: int
    time_s: float = 60.0
    round_s: float = 15.0
    bookies: int = 5
    metadata: str = "lmdb"  # or "zk"
    writers: int = 3
    disk: bool = False
    network: bool = False
    base_dir: str | None = None
    keep: bool = False
    lifecycle: bool = False

    def replay_command(self) -> str:
        cmd = (f"python -m bookie.testing.nemesis --seed {self.seed} --time {self.time_s:g} "
               f"--round {self.round_s:g} --bookies {self.bookies} --metadata {self.metadata} "
               f"--writers {self.writers}")
        return cmd + (" --disk" if self.disk else "") + (" --network" if self.network else "") \
            + (" --lifecycle" if self.lifecycle else "")


@dataclass
class Summary:
    options: Options
    rounds: int = 0
    faults: collections.Counter = field(default_factory=collections.Counter)
    skipped: collections.Counter = field(default_factory=collections.Counter)
    acked: int = 0
    checked: int = 0
    lost: int = 0
    unverified: int = 0
    reads_checked: int = 0
    lacs_checked: int = 0
    client_errors: int = 0
    replica_checks: int = 0
    replica_entries: int = 0
    below_qw: int = 0
    reader_violations: int = 0
    kept_unacknowledged: int = 0
    kept_ledgers: int = 0
    deleted_ledgers: int = 0
    squat_answers: collections.Counter = field(default_factory=collections.Counter)
    violations: list[tuple[int, Violation]] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations and self.rounds > 0

    def add(self, round_no: int, report: RoundReport, count_round: bool = True) -> None:
        self.rounds += 1 if count_round else 0
        self.reader_violations += report.reader_violations
        self.kept_unacknowledged += len(report.kept_unacknowledged)
        self.acked += report.acked
        self.checked += report.checked
        self.lost += report.lost
        self.unverified += report.unverified
        self.reads_checked += report.reads_checked
        self.lacs_checked += report.lacs_checked
        self.violations += [(round_no, v) for v in report.violations]

    def text(self) -> str:
        o = self.options
        faults = ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())) or "none"
        lines = [
            f"nemesis: seed {o.seed}, {o.bookies} bookies, metadata {o.metadata}, "
            f"disk faults {'on' if o.disk else 'off'}, network faults {'on' if o.network else 'off'}, "
            f"lifecycle faults {'on' if o.lifecycle else 'off'}",
            f"  rounds: {self.rounds} in {self.elapsed_s:.0f} s",
            f"  faults injected: {sum(self.faults.values())} ({faults})",
            f"  faults skipped (target not there, or round over): "
            f"{sum(self.skipped.values())} ({skipped})",
            f"  entries acknowledged: {self.acked}, checked: {self.checked}, lost: {self.lost}, "
            f"unverified: {self.unverified}",
            f"  reads checked: {self.reads_checked}, LAC readings checked: {self.lacs_checked}, "
            f"client errors recorded: {self.client_errors}",
            f"  violations: {len(self.violations)}",
        ]
        by_kind = collections.Counter(v.kind for _, v in self.violations)
        if by_kind:
            lines.append("    by kind: " + ", ".join(f"{k}={n}" for k, n in sorted(by_kind.items())))
        for round_no, v in self.violations[:20]:
            lines.append(f"    round {round_no}: {v}")
        lines.append(f"  replica checks: {self.replica_checks} copies of {self.replica_entries} "
                     f"entries; below Qw: {self.below_qw}; reader violations: "
                     f"{self.reader_violations}; recovery kept unacknowledged entries: "
                     f"{self.kept_unacknowledged}")
        lines.append(f"  ledgers kept across rounds: {self.kept_ledgers}, deleted: "
                     f"{self.deleted_ledgers}")
        if self.squat_answers:
            lines.append("  squatter's answers: " + ", ".join(
                f"{k}={v}" for k, v in sorted(self.squat_answers.items())))
        lines.append(f"  incidents (bookie crashes and tracebacks; not safety violations): "
                     f"{len(self.incidents)}")
        lines += [f"    {line}" for line in self.incidents[:20]]
        lines += [f"  note: {n}" for n in self.notes[:20]]
        if not self.ok:
            lines.append(f"  FAILED: replay with: {o.replay_command()}")
        lines.append(json.dumps(self.figures(), sort_keys=True))
        return "\n".join(lines)

    def figures(self) -> dict:
        """The summary as one JSON object (the last line of the output)."""
        reader = sum(1 for _, v in self.violations if v.kind == "reader_violation")
        return {
            "seed": self.options.seed, "seconds": round(self.elapsed_s, 1),
            "rounds": self.rounds, "lifecycle": self.options.lifecycle,
            "faults": dict(sorted(self.faults.items())),
            "skipped": dict(sorted(self.skipped.items())),
            "entries_acknowledged": self.acked, "entries_checked": self.checked,
            "replica_checks": self.replica_checks, "replica_entries": self.replica_entries,
            "below_qw": self.below_qw, "lost": self.lost, "unverified": self.unverified,
            "violations": len(self.violations) - reader,
            "violation_kinds": dict(sorted(collections.Counter(
                v.kind for _, v in self.violations if v.kind != "reader_violation").items())),
            "reader_violations": self.reader_violations,
            "client_errors": self.client_errors, "incidents": len(self.incidents),
            "reads_checked": self.reads_checked, "lacs_checked": self.lacs_checked,
            "kept_unacknowledged": self.kept_unacknowledged,
            "kept_ledgers": self.kept_ledgers, "deleted_ledgers": self.deleted_ledgers,
            "squat_answers": dict(sorted(self.squat_answers.items())),
            "ok": self.ok,
        }


def run(opts: Options, log=None, network=None) -> Summary:
    """Run the nemesis as ``opts`` say; returns the summary (``ok`` false on any violation).

    ``network`` is a ready ``network.Network`` when network faults are on (the caller runs in
    its control namespace)."""
    t_start = time.monotonic()
    log = log or (lambda line: print(f"[{time.monotonic() - t_start:6.1f}s] {line}", flush=True))
    base_dir = opts.base_dir or tempfile.mkdtemp(prefix="bookie-nemesis-")
    os.makedirs(base_dir, exist_ok=True)
    summary = Summary(opts)
    started = time.monotonic()
    zookeeper = None
    disk = None
    try:
        metadata_uri = None
        if opts.metadata == "zk":
            zookeeper = _start_zookeeper(network)
            metadata_uri = _format_zk_root(zookeeper)
        conf = dict(BOOKIE_CONF, **(LIFECYCLE_CONF if opts.lifecycle else {}))
        # With --lifecycle: named bookie ids (a bookie may move to another port: ``readdress``)
        # and two journals each (``journal_full`` fills one of them)
        bookies = LocalBookies(opts.bookies, metadata_uri=metadata_uri,
                               base_dir=os.path.join(base_dir, "cluster"), conf=conf,
                               hosts=network.bookie_hosts() if network else None,
                               command_prefix=network.bookie_prefixes() if network else None,
                               journals=2 if opts.lifecycle else 1,
                               bookie_ids=[f"nemesis-b{i}" for i in range(opts.bookies)]
                               if opts.lifecycle else None)
        if opts.disk or opts.lifecycle:
            disk = _mount_disks(bookies, summary)
        with bookies:
            if opts.lifecycle:  # two racks, for the writers that enforce them
                for i, bookie_id in enumerate(bookies.bookies):
                    set_rack(bookies.metadata_uri, bookie_id, rack_of(i))
            nemesis = Nemesis(bookies, zookeeper=zookeeper, disk=disk, network=network,
                              zk_session_s=BOOKIE_CONF["zkTimeout"] / 1000.0,
                              client_session_s=CLIENT_CONFIG["zkTimeout"] / 1000.0, log=log)
            state = _RunState(opts, base_dir, bookies, network)
            state.run_workload.start()
            try:
                round_no = 0
                # a round takes far longer than its round_s of faults (the writers' start, the
                # healing wait, recovery, the quiescent check): another starts only while the
                # shortest one so far still fits, so --time is the run's length, not its start
                shortest = float(opts.round_s)
                while round_no == 0 or time.monotonic() - started + shortest <= opts.time_s:
                    round_started = time.monotonic()
                    report = _round(opts, round_no, base_dir, bookies, nemesis, network,
                                    summary, log, state)
                    took = time.monotonic() - round_started
                    shortest = took if round_no == 0 else min(shortest, took)
                    summary.add(round_no, report)
                    log(f"round {round_no}: acked {report.acked}, checked {report.checked}, "
                        f"lost {report.lost}, violations {len(report.violations)}")
                    round_no += 1
            finally:
                state.run_workload.stop()
            _finish(opts, round_no, bookies, nemesis, summary, log, state)
            summary.faults = nemesis.injected
            summary.skipped = nemesis.skipped
            summary.notes += nemesis.bookie_exits
            summary.incidents += nemesis.findings
            summary.squat_answers = nemesis.squat_answers
            summary.kept_ledgers = len(state.catalogue.kept)
            summary.deleted_ledgers = len(state.catalogue.deleted)
            if summary.violations or opts.keep:
                summary.notes.append(f"bookie logs kept under {bookies.base_dir}")
                bookies._own_dir = False
    finally:
        if zookeeper is not None:
            zookeeper.stop()
        if disk is not None:
            disk.unmount()
        summary.elapsed_s = time.monotonic() - started
        if not opts.keep and not summary.violations and opts.base_dir is None:
            shutil.rmtree(base_dir, ignore_errors=True)
        elif summary.violations:
            summary.notes.append(f"histories kept under {base_dir}")
    return summary


class _RunState:
    """What outlives a round: the catalogue of kept and deleted ledgers, the log's history,
    and the run's own writer and tailer."""

    def __init__(self, opts: Options, base_dir: str, bookies, network):
        self.catalogue = Catalogue(opts.seed)
        self.log_events: list[dict] = []
        self.run_dir = os.path.join(base_dir, "run")
        os.makedirs(self.run_dir, exist_ok=True)
        self.run_workload = Workload(self.run_dir, bookies.metadata_uri, opts.seed, 0, 1,
                                     opts.bookies, prefix=network.client_prefix if network
                                     else None, lifecycle=opts.lifecycle, tag="run",
                                     with_log=False)
        self.reader_violations_seen = 0

    def log_acked(self) -> dict[int, dict[int, tuple[str, int]]]:
        """The log's acknowledged appends: ledger id -> entry id -> (writer, seq)."""
        out: dict[int, dict[int, tuple[str, int]]] = {}
        for ev in self.log_events:
            if ev["ev"] == "log_ack":
                out.setdefault(ev["l"], {})[ev["e"]] = (ev["w"], ev["s"])
        return out

    def targets(self, round_no: int | None,
                extra: dict[int, dict] | None = None) -> dict[int, dict[int, bytes]]:
        """Every ledger the quiescent check reads: kept ones, and ``extra`` (entry -> (w, s)).
        Ledgers kept from rounds before ``round_no`` are read on a sample of ``SAMPLE``
        entries (seeded; their first and last always), so that a long run's checks stay
        short; ``round_no`` None (the end of the run) reads every entry."""
        out = {}
        for lid, kept in self.catalogue.kept.items():
            acked = kept.acked
            if round_no is not None and kept.round_no < round_no and len(acked) > SAMPLE:
                ids = sorted(acked)
                rng = random.Random(f"sample:{lid}:{round_no}")
                pick = {ids[0], ids[-1], *rng.sample(ids, SAMPLE)}
                acked = {e: acked[e] for e in pick}
            out[lid] = {e: make_payload(w, s) for e, (w, s) in acked.items()}
        for lid, acked in (extra or {}).items():
            out.setdefault(lid, {e: make_payload(w, s) for e, (w, s) in acked.items()})
        return out


DISK_BOOKIES = 2  # bookies with tmpfs journal and ledger disks (--disk)


def schedule_kinds(opts: Options) -> tuple[str, ...]:
    """The fault kinds of a run: from the options alone (a fault the machine cannot inject,
    like a full disk where nothing can be mounted, is drawn and skipped), so a seed replays."""
    return enabled_kinds(zookeeper=opts.metadata == "zk", disk=opts.disk, network=opts.network,
                         lifecycle=opts.lifecycle)


def round_schedule(opts: Options, round_no: int, owed=()):
    """Round ``round_no``'s faults: a function of the options, the seed and ``owed`` (the
    lifecycle kinds not injected yet in this run: ``schedule.owed_faults``)."""
    disk_bookies = min(DISK_BOOKIES, opts.bookies) if opts.disk or opts.lifecycle else 0
    return make_schedule(opts.seed, round_no, opts.round_s, schedule_kinds(opts), opts.bookies,
                         opts.writers, disk_bookies, owed=owed)


def _start_zookeeper(network):
    if network is not None:
        return RestartableZooKeeper(host=network.zk_host(), prefix=network.zk_prefix()).start()
    return RestartableZooKeeper().start()


def _format_zk_root(zookeeper) -> str:
    """A fresh root in ``zookeeper``, formatted through the store API; returns its URI."""
    uri = zookeeper.uri(zookeeper.chroot("/nemesis"))
    open_metadata(uri, timeout_s=20.0, create=True).close()  # opening never creates a store
    return uri


def _mount_disks(bookies, summary: Summary):
    why_not = disk_mod.available()
    if why_not:
        summary.notes.append(f"disk faults off: {why_not}")
        return None
    faults = disk_mod.DiskFaults(bookies, count=min(DISK_BOOKIES, bookies.n))
    faults.mount()
    return faults


def _round(opts: Options, round_no: int, base_dir: str, bookies, nemesis: Nemesis,
           network, summary: Summary, log, state: _RunState) -> RoundReport:
    directory = os.path.join(base_dir, f"round-{round_no}")
    os.makedirs(directory, exist_ok=True)
    workload = Workload(directory, bookies.metadata_uri, opts.seed, round_no, opts.writers,
                        opts.bookies, prefix=network.client_prefix if network else None,
                        lifecycle=opts.lifecycle,
                        deletes=state.catalogue.due_for_delete(round_no), round_s=opts.round_s)
    nemesis.workload = workload
    owed = [k for k in LIFECYCLE_KINDS if not nemesis.injected[k]] if opts.lifecycle else ()
    faults = round_schedule(opts, round_no, owed)
    log_offsets = [os.path.getsize(bookies.log_path(i)) if os.path.exists(bookies.log_path(i))
                   else 0 for i in range(bookies.n)]
    workload.start()
    if not wait_started(workload):
        log(f"round {round_no}: some writers had not created a ledger after 30 s; faults start")
    t0 = time.monotonic()
    active: list[tuple[float, object]] = []
    next_fault = 0
    while time.monotonic() - t0 < opts.round_s:
        now_s = time.monotonic() - t0
        while next_fault < len(faults) and faults[next_fault].at_s <= now_s:
            fault = faults[next_fault]
            next_fault += 1
            try:
                heal = nemesis.inject(fault)
            except Exception as exc:  # noqa: BLE001 - a harness problem, not the system's
                summary.notes.append(f"round {round_no}: could not inject {fault.describe()}: {exc}")
                heal = None
            if heal is not None:
                duration_s = max(fault.duration_s, nemesis.min_duration_s(fault.kind))
                active.append((fault.at_s + duration_s, heal))
        nemesis.tick()
        for item in [a for a in active if a[0] <= now_s]:
            active.remove(item)
            try:
                item[1]()
            except Exception as exc:  # noqa: BLE001
                log(f"nemesis: heal failed: {exc}")
        time.sleep(0.05)
    for fault in faults[next_fault:]:  # a slow injection (a bookie's stop) ate their time
        nemesis.skipped[fault.kind] += 1
        log(f"nemesis: skip {fault.describe()}: the round ended first")
    log(f"round {round_no}: faults over; healing")
    nemesis.heal_all([heal for _, heal in active])
    log(f"round {round_no}: healed; stopping the clients")
    killed = workload.stop()
    if killed:
        log(f"round {round_no}: clients that did not stop in time: {', '.join(killed)}")
    summary.incidents += [f"round {round_no}: {line}" for line in
                          _incidents(bookies, log_offsets) + _client_incidents(directory)]
    events = load_history(directory)
    summary.client_errors += sum(1 for ev in events if ev["ev"] == "error")
    ledger_ids = sorted({ev["l"] for ev in events if ev["ev"] in ("create", "ack")})
    nemesis.ledger_ids_seen.update(ledger_ids)
    log(f"round {round_no}: recovering {len(ledger_ids)} ledgers and the log")
    ledgers, logs = final_state(bookies.metadata_uri, ledger_ids, LOG_NAME, log)
    state.log_events += [ev for ev in events if ev["ev"] in LOG_KINDS]
    checked = [ev for ev in events if ev["ev"] not in LOG_KINDS] + state.log_events
    checked.sort(key=lambda e: e["t"])
    report = check_round(checked, ledgers, logs)
    state.catalogue.note_deletes(events)
    state.catalogue.add_round(round_no, events, ledgers)
    _run_writer_violations(state, report)
    extra = acked_entries(load_history(state.run_dir))
    extra.update(state.log_acked())
    _quiescent(opts, bookies, nemesis, summary, state, report, require_qw=False,
               round_no=round_no, extra=extra)
    return report


def _run_writer_violations(state: _RunState, report: RoundReport) -> None:
    """The run's tailer's reader violations recorded since the last quiescent point."""
    found = [ev for ev in load_history(state.run_dir) if ev["ev"] == "reader_violation"]
    for ev in found[state.reader_violations_seen:]:
        report.reader_violations += 1
        report.add("reader_violation", f"ledger {ev['l']} read by {ev['p']}",
                   f"told LAC {ev['lac']}, entry {ev['e']} unreadable for "
                   f"{ev['t'] - ev['t0']:.1f} s: {ev.get('err')}")
    state.reader_violations_seen = len(found)


def _quiescent(opts: Options, bookies, nemesis: Nemesis, summary: Summary, state: _RunState,
               report: RoundReport, require_qw: bool, round_no: int | None = None,
               extra=None) -> None:
    started = time.monotonic()
    try:
        replicas = check_state(bookies.metadata_uri, PASSWORD, state.targets(round_no, extra),
                               state.catalogue.deleted,
                               set(nemesis.lost_ids) | set(nemesis.renamed_ids), require_qw,
                               HEAL_TIMEOUT_S, state.catalogue.settle_failed_deletes)
    except Exception as exc:  # noqa: BLE001 - the harness could not look: say so, loudly
        summary.incidents.append(f"quiescent check could not run: {type(exc).__name__}: {exc}")
        report.add("unverified_replicas", "the cluster", f"the quiescent check could not run: "
                   f"{type(exc).__name__}: {exc}")
        return
    summary.replica_checks += replicas.replica_checks
    summary.replica_entries += replicas.entries
    summary.below_qw += replicas.below_qw
    for kind, where, detail in replicas.violations:
        report.add(kind, where, detail)
    summary.notes.append(f"quiescent check: {replicas.entries} entries, "
                         f"{replicas.replica_checks} copies in {time.monotonic() - started:.1f} s")


def _finish(opts: Options, rounds: int, bookies, nemesis: Nemesis, summary: Summary, log,
            state: _RunState) -> None:
    """The end of the run: the run's writer stopped, its ledgers recovered and checked, and
    the last quiescent point (with --lifecycle: after a full audit, every entry on Qw)."""
    events = load_history(state.run_dir)
    summary.client_errors += sum(1 for ev in events if ev["ev"] == "error")
    ledger_ids = sorted({ev["l"] for ev in events if ev["ev"] in ("create", "ack")})
    ledgers, _ = final_state(bookies.metadata_uri, ledger_ids, None, log)
    report = check_round([ev for ev in events if ev["ev"] != "reader_violation"], ledgers, {})
    _run_writer_violations(state, report)
    state.catalogue.add_round(rounds, events, ledgers)
    if opts.lifecycle:
        log("final check: a full audit, then every copy of every entry kept")
        why = audit_and_wait(bookies.metadata_uri, HEAL_TIMEOUT_S,
                             [bookies.log_path(i) for i in range(bookies.n)])
        if why:
            report.add("not_healed", "the cluster", why)
    _quiescent(opts, bookies, nemesis, summary, state, report, require_qw=opts.lifecycle,
               extra=state.log_acked())
    summary.add(rounds, report, count_round=False)
    log(f"run writer and final check: acked {report.acked}, checked {report.checked}, "
        f"lost {report.lost}, violations {len(report.violations)}")


def _incidents(bookies, offsets: list[int]) -> list[str]:
    """What the bookies' logs show since ``offsets``: tracebacks (their last line), fatal
    errors, one-line exits (``bookie run: ...``) and stops not asked for."""
    found = []
    for i in range(bookies.n):
        try:
            with open(bookies.log_path(i), "rb") as f:
                f.seek(offsets[i])
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            continue
        found += [f"bookie {i}: traceback: {line}" for line in _tracebacks(lines)]
        for line in lines:
            if line.startswith("bookie run:") or " fatal " in line or \
                    ("stopping reason=" in line and "SIGTERM" not in line):
                found.append(f"bookie {i}: {line[:200]}")
    return found


def _tracebacks(lines: list[str]) -> list[str]:
    """The last line (the exception) of every traceback in ``lines``."""
    found, inside = [], False
    for line in lines:
        if line.startswith("Traceback") or line.startswith("Exception in thread"):
            inside = True
        elif inside and line and not line.startswith((" ", "During", "The above", "Traceback")):
            found.append(line[:200])
            inside = False
    return found


def wait_started(workload, timeout_s: float = 30.0) -> bool:
    """Wait until every writer has created its first ledger or been refused one (a refusal is
    its history too: a rack-enforcing writer whose quorum no two racks can satisfy is refused
    for the whole round, and waiting the full ``timeout_s`` for it cost every such round 30 s).
    Returns False if ``timeout_s`` passed first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_started(workload.history_path(workload.writer_names[slot]))
               for slot in range(workload.n_writers)):
            return True
        time.sleep(0.1)
    return False


def _started(path: str) -> bool:
    try:
        events = read_events(path)
    except OSError:
        return False
    return any(ev["ev"] == "create" or (ev["ev"] == "error"
                                        and str(ev.get("msg", "")).startswith("create_ledger"))
               for ev in events)


def _client_incidents(directory: str) -> list[str]:
    """Tracebacks client processes printed (a dead I/O thread says so on stderr)."""
    found = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".out"):
            with open(os.path.join(directory, name), errors="replace") as f:
                found += [f"client {name[:-4]}: traceback: {line}"
                          for line in _tracebacks(f.read().splitlines())]
    return found


def final_state(metadata_uri: str, ledger_ids: list[int], log_name: str, log):
    """Recover every ledger and the log of the round; read them back whole."""
    from bookie.client import BookKeeper, NoSuchLogError, open_log, read_log  # lazy: asyncio
    ledgers: dict[int, FinalLedger] = {}
    logs: dict[str, FinalLog] = {}
    config = dict(CLIENT_CONFIG, operationTimeout=60.0)
    with BookKeeper(metadata_uri, config) as bk:
        for ledger_id in ledger_ids:
            ledgers[ledger_id] = _recover_ledger(bk, ledger_id, DIGEST, PASSWORD, log)
        if log_name is None:
            return ledgers, logs
        try:
            writer = open_log(bk, log_name, 3, 2, 2, digest=DIGEST, password=PASSWORD, create=False)
            writer.close()
            records = [(r.ledger_id, r.entry_id, bytes(r.data))
                       for r in read_log(bk, log_name, digest=DIGEST, password=PASSWORD)]
            logs[log_name] = FinalLog(log_name, records)
        except NoSuchLogError:
            pass
        except Exception as exc:  # noqa: BLE001 - reported as a violation by the checker
            logs[log_name] = FinalLog(log_name, None, f"{type(exc).__name__}: {exc}")
    return ledgers, logs


def _recover_ledger(bk, ledger_id: int, digest: str, password: bytes, log) -> FinalLedger:
    error = None
    for attempt in range(RECOVERY_ATTEMPTS):
        try:
            rh = bk.open_ledger(ledger_id, digest=digest, password=password, recovery=True)
            last = rh.last_add_confirmed
            entries = {}
            if last >= 0:
                entries = {e.entry_id: bytes(e.data) for e in rh.read_entries(0, last)}
            return FinalLedger(ledger_id, last, entries)
        except Exception as exc:  # noqa: BLE001
            error = f"{type(exc).__name__}: {exc}"
            log(f"recovery of ledger {ledger_id} failed (attempt {attempt + 1}): {error}")
            time.sleep(2.0)
    return FinalLedger(ledger_id, None, error=error)
