"""Concurrent writers on every backend: compare-and-swap and ledger-id allocation.

Each worker process opens its own store after the fork, as bookies and clients do.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading

from bookie.metadata import BadVersionError, LedgerMetadata, open_metadata

PROCESSES = 3
UPDATES_PER_PROCESS = 20
THREADS = 2
CREATES_PER_THREAD = 12
TIMEOUT_S = 60


def _record(**custom) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, custom=custom,
                          fragments=[(0, ["a:3181", "b:3181", "c:3181"])])


def _increment_worker(uri: str, ledger_id: int, worker: int, updates: int, results) -> None:
    won = []
    with open_metadata(uri, timeout_s=20.0) as store:
        while len(won) < updates:
            meta, version = store.read_ledger(ledger_id)
            meta.custom["n"] = str(int(meta.custom["n"]) + 1)
            meta.custom["last"] = f"{worker}:{len(won)}"
            try:
                store.write_ledger(ledger_id, meta, version)
            except BadVersionError:
                continue  # someone else won this round: read again
            won.append(version)
    results.put((worker, won))


def _create_worker(uri: str, threads: int, creates: int, results) -> None:
    ids: list[int] = []
    lock = threading.Lock()
    with open_metadata(uri, timeout_s=20.0) as store:
        def create():
            for _ in range(creates):
                ledger_id, _ = store.create_ledger(_record())
                with lock:
                    ids.append(ledger_id)
        pool = [threading.Thread(target=create) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(TIMEOUT_S)
    results.put(ids)


def _run(target, args_per_process) -> list:
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, results)) for args in args_per_process]
    for p in procs:
        p.start()
    try:
        out = [results.get(timeout=TIMEOUT_S) for _ in procs]
    except queue.Empty:
        raise AssertionError("a worker process did not report within the timeout") from None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return out


def test_racing_processes_each_round_has_one_winner_and_no_update_is_lost(
        metadata_uri, metadata_store):
    ledger_id, _ = metadata_store.create_ledger(_record(n="0"))
    outcomes = _run(_increment_worker, [(metadata_uri, ledger_id, w, UPDATES_PER_PROCESS)
                                        for w in range(PROCESSES)])
    total = PROCESSES * UPDATES_PER_PROCESS
    won_versions = [v for _, won in outcomes for v in won]
    # Every version from 0 to total-1 was written over by exactly one winner...
    assert sorted(won_versions) == list(range(total))
    # ...and every win is in the record exactly once.
    meta, version = metadata_store.read_ledger(ledger_id)
    assert version == total
    assert meta.custom["n"] == str(total)


def test_ledger_ids_are_unique_across_processes_and_threads(metadata_uri, metadata_store):
    outcomes = _run(_create_worker, [(metadata_uri, THREADS, CREATES_PER_THREAD)] * PROCESSES)
    ids = [i for ids in outcomes for i in ids]
    assert len(ids) == PROCESSES * THREADS * CREATES_PER_THREAD
    assert len(set(ids)) == len(ids)
    assert sorted(metadata_store.list_ledgers()) == sorted(ids)
