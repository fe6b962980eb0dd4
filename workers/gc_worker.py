"""The GC worker: scan-and-compare garbage collection, every ``gcWaitTime``, and at once when
the supervisor asks (the admin API's ``PUT /api/v1/bookie/gc`` creates ``gc.request`` in the run
dir; the worker looks for it every 100 ms, the same tick it sleeps on anyway).

What to delete is decided by ``bookie.core.gc_policy.plan`` (its module says why it is safe);
this module only gathers the facts in the order the plan needs (the index snapshot, then the
store's ledger id high-water mark, then the metadata listing) and carries the plan out: deleted
ledgers are first appended to the bookie's durable list of deletes (``bookie.storage.deletes``:
a rebuilt index must not bring them back), then leave the index in short write transactions (a
tombstone each), then dead entry logs are unlinked (their directories fsynced), then their maps are forgotten.
After the scan-and-compare step, a pass may compact: a *major* compaction every
``majorCompactionInterval`` (or when asked with ``forceMajor``), else a *minor* one every
``minorCompactionInterval`` (or ``forceMinor``).  Which logs, and how each is rewritten without
ever losing or leaking anything, is ``bookie.storage.compaction``; this loop bounds a pass in
time (``*CompactionMaxTimeMillis``) and I/O (``compactionRateBy*``), keeps writing within
``diskUsageThreshold + compactionDiskMargin``, logs progress (logs done / to do, bytes
reclaimed) and publishes it as metrics.  A step a crash interrupted is finished or undone
before the first pass (``compaction.recover``).

Requests: ``request_gc(run_dir, major, minor)`` (the admin API, ``bookie shell triggergc``, the
supervisor when a disk fills) creates ``gc.request`` (plus ``gc.request.major`` /
``gc.request.minor``) in the run dir; the worker looks every 100 ms.

Fault injection for the crash tests: ``BOOKIE_COMPACTION_CRASH_AT=STEP[:N]`` SIGKILLs the whole
bookie (its process group) the Nth time compaction passes STEP (intent, created, copying,
synced, repointed, deleted).  Unset, nothing happens.

Over-replicated copies (``gcOverreplicatedLedgerWaitTime``): at the first run and then once
every that wait, ``bookie.workers.overreplicated.look`` drops the copies of closed ledgers that
no longer name this bookie and did not for the whole wait (the rule: ``bookie.core.naming``).

Without a metadata store (``metadataServiceUri`` empty) nothing is ever deleted; the worker only
counts what the bookie holds (the ``bookie_ledgers`` and ``bookie_entry_logs`` gauges).

A metadata outage never stops the worker: it becomes ready without the store, opens it (and
lists the ledgers) at each run, and a run the store could not answer is skipped with one log
line, tried again at the next one.  A listing with no ledgers at all while this bookie holds
some deletes nothing (``EmptyListingRefused``) unless the store's ledger id high-water mark is at
or above every id held (``gc_policy.empty_listing_trusted``): a store answering an empty list by
mistake (a wrong root, a wiped or restored-empty store) must not take every ledger of every bookie
with it, while a cluster whose ledgers were all deleted gets its space back.  Nor does a listing
taken while the store is wiped (its instance id, removed first by the wipe, differs after the
listing from before it): node by node, a wiped store lists some ledgers and not others.
"""

from __future__ import annotations

import os
import time

import lmdb
import orjson

import shutil
import signal

from bookie.storage import compaction
from bookie.core import gc_policy, naming
from bookie.workers import overreplicated
from bookie.storage.journal import fsync_dir
from bookie.storage.layout import current_dir, local_cookie
from bookie.storage.noroom import no_room
from bookie.storage import deletes
from bookie.storage.index import Index, open_index
from bookie.storage.entrylog import find_log, list_logs
from bookie.metadata import MetadataError, NoSuchNodeError, open_metadata

DROP_BATCH_ENTRIES = 10_000  # entries per write transaction: keep the add worker's commits flowing


class EmptyListingRefused(Exception):
    """The store's listing was not believed (no ledgers while this bookie holds some, or taken
    while the store was wiped or reformatted): nothing was deleted."""


def collect(index: Index, store, ledger_dirs: list[str], cookie: dict | None = None) -> gc_policy.GcPlan:
    """One GC run: gather the facts, plan, carry the plan out.  Returns the plan carried out.

    ``cookie``: this bookie's own cookie; an empty listing is acted on only while the store
    still holds the same one (a wiped or reformatted store has lost it, and on ZooKeeper its id
    sequence, which the high-water probe itself advances, soon passes small held ids).

    Raises:
        MetadataError: the store could not list its ledgers (nothing was deleted).
    """
    with index.begin() as txn:  # one snapshot, taken before the listing
        held = index.ledger_ids(txn)
        maps = index.log_maps(txn)
        current = index.current_logs(txn)
    instance = store.instance_id()
    high_water = store.ledger_id_high_water()  # after the snapshot, before the listing (gc_policy)
    in_store = list(store.list_ledgers())
    # A wipe (``metaformat --force``) removes nodes one by one, the instance id first: a listing
    # taken meanwhile lacks ledgers that were never deleted, and would drop them here.
    if store.instance_id() != instance:
        raise EmptyListingRefused(
            f"the metadata store was wiped or reformatted while its ledgers were listed (instance "
            f"id {instance} before the listing, {store.instance_id()} after); deleting nothing")
    if not in_store and held and cookie is not None and not _store_knows(store, cookie):
        raise EmptyListingRefused(
            f"the metadata store lists no ledgers and no longer holds this bookie's cookie (a "
            f"wiped, reformatted or other store) while this bookie holds {len(held)}; deleting "
            f"nothing")
    if not in_store and not gc_policy.empty_listing_trusted(held, high_water):
        raise EmptyListingRefused(
            f"the metadata store lists no ledgers but this bookie holds {len(held)}, up to id "
            f"{max(held)}, above the store's ledger id high-water mark {high_water}; deleting "
            f"nothing (a store answering an empty list by mistake must not empty the bookie)")
    on_disk = [log_id for d in ledger_dirs for log_id in list_logs(d)]
    plan = gc_policy.plan(held, in_store, maps, current, on_disk, high_water)
    deletes.delete_ledgers(index, ledger_dirs, plan.drop_ledgers, DROP_BATCH_ENTRIES)
    touched = set()
    for log_id in plan.delete_logs:
        try:
            path = find_log(ledger_dirs, log_id)
            os.unlink(path)
            touched.add(os.path.dirname(path))
        except FileNotFoundError:
            pass
    for d in touched:
        fsync_dir(d)
    if plan.forget_maps:
        with index.begin(write=True) as txn:
            for log_id in plan.forget_maps:
                index.drop_log_map(txn, log_id)
    return plan


def _store_knows(store, cookie: dict) -> bool:
    """True when the store holds this bookie's cookie with the same instance id."""
    try:
        raw, _ = store.read_cookie(cookie["bookie_id"])
        return orjson.loads(raw).get("instance_id") == cookie.get("instance_id")
    except NoSuchNodeError:
        return False
    except (ValueError, KeyError, AttributeError):
        return False


GC_REQUEST_FILE = "gc.request"  # in the run dir: the supervisor asks for a pass now (PUT /api/v1/bookie/gc)


def _touch(path: str) -> None:
    """Create ``path`` if it is not there; never through a link (O_NOFOLLOW), never truncating
    what is there (no O_TRUNC): a request file is empty, only its presence counts."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                     0o600))


def request_gc(run_dir: str, major: bool = False, minor: bool = False) -> None:
    """Ask the running bookie's GC worker for a pass now (with a major / minor compaction).

    Raises:
        OSError: a request file cannot be made (ELOOP: a link is planted under its name).
    """
    names = [GC_REQUEST_FILE + ".major"] if major else []
    names += [GC_REQUEST_FILE + ".minor"] if minor else []
    for name in [*names, GC_REQUEST_FILE]:  # the plain file last: its sight starts the pass
        _touch(os.path.join(run_dir, name))


def suspend_compaction(run_dir: str, kind: str, flag: bool) -> None:
    """Suspend (or resume) the running bookie's major or minor compaction: a file in its run
    dir (PUT /api/v1/bookie/gc/suspend_compaction); a new run starts unsuspended."""
    path = os.path.join(run_dir, f"compaction.{kind}.suspended")
    if flag:
        _touch(path)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def compaction_suspended(run_dir: str, kind: str) -> bool:
    return os.path.exists(os.path.join(run_dir, f"compaction.{kind}.suspended"))


def _take(run_dir: str, name: str) -> bool:
    try:
        os.unlink(os.path.join(run_dir, name))
        return True
    except FileNotFoundError:
        return False


def requested(ctx) -> bool:
    """True (once) when the supervisor asked for a GC pass now: it creates GC_REQUEST_FILE."""
    return _take(ctx.run_dir, GC_REQUEST_FILE)


def take_request(ctx) -> dict | None:
    """The pass asked for, once: None, or {"major": bool, "minor": bool}."""
    if not requested(ctx):
        return None
    return {"major": _take(ctx.run_dir, GC_REQUEST_FILE + ".major"),
            "minor": _take(ctx.run_dir, GC_REQUEST_FILE + ".minor")}


def crash_hook():
    """``crash(step)`` for compaction: SIGKILL the bookie at BOOKIE_COMPACTION_CRASH_AT."""
    spec = os.environ.get("BOOKIE_COMPACTION_CRASH_AT", "")
    if not spec:
        return lambda step: None
    at, _, nth = spec.partition(":")
    seen = {"n": 0}

    def crash(step: str) -> None:
        if step == at:
            seen["n"] += 1
            if seen["n"] >= int(nth or 1):
                os.killpg(os.getpgrp(), signal.SIGKILL)
    return crash


class Compactor:
    """When to compact (minor / major intervals, requests) and one compaction pass."""

    def __init__(self, ctx, index: Index, ledger_dirs: list[str], now: float):
        self.ctx = ctx
        self.conf = ctx.conf
        self.index = index
        self.ledger_dirs = ledger_dirs
        self.next_minor = now + self.conf.minor_compaction_interval_s
        self.next_major = now + self.conf.major_compaction_interval_s
        self.crash = crash_hook()
        self.totals = {"compaction_minor_runs_total": 0, "compaction_major_runs_total": 0,
                       "compaction_logs_total": 0, "compaction_failed_logs_total": 0,
                       "compaction_bytes_copied_total": 0, "compaction_bytes_reclaimed_total": 0,
                       "compaction_logs_todo": 0}

    def due(self, now: float, request: dict | None) -> str | None:
        """"major", "minor" or None; a major pass also counts as the minor one."""
        conf = self.conf
        major = conf.major_compaction_threshold > 0 and conf.major_compaction_interval_s > 0 \
            and now >= self.next_major
        minor = conf.minor_compaction_threshold > 0 and conf.minor_compaction_interval_s > 0 \
            and now >= self.next_minor
        if major or (request or {}).get("major"):
            self.next_major = now + conf.major_compaction_interval_s
            self.next_minor = now + conf.minor_compaction_interval_s
            return "major"
        if minor or (request or {}).get("minor"):
            self.next_minor = now + conf.minor_compaction_interval_s
            return "minor"
        return None

    def recover(self) -> None:
        done = compaction.recover(self.index, self.ledger_dirs, lambda: self.ctx.stopping)
        if done:
            self.ctx.log("compaction recovered", what=done)

    def room_for(self, candidate: compaction.Candidate) -> bool:
        """Copying the log's live bytes keeps its disk within diskUsageThreshold +
        compactionDiskMargin; or, on a disk already past that (adds outran the disk check;
        the bookie is read-only), the copy fits in what is free beyond a 1 % reserve and frees
        more than it takes (live share under one half), so every log done leaves more room."""
        d = os.path.dirname(find_log(self.ledger_dirs, candidate.log_id))
        u = shutil.disk_usage(d)
        need = candidate.live_bytes + 65536
        limit = (self.conf.disk_usage_threshold + self.conf.compaction_disk_margin) * u.total
        if (u.total - u.free) + need <= limit:
            return True
        return candidate.live_share < 0.5 and u.free - need >= 0.01 * u.total

    def run(self, kind: str) -> None:
        """One pass: the logs under ``kind``'s threshold, lowest live share first."""
        conf, ctx = self.conf, self.ctx
        threshold = conf.major_compaction_threshold if kind == "major" else conf.minor_compaction_threshold
        max_s = conf.major_compaction_max_time_s if kind == "major" else conf.minor_compaction_max_time_s
        started = time.monotonic()
        deadline = started + max_s if max_s > 0 else None
        if compaction.get_state(self.index) is not None:  # recover() could not finish it yet
            ctx.log("compaction postponed: the previous log's step is not finished", kind=kind)
            return
        held, maps, current = compaction.held_ledgers(self.index)
        todo = compaction.choose(maps, held, current, threshold, compaction.skipped_logs(self.index))
        self.totals[f"compaction_{kind}_runs_total"] += 1
        if not todo:
            ctx.log("compaction: nothing to do", kind=kind, threshold=threshold)
            return
        rate = conf.compaction_rate_bytes_per_s if conf.is_throttle_by_bytes else conf.compaction_rate_entries_per_s
        throttle = compaction.Throttle(rate, conf.is_throttle_by_bytes)
        ctx.log("compaction started", kind=kind, threshold=threshold, logs_todo=len(todo),
                live_bytes=sum(c.live_bytes for c in todo), total_bytes=sum(c.total_bytes for c in todo))
        done = reclaimed = copied = failed = no_room_for = 0
        for i, c in enumerate(todo):
            self.totals["compaction_logs_todo"] = len(todo) - i
            ctx.write_stats(self.totals)
            if ctx.stopping or (deadline is not None and time.monotonic() >= deadline):
                ctx.log("compaction stopped early", kind=kind, logs_done=done,
                        logs_left=len(todo) - i, reason="stopping" if ctx.stopping else "out of time")
                break
            try:
                if not self.room_for(c):
                    no_room_for += 1  # one line for all of them, at the end of the pass
                    continue
                out = compaction.compact_log(self.index, self.ledger_dirs, c.log_id, throttle,
                                             deadline, lambda: ctx.stopping, self.crash)
            except compaction.CorruptEntry as e:
                compaction.skip(self.index, c.log_id)
                failed += 1
                self.totals["compaction_failed_logs_total"] += 1
                ctx.log("compaction: corrupt entry; log left as it is and skipped from now on",
                        level="error", log=c.log_id, ledger=e.ledger_id, entry=e.entry_id,
                        offset=e.offset, error=str(e))
                continue
            except compaction.Abandoned as e:
                ctx.log("compaction: log undone", log=c.log_id, reason=str(e))
                continue
            except compaction.ReadersPending as e:
                ctx.log("compaction paused until the next pass", log=c.log_id, reason=str(e))
                break
            except OSError as e:
                failed += 1
                self.totals["compaction_failed_logs_total"] += 1
                ctx.log("compaction: log undone after a disk error", level="error", log=c.log_id,
                        no_room=no_room(e), error=str(e))
                continue
            done += 1
            copied += out.copied_bytes
            reclaimed += out.reclaimed_bytes
            self.totals["compaction_logs_total"] += 1
            self.totals["compaction_bytes_copied_total"] += out.copied_bytes
            self.totals["compaction_bytes_reclaimed_total"] += out.reclaimed_bytes
            ctx.log("compacted", kind=kind, log=c.log_id, into=out.new_log_id,
                    live_share=f"{c.live_share:.3f}", entries=out.entries,
                    copied_bytes=out.copied_bytes, reclaimed_bytes=out.reclaimed_bytes,
                    repoint_ms=f"{out.repoint_s * 1e3:.1f}", logs_done=i + 1, logs_todo=len(todo) - i - 1)
        self.totals["compaction_logs_todo"] = 0
        ctx.write_stats(self.totals)
        elapsed = time.monotonic() - started
        if no_room_for:
            ctx.log("compaction: no room to copy some logs now; tried again at the next pass",
                    level="warning", logs=no_room_for)
        ctx.log("compaction done", kind=kind, logs_done=done, logs_failed=failed,
                logs_without_room=no_room_for,
                copied_bytes=copied, reclaimed_bytes=reclaimed, seconds=f"{elapsed:.3f}",
                mb_per_s=f"{copied / max(elapsed, 1e-9) / 1e6:.1f}")


def count_holdings(index: Index, ledger_dirs: list[str]) -> dict:
    """The ledgers and entry logs this bookie holds (gauges bookie_ledgers, bookie_entry_logs)."""
    with index.begin() as txn:
        ledgers = len(index.ledger_ids(txn))
    return {"ledgers": ledgers, "entry_logs": sum(len(list_logs(d)) for d in ledger_dirs)}


def run(ctx) -> int:
    conf = ctx.conf
    index_dir = current_dir(conf.index_dirs[0])
    ledger_dirs = [current_dir(d) for d in conf.ledger_dirs]
    env = open_index(index_dir, conf.index_map_size_bytes)
    index = Index(env)
    if not conf.metadata_uri:
        ctx.log("gc idle: no metadata store configured")
        ctx.ready()
        try:  # a compaction a crash interrupted before the store was configured away
            Compactor(ctx, index, ledger_dirs, time.monotonic()).recover()
        except (OSError, lmdb.Error) as e:
            ctx.log("compaction recovery failed", error=str(e))
        next_count = 0.0
        try:
            while not ctx.stopping:
                if requested(ctx) or time.monotonic() >= next_count:
                    next_count = time.monotonic() + conf.gc_wait_s
                    ctx.write_stats(count_holdings(index, ledger_dirs))
                ctx.pause(0.1)  # a SIGTERM ends it at once
        finally:
            env.close()
        return 0

    store = None
    ctx.log("gc worker ready", every_s=conf.gc_wait_s)
    ctx.ready()  # the store is opened by the runs: an outage must not stop the bookie starting
    last_problem = ""
    totals = {"gc_runs_total": 0, "gc_deleted_ledgers_total": 0,
              "gc_deleted_logs_total": 0, "gc_overreplicated_ledgers_total": 0}
    ctx.write_stats({**totals, **count_holdings(index, ledger_dirs)})
    next_run = time.monotonic() + conf.gc_wait_s
    compactor = Compactor(ctx, index, ledger_dirs, time.monotonic())
    cookie = local_cookie(conf)  # an empty listing is believed only from the store that holds it
    over = naming.OverReplicated(conf.gc_overreplicated_wait_s)  # gcOverreplicatedLedgerWaitTime
    next_over = 0.0  # the first look at the first run, then one every wait
    try:
        try:
            compactor.recover()  # before any pass: finish or undo what a crash interrupted
        except (OSError, lmdb.Error) as e:
            ctx.log("compaction recovery failed; retrying at the next pass", error=str(e))
        while not ctx.stopping:
            request = take_request(ctx)
            forced = request is not None
            if not forced and time.monotonic() < next_run:
                ctx.pause(0.1)  # a SIGTERM ends it at once
                continue
            next_run = time.monotonic() + conf.gc_wait_s
            started = time.monotonic()
            problem = error = ""
            try:
                compactor.recover()  # a step a crash (of this worker or the bookie) interrupted
                if store is None:
                    store = open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s,
                                          zk_security=conf.zk_security)
                done = collect(index, store, ledger_dirs, cookie)
                if conf.gc_overreplicated_wait_s > 0 and time.monotonic() >= next_over:
                    next_over = time.monotonic() + conf.gc_overreplicated_wait_s
                    dropped = overreplicated.look(index, store, conf.bookie_id, over,
                                                  time.monotonic())
                    totals["gc_overreplicated_ledgers_total"] += len(dropped)
                    if dropped:
                        ctx.log("gc dropped over-replicated copies", ledgers=len(dropped),
                                ids=",".join(map(str, dropped[:20])))
            except MetadataError as e:
                problem = "gc skipped: metadata store unavailable; retrying at the next run"
                error = f"{type(e).__name__}: {e}"
            except EmptyListingRefused as e:
                problem, error = "gc refused to delete", str(e)
            except (OSError, lmdb.Error) as e:
                # A disk or index error must not kill the worker: what is left undone is
                # planned again from the facts at the next run.
                problem, error = "gc run failed; retrying at the next run", str(e)
            if problem:
                if problem != last_problem or forced:  # one line per change of state
                    ctx.log(problem, error=error)
                last_problem = problem
                continue
            if last_problem:
                ctx.log("gc runs again")
                last_problem = ""
            totals["gc_runs_total"] += 1
            totals["gc_deleted_ledgers_total"] += len(done.drop_ledgers)
            totals["gc_deleted_logs_total"] += len(done.delete_logs)
            if not done.empty or forced:
                ctx.log("gc", deleted_ledgers=len(done.drop_ledgers),
                        deleted_logs=len(done.delete_logs),
                        forgotten_maps=len(done.forget_maps), requested=forced,
                        seconds=f"{time.monotonic() - started:.3f}")
            ctx.write_stats({**totals, **count_holdings(index, ledger_dirs)})
            kind = compactor.due(time.monotonic(), request)
            if kind and compaction_suspended(ctx.run_dir, kind):
                ctx.log("compaction suspended; pass skipped", kind=kind)
                kind = None
            if kind:
                try:
                    compactor.run(kind)
                except (OSError, lmdb.Error) as e:  # undone or recovered at the next pass
                    ctx.log("compaction pass failed; retrying at the next one", error=str(e))
                ctx.write_stats({**totals, **count_holdings(index, ledger_dirs)})
    finally:
        if store is not None:
            store.close()
        env.close()
    return 0
