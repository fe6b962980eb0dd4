"""Entry logs and the LMDB index, on real files and a real LMDB environment in a temp dir.

ADD_BATCH records go to the entry logs as the add worker writes them (the ledger's directory is
``ledger_id % n``, logs roll at the size limit, ids are unique across directories and go on
after a reopen); their entries' locations are committed to the index.  Read back through a
freshly opened index and ``EntryLogReader``, one by one and in runs, every entry comes out byte
for byte, and each log's ledger map counts exactly the bytes of each ledger it holds.
"""

import collections
import os
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bookie.storage import records
from bookie.storage.entrylog import EntryLogReader, EntryLogs, find_log, list_logs
from bookie.storage.index import Index, open_index

KEY = b"entry-log-key"
MAP_SIZE_BYTES = 64 * 1024 * 1024


def _store(logs: EntryLogs, index: Index, batches, written: dict) -> None:
    """Append each (ledger_id, first_entry_id, [payloads]) as one ADD_BATCH record and commit
    the locations, the log maps and the current logs in one write transaction."""
    log_bytes = collections.defaultdict(lambda: collections.defaultdict(int))
    locations = []
    for ledger_id, first, payloads in batches:
        lengths = np.array([len(p) for p in payloads], dtype=np.int64)
        parts, size, data_offset = records.add_batch_parts(
            ledger_id, KEY, struct.pack(f"<{len(payloads)}I", *lengths), b"".join(payloads),
            recovery=False)
        writer = logs.writer_for(ledger_id)
        if writer.needs_roll(size):
            writer.roll()
        start = writer.append(parts)
        offsets = np.cumsum(lengths) - lengths + start + data_offset
        entry_ids = np.arange(first, first + len(payloads), dtype=np.int64)
        locations.append((ledger_id, entry_ids, writer.log_id, offsets, lengths))
        log_bytes[writer.log_id][ledger_id] += int(lengths.sum())
        for e, p in zip(entry_ids, payloads):
            written[(ledger_id, int(e))] = p
    with index.env.begin(write=True) as txn:
        for loc in locations:
            index.put_locations(txn, *loc)
        for log_id, counts in log_bytes.items():
            index.add_to_log_map(txn, log_id, dict(counts))
        index.set_current_logs(txn, logs.current_ids())


def _batches(draw_ledgers, payload_sizes, next_entry: dict):
    out = []
    for ledger_id, sizes in zip(draw_ledgers, payload_sizes):
        first = next_entry.get(ledger_id, 0)
        payloads = [os.urandom(n) for n in sizes]
        next_entry[ledger_id] = first + len(payloads)
        out.append((ledger_id, first, payloads))
    return out


def _read_back(dirs, index_dir, written: dict) -> None:
    env = open_index(index_dir, MAP_SIZE_BYTES)
    reader = EntryLogReader(dirs, max_open=2)  # fewer fds than logs: the cache turns over
    try:
        index = Index(env)
        by_ledger = collections.defaultdict(dict)
        for (ledger_id, entry_id), payload in written.items():
            by_ledger[ledger_id][entry_id] = payload
        with env.begin() as txn:
            for ledger_id, entries in by_ledger.items():
                for entry_id, payload in entries.items():
                    log_id, offset, length = index.locate(txn, ledger_id, entry_id)
                    assert reader.read(log_id, offset, length) == payload
                run = index.locate_range(txn, ledger_id, 0, 1 << 30)
                assert [bytes(b) for b in reader.read_run(run)] == [entries[e] for e in sorted(entries)]
                last_id, _ = index.last_entry(txn, ledger_id)
                assert last_id == max(entries)
            maps = index.log_maps(txn)
        expected = collections.defaultdict(lambda: collections.defaultdict(int))
        with env.begin() as txn:
            for (ledger_id, entry_id), payload in written.items():
                log_id, _, _ = index.locate(txn, ledger_id, entry_id)
                expected[log_id][ledger_id] += len(payload)
        assert maps == {log_id: dict(c) for log_id, c in expected.items()}
        for log_id, counts in maps.items():
            directory = os.path.dirname(find_log(dirs, log_id))
            assert {dirs.index(directory)} == {lid % len(dirs) for lid in counts}
    finally:
        reader.close()
        env.close()


_ledger_batches = st.lists(
    st.tuples(st.integers(1, 7), st.lists(st.integers(0, 700), min_size=1, max_size=6)),
    min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n_dirs=st.integers(1, 3), size_limit=st.sampled_from([4096, 8192]),
       before=_ledger_batches, after=_ledger_batches)
def test_entries_read_back_byte_for_byte_across_rolls_reopens_and_directories(
        tmp_path_factory, n_dirs, size_limit, before, after):
    root = tmp_path_factory.mktemp("storage")
    dirs = [str(root / f"ledgers-{i}") for i in range(n_dirs)]
    for d in dirs:
        os.makedirs(d)
    index_dir = str(root / "index")
    written: dict = {}
    next_entry: dict = {}
    for phase in (before, after):  # the second phase is a restart: new EntryLogs, new env
        env = open_index(index_dir, MAP_SIZE_BYTES)
        logs = EntryLogs(dirs, size_limit, preallocate=True)
        ids_before = {i for d in dirs for i in list_logs(d)}
        try:
            batch = _batches([b[0] for b in phase], [b[1] for b in phase], next_entry)
            _store(logs, Index(env), batch, written)
            new_ids = {i for d in dirs for i in list_logs(d)} - ids_before
            assert not ids_before or min(new_ids) > max(ids_before)  # ids go on, never reused
        finally:
            logs.close()
            env.close()
    _read_back(dirs, index_dir, written)


def test_a_log_rolls_past_its_size_limit_and_every_directory_gets_its_own_logs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        os.makedirs(d)
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    logs = EntryLogs(dirs, size_limit=4096, preallocate=False)
    written: dict = {}
    next_entry: dict = {}
    try:
        batches = _batches([1, 2] * 20, [[500, 500]] * 40, next_entry)
        _store(logs, Index(env), batches, written)
    finally:
        logs.close()
        env.close()
    a, b = (list_logs(d) for d in dirs)
    assert len(a) >= 5 and len(b) >= 5 and not set(a) & set(b)
    for d in dirs:
        for log_id in list_logs(d):
            assert os.path.getsize(os.path.join(d, f"{log_id:08x}.log")) <= 4096
    _read_back(dirs, str(tmp_path), written)


def test_locations_of_few_and_many_entries_read_back_alike(tmp_path):
    """``put_locations`` packs a batch of a few entries with struct and a larger one with
    numpy: both store the same keys and locations."""
    from bookie.storage.index import SMALL_BATCH
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    try:
        index = Index(env)
        sizes = {7: 3, 8: SMALL_BATCH + 5}
        with env.begin(write=True) as txn:
            for ledger_id, n in sizes.items():
                ids = np.arange(100, 100 + n, dtype=np.int64)
                index.put_locations(txn, ledger_id, ids, 42, ids * 1000 + 2**40, ids % 7 + 32)
        with env.begin() as txn:
            for ledger_id, n in sizes.items():
                for e in range(100, 100 + n):
                    assert index.locate(txn, ledger_id, e) == (42, e * 1000 + 2**40, e % 7 + 32)
                assert index.locate(txn, ledger_id, 100 + n) is None
    finally:
        env.close()
