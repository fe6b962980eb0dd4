"""The GC worker: scan-and-compare garbage collection, every ``gcWaitTime``, and at once when
the supervisor asks (the admin API's ``PUT /api/v1/bookie/gc`` creates ``gc.request`` in the run
dir; the worker looks for it every 100 ms, the same tick it sleeps on anyway).

What to delete is decided by ``bookie.workers.gc_policy.plan`` (its module says why it is safe);
this module only gathers the facts in the order the plan needs (the index snapshot *before* the
metadata listing) and carries the plan out: ledgers leave the index in short write transactions,
then dead entry logs are unlinked (their directories fsynced), then their maps are forgotten.
Compaction of partly live logs comes later.

Without a metadata store (``metadataServiceUri`` empty) nothing is ever deleted; the worker only
counts what the bookie holds (the ``bookie_ledgers`` and ``bookie_entry_logs`` gauges).

A metadata outage never stops the worker: it becomes ready without the store, opens it (and
lists the ledgers) at each run, and a run the store could not answer is skipped with one log
line, tried again at the next one.  A listing with no ledgers at all while this bookie holds
some deletes nothing (``EmptyListingRefused``): a store answering an empty list by mistake (a
wrong root, a wiped or restored-empty store) must not take every ledger of every bookie with it.
"""

from __future__ import annotations

import os
import time

import lmdb

from bookie.workers import gc_policy
from bookie.workers.journal import fsync_dir
from bookie.workers.layout import current_dir
from bookie.workers.storage import LOG_KEY, Index, find_log, list_logs, open_index

DROP_BATCH_ENTRIES = 10_000  # entries per write transaction: keep the add worker's commits flowing


class EmptyListingRefused(Exception):
    """The store listed no ledgers while this bookie holds some: nothing was deleted."""


def collect(index: Index, store, ledger_dirs: list[str]) -> gc_policy.GcPlan:
    """One GC run: gather the facts, plan, carry the plan out.  Returns the plan carried out.

    Raises:
        MetadataError: the store could not list its ledgers (nothing was deleted).
    """
    with index.env.begin() as txn:  # one snapshot, taken before the listing
        held = index.ledger_ids(txn)
        maps = index.log_maps(txn)
        current = index.current_logs(txn)
    in_store = list(store.list_ledgers())
    if not in_store and held:
        raise EmptyListingRefused(
            f"the metadata store lists no ledgers but this bookie holds {len(held)}; deleting "
            f"nothing (a store answering an empty list by mistake must not empty the bookie)")
    on_disk = [log_id for d in ledger_dirs for log_id in list_logs(d)]
    plan = gc_policy.plan(held, in_store, maps, current, on_disk)
    for ledger_id in plan.drop_ledgers:
        while True:
            with index.env.begin(write=True) as txn:
                n = index.delete_ledger(txn, ledger_id, DROP_BATCH_ENTRIES)
            if n < DROP_BATCH_ENTRIES:
                break
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
        with index.env.begin(write=True) as txn:
            for log_id in plan.forget_maps:
                txn.delete(LOG_KEY.pack(log_id), db=index.logs)
    return plan


GC_REQUEST_FILE = "gc.request"  # in the run dir: the supervisor asks for a pass now (PUT /api/v1/bookie/gc)


def requested(ctx) -> bool:
    """True (once) when the supervisor asked for a GC pass now: it creates GC_REQUEST_FILE."""
    try:
        os.unlink(os.path.join(ctx.run_dir, GC_REQUEST_FILE))
        return True
    except FileNotFoundError:
        return False


def count_holdings(index: Index, ledger_dirs: list[str]) -> dict:
    """The ledgers and entry logs this bookie holds (gauges bookie_ledgers, bookie_entry_logs)."""
    with index.env.begin() as txn:
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
        next_count = 0.0
        try:
            while not ctx.stopping:
                if requested(ctx) or time.monotonic() >= next_count:
                    next_count = time.monotonic() + conf.gc_wait_s
                    ctx.write_stats(count_holdings(index, ledger_dirs))
                time.sleep(0.1)
        finally:
            env.close()
        return 0
    from bookie.metadata import MetadataError, open_metadata

    store = None
    ctx.log("gc worker ready", every_s=conf.gc_wait_s)
    ctx.ready()  # the store is opened by the runs: an outage must not stop the bookie starting
    last_problem = ""
    totals = {"gc_runs_total": 0, "gc_deleted_ledgers_total": 0, "gc_deleted_logs_total": 0}
    ctx.write_stats({**totals, **count_holdings(index, ledger_dirs)})
    next_run = time.monotonic() + conf.gc_wait_s
    try:
        while not ctx.stopping:
            forced = requested(ctx)
            if not forced and time.monotonic() < next_run:
                time.sleep(0.1)
                continue
            next_run = time.monotonic() + conf.gc_wait_s
            started = time.monotonic()
            problem = error = ""
            try:
                if store is None:
                    store = open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s)
                done = collect(index, store, ledger_dirs)
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
                ctx.log("gc", deleted_ledgers=len(done.drop_ledgers), deleted_logs=len(done.delete_logs),
                        forgotten_maps=len(done.forget_maps), requested=forced,
                        seconds=f"{time.monotonic() - started:.3f}")
            ctx.write_stats({**totals, **count_holdings(index, ledger_dirs)})
    finally:
        if store is not None:
            store.close()
        env.close()
    return 0
