"""Entry-log walks, the index check and the rebuild, on real files and real LMDB (no bookie
process): entries stored through the add worker's own storage path (``LedgerStorage``) over two
ledger directories and many small logs; the rebuilt index equals the live one."""

import os
import random
import shutil

import numpy as np
import pytest

from bookie import wire
from bookie.testing.rawclient import make_entry
from bookie.storage import records
from bookie.workers.config import BookieConfig
from bookie.storage.inspect import (EntryLogFile, InspectError, index_path, ledger_dirs_of,
                                    log_paths, open_index_readonly)
from bookie.core.ledgers import stored_key
from bookie.storage.index_check import check_index
from bookie.storage.index_verify import consistency_check
from bookie.storage.index_rebuild import rebuild_index
from bookie.storage.entrylog import EntryLogs, log_name
from bookie.storage.index import Index, open_index
from bookie.storage.ledger_storage import LedgerStorage

KEY = b"k" * 20


@pytest.fixture
def conf(tmp_path):
    for d in ("j", "l1", "l2"):
        os.makedirs(tmp_path / d / "current")
    return BookieConfig.from_mapping({
        "journalDirectory": str(tmp_path / "j"),
        "ledgerDirectories": f"{tmp_path / 'l1'},{tmp_path / 'l2'}",
        "logSizeLimit": "8192", "indexMapSizeMB": "64", "bookiePort": "3999"})


def store(conf, batches, fence=(), recovery=()):
    """Store (ledger_id, [entries]) batches as the add worker does; fence some ledgers."""
    dirs = ledger_dirs_of(conf)
    env = open_index(os.path.dirname(index_path(conf)), conf.index_map_size_bytes)
    logs = EntryLogs(dirs, conf.log_size_limit_bytes, False)
    storage = LedgerStorage(Index(env), logs)
    for ledger_id, entries in batches:
        lengths = np.array([len(e) for e in entries], dtype=np.int64)
        lengths_frame = lengths.astype(wire.LENGTHS_DTYPE).tobytes()
        data = b"".join(entries)
        rec_recovery = ledger_id in recovery
        skey = stored_key(b"", ledger_id, KEY)  # records carry the key's stored form
        parts, size, data_offset = records.add_batch_parts(ledger_id, skey, lengths_frame, data,
                                                           rec_recovery)
        flags = records.FLAG_STORED_KEY | int(rec_recovery)
        storage.table.apply(records.Record(records.ADD_BATCH, flags, ledger_id, skey,
                                           -1, lengths, data_offset, size))
        offsets = np.cumsum(lengths) - lengths
        _, entry_ids = wire.batch_ids(data, offsets)
        storage.store_batch(ledger_id, parts, size, data_offset, entry_ids, lengths, offsets)
        storage.commit()
    for ledger_id in fence:  # as the add worker does: the record goes to the entry log too
        skey = stored_key(b"", ledger_id, KEY)
        rec = records.fence_record(ledger_id, skey, records.FLAG_STORED_KEY | records.FLAG_VERIFIED)
        if storage.table.apply(records.parse(rec, 0)):
            storage.store_record(ledger_id, rec)
    storage.commit()
    logs.close()
    env.close()


def snapshot(conf):
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        entries = {(lid, eid): loc for lid, eid, loc in index.iter_locations(txn)}
        ledgers = {lid: index.get_ledger(txn, lid) for lid in index.ledger_ids(txn)}
        maps = index.log_maps(txn)
    env.close()
    return entries, ledgers, {k: v for k, v in maps.items() if v}


def some_batches(rng, n_ledgers=5, n_batches=60):
    next_id = {}
    out = []
    for _ in range(n_batches):
        lid = rng.randrange(1, n_ledgers + 1)
        first = next_id.get(lid, 0)
        k = rng.randrange(1, 6)
        out.append((lid, [make_entry(lid, first + i, rng.randbytes(rng.randrange(0, 900)))
                          for i in range(k)]))
        next_id[lid] = first + k
    return out


def test_the_rebuilt_index_equals_the_live_one_and_keeps_what_the_old_one_adds(conf):
    store(conf, some_batches(random.Random(3)), fence=[2])
    env = open_index(os.path.dirname(index_path(conf)), conf.index_map_size_bytes)
    index = Index(env)
    with env.begin(write=True) as txn:  # the GC deleted ledger 5: its bytes stay in the maps
        index.delete_ledger(txn, 5)
    env.close()
    assert check_index(conf) is None
    live = snapshot(conf)
    report = rebuild_index(conf)
    assert report.salvaged_from_old_index and report.fenced == 1
    assert snapshot(conf) == live
    assert len(log_paths(ledger_dirs_of(conf))) > 4 and check_index(conf) is None


def test_without_the_old_index_or_the_journal_the_fences_come_back_from_the_entry_logs(conf):
    store(conf, some_batches(random.Random(4)), fence=[2], recovery=[3])
    entries, ledgers, maps = snapshot(conf)
    os.rename(index_path(conf), index_path(conf) + ".lost")
    problem = check_index(conf)
    assert "does not exist" in problem and "bookie shell rebuild-index --conf FILE" in problem
    rebuild_index(conf)
    got_entries, got_ledgers, got_maps = snapshot(conf)
    assert got_entries == entries and got_maps == maps
    # ledger 2's fence is a record in its entry log; ledger 3 had a recovery add but no fence
    # here (the live path never fences on a recovery add, so neither does the rebuild)
    assert got_ledgers == ledgers
    assert {lid for lid, s in got_ledgers.items() if s["fenced"]} == {2}
    shutil.rmtree(index_path(conf))
    assert rebuild_index(conf, fence_all=True).fenced == len(ledgers)
    assert all(s["fenced"] for s in snapshot(conf)[1].values())


def test_an_entry_in_two_logs_is_a_copy_not_corruption_and_the_higher_log_wins(conf):
    first = [make_entry(1, i, b"x" * 700) for i in range(10)]  # alone in its log
    filler = [(1, [make_entry(1, 10 + i, b"y" * 2000)]) for i in range(8)]  # rolls the log
    store(conf, [(1, first), *filler, (1, first)])
    before = snapshot(conf)[0]
    rebuild_index(conf)
    entries, _, maps = snapshot(conf)
    assert entries == before  # the index pointed at the later copy, and so does the rebuild
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        maps = index.log_maps(txn)
        copy_in = index.locate(txn, 1, 0)[0]
        dirs = ledger_dirs_of(conf)
        first_log = min(log_id for log_id, path in log_paths(dirs) if path.startswith(dirs[1]))
        assert copy_in > first_log and all(index.locate(txn, 1, i)[0] == copy_in for i in range(10))
        # the first copy's log holds nothing live: an empty map, so the GC may delete it
        assert maps[first_log] == {}
        assert index.current_logs(txn) == {max(log_id for log_id, _ in log_paths(dirs))}
    env.close()
    assert check_index(conf) is None
    report = consistency_check(conf)
    assert report.problem_count == 0 and report.entries == 18


def test_the_check_names_a_missing_log_and_passes_a_gc_leftover(conf):
    store(conf, some_batches(random.Random(5), n_ledgers=2, n_batches=20))
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        log_id, _ = index.last_entry(txn, 1)[1][0], None
    env.close()
    path = dict(log_paths(ledger_dirs_of(conf)))[log_id]
    os.rename(path, path + ".away")
    assert f"{log_name(log_id)}, which is missing" in check_index(conf)
    os.rename(path + ".away", path)
    # A map of a log the GC unlinked, whose ledgers are all deleted, is a leftover, not damage.
    env = open_index(os.path.dirname(index_path(conf)), conf.index_map_size_bytes)
    index = Index(env)
    with env.begin(write=True) as txn:
        index.add_to_log_map(txn, 0xABCD, {777: 100})
    env.close()
    assert check_index(conf) is None


def test_a_log_scan_stops_at_zeros_and_reports_junk_and_a_foreign_file(conf, tmp_path):
    store(conf, some_batches(random.Random(6), n_ledgers=1, n_batches=3))
    (log_id, path), = log_paths(ledger_dirs_of(conf))[:1]
    with EntryLogFile(path) as elog:
        entries = [e for pos, rec in elog.records() for e in elog.entries(rec, pos)]
        assert elog.scan.stop == "end of file" and not elog.scan.damaged
        end = elog.scan.end
    assert [e.entry_id for e in entries] == list(range(len(entries)))
    with open(path, "ab") as f:
        f.write(b"\0" * 64)
    with EntryLogFile(path) as elog:
        list(elog.records())
        assert elog.scan.stop == "zeros" and elog.scan.end == end
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(b"\x07" * 16)
    with EntryLogFile(path) as elog:
        list(elog.records())
        assert elog.scan.damaged and f"offset {end}" in elog.scan.stop
    other = tmp_path / "not-a-log"
    other.write_bytes(b"hello" * 20)
    with pytest.raises(InspectError, match="not an entry log"):
        EntryLogFile(str(other))


def test_a_copy_that_fails_its_digest_does_not_replace_a_whole_one(conf):
    from bookie.client.digest import DigestManager
    dm = DigestManager(1, "crc32c", b"pw")
    good = [dm.encode(i, i - 1, 0, b"p" * 700) for i in range(10)]
    torn = [e[:-100] + b"\0" * 100 for e in good]  # a copy whose last page never hit the disk
    filler = [(1, [dm.encode(10 + i, 9, 0, b"y" * 2000)]) for i in range(8)]
    store(conf, [(1, good), *filler, (1, torn)])
    report = rebuild_index(conf)
    assert report.copies == 10 and sum("fails its digest" in w for w in report.warnings) == 10
    assert consistency_check(conf).problem_count == 0
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        first_log = index.locate(txn, 1, 0)[0]
        assert first_log == min(log_id for log_id, p in log_paths(ledger_dirs_of(conf)))
    env.close()


def test_a_reader_crashing_in_its_child_is_one_clear_error():
    import signal

    from bookie.storage.inspect import IndexUnreadable, in_child
    assert in_child(lambda: {"a": [1, 2]}, "x") == {"a": [1, 2]}
    # (SIGKILL stands for the SIGSEGV of a damaged LMDB file: pytest's faulthandler would dump
    # the child's stack for a real one)
    with pytest.raises(IndexUnreadable, match="the index here crashed the process reading it .SIGKILL"):
        in_child(lambda: os.kill(os.getpid(), signal.SIGKILL), "the index here")
    with pytest.raises(IndexUnreadable, match="ValueError: no"):
        in_child(_raise_value_error, "x")


def _raise_value_error():
    raise ValueError("no")


def test_an_unfinished_compaction_copy_is_not_indexed_and_meta_keys_are_kept(conf):
    first = [make_entry(1, i, b"x" * 700) for i in range(10)]
    filler = [(1, [make_entry(1, 10 + i, b"y" * 2000)]) for i in range(8)]
    store(conf, [(1, first), *filler, (1, first)])
    logs = [log_id for log_id, _ in log_paths(ledger_dirs_of(conf))]
    env = open_index(os.path.dirname(index_path(conf)), conf.index_map_size_bytes)
    index = Index(env)
    with env.begin(write=True) as txn:
        # as if the last log were a compaction's copy, crashed before it was synced
        index.set_compaction_state(txn, {"old": logs[0], "new": logs[-1], "state": "copying"})
    for _ in range(3):
        index.allocate_log_id(ledger_dirs_of(conf))
    with env.begin() as txn:
        kept = index.bookkeeping(txn)  # the log id sequence and compaction's record
    env.close()
    report = rebuild_index(conf)
    assert any(f"{log_name(logs[-1])}: an unfinished compaction" in w for w in report.warnings)
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        assert {index.locate(txn, 1, i)[0] for i in range(10)} == {logs[0]}
        assert index.bookkeeping(txn) == kept
        assert index.compaction_state(txn)["state"] == "copying"
        assert logs[-1] not in index.log_maps(txn)
    env.close()


def test_the_consistency_check_follows_logs_rolled_after_it_began(conf):
    from bookie.storage.index_verify import _Checker

    store(conf, [(1, [make_entry(1, i, b"a" * 500) for i in range(5)])])
    checker = _Checker(conf, None, None)  # knows the logs on disk now
    store(conf, [(1, [make_entry(1, 5 + k * 5 + i, b"b" * 900) for i in range(5)]) for k in range(6)])
    env, checker.index = open_index_readonly(conf)  # (one process opens an environment once)
    checker.env = env
    try:
        assert [e for e, _ in checker._located(1, chunk=3)] == list(range(35))
        checker.ledger(1)
        assert checker.report.entries == 35 and checker.report.problem_count == 0
    finally:
        checker.close()
        env.close()


def test_the_check_names_a_tail_that_is_not_the_entry_indexed_there(conf):
    store(conf, some_batches(random.Random(8), n_ledgers=3, n_batches=30))
    env, index = open_index_readonly(conf)
    with env.begin() as txn:
        entry_id, (log_id, offset, _) = index.last_entry(txn, 2)
    env.close()
    with open(dict(log_paths(ledger_dirs_of(conf)))[log_id], "r+b") as f:
        f.seek(offset)
        f.write(wire.ENTRY_HEADER.pack(2, entry_id + 1000, 0, 0)[:16])
    problem = check_index(conf)
    assert f"ledger 2 entry {entry_id} is indexed at {log_name(log_id)} offset {offset}" in problem
    assert f"but ledger 2 entry {entry_id + 1000} lies there" in problem
    assert problem.endswith("rebuild it with 'bookie shell rebuild-index --conf FILE'")
