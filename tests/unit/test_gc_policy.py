"""Garbage collection: the pure plan (property-tested), and one GC run carried out on real entry
logs, a real LMDB index and the embedded metadata store, all in a temp dir."""

import os
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.core import gc_policy
from bookie.storage import records
from bookie.workers.gc_worker import collect
from bookie.storage.entrylog import EntryLogReader, EntryLogs, list_logs
from bookie.storage.index import Index, open_index

# -- the plan ------------------------------------------------------------------------------------

_ids = st.integers(1, 30)
_facts = st.fixed_dictionaries({
    "held": st.sets(_ids, max_size=15),
    "in_store": st.sets(_ids, max_size=15),
    "maps": st.dictionaries(st.integers(1, 25), st.dictionaries(_ids, st.integers(1, 999), max_size=5),
                            max_size=12),
    "current": st.sets(st.integers(1, 25), max_size=3),
    "on_disk": st.sets(st.integers(1, 25), max_size=20),
    "high_water": st.one_of(st.none(), st.integers(0, 31)),
})


def _plan(f):
    return gc_policy.plan(f["held"], f["in_store"], f["maps"], f["current"], f["on_disk"],
                          high_water=f["high_water"])


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_a_ledger_in_the_metadata_store_is_never_dropped(f):
    p = _plan(f)
    assert not set(p.drop_ledgers) & f["in_store"]


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_an_id_above_the_high_water_mark_is_kept(f):
    # Above the mark: the store had not handed the id out when the listing began (created since,
    # or held only by a bookie that once ran without a store): never deleted on a guess.  At or
    # below: handed out and gone from the store, so deleted.
    p = _plan(f)
    gone = f["held"] - f["in_store"]
    mark = f["high_water"]
    if mark is None:  # no mark: every ledger gone from the store is taken as deleted
        assert set(p.drop_ledgers) == gone
        return
    assert set(p.drop_ledgers) == {lid for lid in gone if lid <= mark}
    assert p.drop_ledgers == sorted(p.drop_ledgers)


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_the_mark_changes_which_ledgers_leave_a_tombstone_never_which_logs_die(f):
    # Compaction and log deletion see the bytes of any ledger gone from the store as dead.
    p, unmarked = _plan(f), _plan({**f, "high_water": None})
    assert (p.delete_logs, p.forget_maps) == (unmarked.delete_logs, unmarked.forget_maps)
    assert set(p.drop_ledgers) <= set(unmarked.drop_ledgers)


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_a_log_is_deleted_only_when_every_ledger_in_its_map_is_gone(f):
    p = _plan(f)
    for log_id in set(p.delete_logs) | set(p.forget_maps):
        assert log_id in f["maps"], "a log without a map has unknown ledgers"
        assert not set(f["maps"][log_id]) & f["in_store"]
    assert set(p.delete_logs) <= f["on_disk"] and set(p.delete_logs) <= set(p.forget_maps)


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_the_logs_being_written_and_newer_ones_are_never_deleted(f):
    p = _plan(f)
    newest = max(f["current"], default=0)
    for log_id in set(p.delete_logs) | set(p.forget_maps):
        assert log_id not in f["current"] and log_id <= newest


@settings(max_examples=150, deadline=None)
@given(_facts)
def test_every_dead_log_is_collected(f):
    p = _plan(f)
    newest = max(f["current"], default=0)
    dead = {log_id for log_id, ledgers in f["maps"].items()
            if log_id not in f["current"] and log_id <= newest and not set(ledgers) & f["in_store"]}
    assert set(p.forget_maps) == dead
    assert set(p.delete_logs) == dead & f["on_disk"]
    assert p.drop_ledgers == sorted(p.drop_ledgers) and p.delete_logs == sorted(p.delete_logs)


def test_a_ledger_created_after_the_snapshot_keeps_nothing_from_being_collected():
    # Ledger 9 is created and written after the snapshot: it is in neither the snapshot nor its
    # maps, only in the store; nothing changes for the others.
    p = gc_policy.plan(held_ledgers=[1, 2], metadata_ledgers=[2, 9], log_maps={1: {1: 10}, 2: {2: 5}},
                       current_logs=[3], logs_on_disk=[1, 2, 3, 4])
    assert (p.drop_ledgers, p.delete_logs, p.forget_maps) == ([1], [1], [1])


def test_an_id_above_the_mark_is_kept_and_a_deleted_one_tombstoned_in_the_same_run():
    # Store handed out ids up to 5 (mark 5); 3 was deleted; 1006 is above the mark.
    p = gc_policy.plan(held_ledgers=[2, 3, 1006], metadata_ledgers=[2, 4, 5],
                       log_maps={1: {3: 10, 1006: 20}, 2: {2: 5, 1006: 7}}, current_logs=[3],
                       logs_on_disk=[1, 2, 3], high_water=5)
    assert (p.drop_ledgers, p.delete_logs) == ([3], [1])
    assert gc_policy.plan([9], [1], {}, [], [], high_water=5).empty


@given(st.sets(_ids, max_size=15), st.one_of(st.none(), st.integers(-1, 31)))
def test_an_empty_listing_is_acted_on_only_when_the_mark_covers_every_held_id(held, high_water):
    trusted = gc_policy.empty_listing_trusted(held, high_water)
    if not held:
        assert trusted
    elif high_water is None or any(lid > high_water for lid in held):
        assert not trusted  # a wrong, wiped or restored store: it never handed these ids out
    else:
        assert trusted  # every id held was handed out, and none is listed: all deleted


def test_a_wiped_store_is_not_trusted_and_a_deleted_cluster_is():
    assert not gc_policy.empty_listing_trusted({3, 7}, -1)  # counter started again
    assert not gc_policy.empty_listing_trusted({3, 7}, 5)  # id 7 never handed out here
    assert gc_policy.empty_listing_trusted({3, 7}, 7)
    assert gc_policy.empty_listing_trusted(set(), None)


def test_no_current_logs_recorded_means_no_log_is_deleted():
    p = gc_policy.plan([1], [], {1: {1: 10}}, current_logs=[], logs_on_disk=[1])
    assert p.drop_ledgers == [1] and p.delete_logs == [] and p.forget_maps == []


# -- one GC run on real files, a real index and the embedded metadata store ----------------------

KEY = b"gc-key"
MAP_SIZE_BYTES = 64 * 1024 * 1024


def _write_ledgers(logs: EntryLogs, index: Index, payloads_by_ledger: dict) -> dict:
    """Write each ledger's entries as the add worker would (one record per entry, ledger
    record, log maps, current logs); returns (ledger_id, entry_id) -> payload."""
    written = {}
    with index.env.begin(write=True) as txn:
        for ledger_id, payloads in payloads_by_ledger.items():
            index.put_ledger(txn, ledger_id, {"key": KEY.hex(), "fenced": False, "lac": -1})
            for entry_id, payload in enumerate(payloads):
                parts, size, data_offset = records.add_batch_parts(
                    ledger_id, KEY, struct.pack("<I", len(payload)), payload, recovery=False)
                writer = logs.writer_for(ledger_id)
                if writer.needs_roll(size):
                    writer.roll()
                start = writer.append(parts)
                index.put_locations(txn, ledger_id, np.array([entry_id]), writer.log_id,
                                    np.array([start + data_offset]), np.array([len(payload)]))
                index.add_to_log_map(txn, writer.log_id, {ledger_id: len(payload)})
                written[(ledger_id, entry_id)] = payload
        index.set_current_logs(txn, logs.current_ids())
    return written


def _logs_holding(index: Index, ledger_ids) -> set[int]:
    with index.env.begin() as txn:
        return {log_id for log_id, m in index.log_maps(txn).items() if set(m) & set(ledger_ids)}


def test_a_gc_run_drops_deleted_ledgers_and_dead_logs_and_keeps_every_live_entry(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        os.makedirs(d)
    meta = LedgerMetadata(1, 1, 1, fragments=[(0, ["127.0.0.1:3181"])])
    store = open_metadata(f"lmdb://{tmp_path}/metadata", create=True)
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    logs = EntryLogs(dirs, size_limit=4096, preallocate=False)
    index = Index(env)
    try:
        ids = [store.create_ledger(meta)[0] for _ in range(6)]
        doomed, kept = ids[:3], ids[3:]
        # Interleaved, so that some logs hold doomed and kept ledgers both.
        written = _write_ledgers(logs, index, {lid: [os.urandom(700) for _ in range(12)] for lid in ids})
        current = set(logs.current_ids())
        shared = _logs_holding(index, doomed) & _logs_holding(index, kept)
        only_doomed = _logs_holding(index, doomed) - _logs_holding(index, kept) - current
        assert only_doomed
        for lid in doomed:
            store.remove_ledger(lid)

        done = collect(index, store, dirs)

        assert done.drop_ledgers == sorted(doomed)
        assert set(done.delete_logs) == only_doomed
        on_disk = {i for d in dirs for i in list_logs(d)}
        assert not on_disk & only_doomed and shared | current <= on_disk
        reader = EntryLogReader(dirs)
        with env.begin() as txn:
            assert sorted(index.ledger_ids(txn)) == sorted(kept)
            assert set(index.log_maps(txn)).isdisjoint(only_doomed)
            for (lid, eid), payload in written.items():
                loc = index.locate(txn, lid, eid)
                if lid in doomed:
                    assert loc is None
                else:
                    assert reader.read(*loc) == payload
        reader.close()
        assert collect(index, store, dirs).empty  # nothing left to do
    finally:
        logs.close()
        env.close()
        store.close()


def test_a_run_interrupted_after_unlinking_forgets_the_maps_next_time(tmp_path):
    d = str(tmp_path / "a")
    os.makedirs(d)
    meta = LedgerMetadata(1, 1, 1, fragments=[(0, ["127.0.0.1:3181"])])
    store = open_metadata(f"lmdb://{tmp_path}/metadata", create=True)
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    logs = EntryLogs([d], size_limit=4096, preallocate=False)
    index = Index(env)
    try:
        doomed = store.create_ledger(meta)[0]
        kept = store.create_ledger(meta)[0]
        _write_ledgers(logs, index, {doomed: [os.urandom(900) for _ in range(10)],
                                     kept: [os.urandom(10)]})
        store.remove_ledger(doomed)
        first = collect(index, store, [d])
        assert first.delete_logs
        # As if the run had crashed after unlinking: the maps are back, the files are not.
        with env.begin(write=True) as txn:
            for log_id in first.forget_maps:
                index.add_to_log_map(txn, log_id, {doomed: 1})
        again = collect(index, store, [d])
        assert again.delete_logs == [] and again.forget_maps == first.forget_maps
        with env.begin() as txn:
            assert set(index.log_maps(txn)).isdisjoint(first.forget_maps)
    finally:
        logs.close()
        env.close()
        store.close()


def test_a_gc_run_lists_the_deleted_ledgers_durably_before_it_tombstones_them(tmp_path):
    # The index is a cache: a rebuild from logs that still hold a deleted ledger's entries must
    # not bring it back, so the run appends its id to the durable list first.
    from bookie.storage import deletes
    d = str(tmp_path / "a")
    os.makedirs(d)
    meta = LedgerMetadata(1, 1, 1, fragments=[(0, ["127.0.0.1:3181"])])
    store = open_metadata(f"lmdb://{tmp_path}/metadata", create=True)
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    logs = EntryLogs([d], size_limit=4096, preallocate=False)
    index = Index(env)
    try:
        kept, deleted = store.create_ledger(meta)[0], store.create_ledger(meta)[0]
        _write_ledgers(logs, index, {lid: [os.urandom(900) for _ in range(6)] for lid in (kept, deleted)})
        store.remove_ledger(deleted)
        assert deletes.read(d) == set()
        done = collect(index, store, [d])
        assert done.drop_ledgers == [deleted] and deletes.read(d) == {deleted}
        with env.begin() as txn:
            assert index.is_deleted(txn, deleted) and not index.is_deleted(txn, kept)
        # a torn tail (a crash mid-append) is ignored, and the next append cuts it
        with open(deletes.path_of(d), "ab") as f:
            f.write(b"\x01\x02\x03")
        assert deletes.read(d) == {deleted}
        deletes.append(d, [kept + 100])
        assert deletes.read(d) == {deleted, kept + 100}
    finally:
        logs.close()
        env.close()
        store.close()
