"""The GC worker: scan-and-compare garbage collection.

Every ``gcWaitTime``: snapshot the ledgers this bookie holds (the index's ledger table), *then*
list the ledgers in the metadata store.  A ledger held here and absent there was deleted (a
ledger always exists in the store before its first add reaches a bookie, so taking the local
snapshot first can never mistake a new ledger for a deleted one).  Deleted ledgers leave the
index in short write transactions; then every entry log other than the one being written whose
ledgers are all gone is deleted, file and map.  Compaction of partly live logs comes later.

Without a metadata store (``metadataServiceUri`` empty) nothing is ever deleted.
"""

from __future__ import annotations

import os
import time

from bookie.workers.layout import current_dir
from bookie.workers.storage import Index, find_log, list_logs, open_index
from bookie.workers.journal import fsync_dir


def select_deleted(local_ledgers, live_ledgers) -> list[int]:
    """Pure: ledgers held locally that the metadata store no longer has."""
    live = set(live_ledgers)
    return sorted(lid for lid in local_ledgers if lid not in live)


def select_dead_logs(log_maps: dict[int, dict[int, int]], live_local: set[int],
                     current_logs: set[int], on_disk: list[int]) -> list[int]:
    """Pure: entry logs (none being written) none of whose ledgers is still held."""
    dead = []
    newest_current = max(current_logs, default=0)
    for log_id in on_disk:
        if log_id in current_logs or log_id > newest_current:
            continue  # being written, or opened after the snapshot of current logs
        ledgers = log_maps.get(log_id)
        if ledgers is None:
            continue  # no map yet: its ledgers are unknown, keep it
        if not any(lid in live_local for lid in ledgers):
            dead.append(log_id)
    return dead


def collect(ctx, index: Index, store, ledger_dirs: list[str]) -> dict:
    with index.env.begin() as txn:
        local = index.ledger_ids(txn)
    live = list(store.list_ledgers())
    deleted = select_deleted(local, live)
    for lid in deleted:
        while True:
            with index.env.begin(write=True) as txn:
                n = index.delete_ledger(txn, lid)
            if n < 10_000:
                break
    with index.env.begin() as txn:
        remaining = set(index.ledger_ids(txn))
        maps = index.log_maps(txn)
        current = index.current_logs(txn)
    on_disk = sorted(i for d in ledger_dirs for i in list_logs(d))
    dead = select_dead_logs(maps, remaining, current, on_disk)
    touched = set()
    for log_id in dead:
        try:
            path = find_log(ledger_dirs, log_id)
            os.unlink(path)
            touched.add(os.path.dirname(path))
        except FileNotFoundError:
            pass
        with index.env.begin(write=True) as txn:
            txn.delete(log_id.to_bytes(4, "big"), db=index.logs)
    for d in touched:
        fsync_dir(d)
    return {"deleted_ledgers": len(deleted), "deleted_logs": len(dead)}


def run(ctx) -> int:
    conf = ctx.conf
    if not conf.metadata_uri:
        ctx.log("gc idle: no metadata store configured")
        ctx.ready()
        while not ctx.stopping:
            time.sleep(0.2)
        return 0
    from bookie.metadata import MetadataError, open_metadata

    index_dir = current_dir(conf.index_dirs[0])
    ledger_dirs = [current_dir(d) for d in conf.ledger_dirs]
    env = open_index(index_dir, conf.index_map_size_bytes)
    index = Index(env)
    store = open_metadata(conf.metadata_uri, timeout_s=conf.metadata_timeout_s)
    ctx.ready()
    totals = {"gc_runs_total": 0, "gc_deleted_ledgers_total": 0, "gc_deleted_logs_total": 0}
    next_run = time.monotonic() + conf.gc_wait_s
    try:
        while not ctx.stopping:
            if time.monotonic() < next_run:
                time.sleep(0.1)
                continue
            next_run = time.monotonic() + conf.gc_wait_s
            try:
                result = collect(ctx, index, store, ledger_dirs)
            except MetadataError as e:
                ctx.log("gc skipped: metadata store unavailable", error=str(e))
                continue
            totals["gc_runs_total"] += 1
            totals["gc_deleted_ledgers_total"] += result["deleted_ledgers"]
            totals["gc_deleted_logs_total"] += result["deleted_logs"]
            if result["deleted_ledgers"] or result["deleted_logs"]:
                ctx.log("gc", **result)
            ctx.write_stats(totals)
    finally:
        store.close()
        env.close()
    return 0
