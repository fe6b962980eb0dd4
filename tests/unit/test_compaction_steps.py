"""Compaction: the pure plan and throttle, and the transactional steps on a real LMDB index and
real entry logs, with a process SIGKILLed at every step (bookie.storage.compaction)."""

import os
import signal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.testing.rawclient import make_entry
from bookie.storage import compaction, records
from bookie.storage.entrylog import EntryLogReader, EntryLogs, list_logs
from bookie.storage.index import Index, open_index

KEY = b"unit-key"
MAP_SIZE_BYTES = 64 << 20
STEPS = ("intent", "created", "copying", "synced", "repointing", "repointed", "deleted")


# -- choose ----------------------------------------------------------------------------------------
def test_choose_takes_logs_under_the_threshold_lowest_live_share_first():
    maps = {1: {10: 80, 11: 20}, 2: {10: 50, 12: 50}, 3: {12: 100}, 4: {10: 100}, 5: {11: 10}}
    held = {11, 12}  # ledger 10 was deleted
    got = compaction.choose(maps, held, current_logs={5}, threshold=0.8)
    assert [c.log_id for c in got] == [4, 1, 2]  # shares 0.0, 0.2, 0.5; 3 is all live; 5 current
    assert got[1].live_share == pytest.approx(0.2)
    assert compaction.choose(maps, held, {5}, threshold=0.3) == got[:2]
    assert compaction.choose(maps, held, {5}, threshold=0.0) == []
    assert [c.log_id for c in compaction.choose(maps, held, {5}, 0.8, skipped={1})] == [4, 2]


@given(maps=st.dictionaries(st.integers(1, 40), st.dictionaries(st.integers(1, 8), st.integers(1, 1000), min_size=1), max_size=20),
       held=st.sets(st.integers(1, 8)), current=st.sets(st.integers(1, 40), max_size=3),
       threshold=st.floats(0.01, 1.0), skipped=st.sets(st.integers(1, 40), max_size=3))
@settings(max_examples=200, deadline=None)
def test_choose_never_takes_a_current_newer_skipped_or_mostly_live_log(maps, held, current, threshold, skipped):
    got = compaction.choose(maps, held, current, threshold, skipped)
    newest = max(current, default=0)
    shares = [c.live_share for c in got]
    assert shares == sorted(shares)
    for c in got:
        assert c.log_id not in current and c.log_id <= newest and c.log_id not in skipped
        assert c.live_share < threshold
        assert c.live_bytes == sum(n for lid, n in maps[c.log_id].items() if lid in held)
    taken = {c.log_id for c in got}
    for log_id, m in maps.items():  # and every log that qualifies is taken
        live = sum(n for lid, n in m.items() if lid in held) / sum(m.values())
        if log_id not in current and log_id <= newest and log_id not in skipped and live < threshold:
            assert log_id in taken


def test_throttle_paces_units_to_its_rate():
    now = [0.0]
    t = compaction.Throttle(100, clock=lambda: now[0])
    assert t.wait_s(100) == 0.0  # a second's burst
    assert t.wait_s(50) == pytest.approx(0.5)
    now[0] += 0.5
    assert t.wait_s(50) == pytest.approx(0.5)
    assert compaction.Throttle(0).wait_s(10**9) == 0.0  # no limit


# -- the steps, on real files ----------------------------------------------------------------------
def _payload(lid, eid):
    return (f"{lid}/{eid}|".encode() * 60)[:600]


def _setup(tmp_path):
    d = str(tmp_path / "ledgers")
    os.makedirs(d, exist_ok=True)
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    index = Index(env)
    return d, env, index


def _write(index, d, ledgers, batches=12, per_batch=5):
    """Interleaved batches of proper entries, stored as the add worker stores them."""
    logs = EntryLogs([d], size_limit=8192, preallocate=False)  # ids from the files: rolls run inside this txn
    with index.env.begin(write=True) as txn:
        for lid in ledgers:
            index.put_ledger(txn, lid, {"key": KEY.hex(), "fenced": False, "lac": -1})
        for b in range(batches):
            for lid in ledgers:
                entries = [make_entry(lid, b * per_batch + i, _payload(lid, b * per_batch + i))
                           for i in range(per_batch)]
                lengths = np.array([len(e) for e in entries], dtype=np.int64)
                parts, size, data_offset = records.add_batch_parts(
                    lid, KEY, lengths.astype("<u4").tobytes(), b"".join(entries), False)
                w = logs.writer_for(lid)
                if w.needs_roll(size):
                    w.roll()
                start = w.append(parts)
                offs = start + data_offset + np.cumsum(lengths) - lengths
                index.put_locations(txn, lid, np.arange(b * per_batch, (b + 1) * per_batch), w.log_id,
                                    offs, lengths)
                index.add_to_log_map(txn, w.log_id, {lid: int(lengths.sum())})
        index.set_current_logs(txn, logs.current_ids())
    logs.close()
    return batches * per_batch


def _drop(index, lid):
    with index.env.begin(write=True) as txn:
        index.delete_ledger(txn, lid)


def _check(index, d, lid, n):
    reader = EntryLogReader([d])
    try:
        with index.env.begin() as txn:
            for eid in range(n):
                loc = index.locate(txn, lid, eid)
                assert loc is not None, (lid, eid)
                assert reader.read(*loc) == make_entry(lid, eid, _payload(lid, eid)), (lid, eid)
    finally:
        reader.close()


def _named_logs(index):
    with index.env.begin() as txn:
        named = set(index.log_maps(txn)) | index.current_logs(txn)
        named |= {loc[0] for _, _, loc in index.iter_locations(txn)}
    return named


def _compact_all(index, d, crash=lambda step: None):
    held, maps, current = compaction.held_ledgers(index)
    done = []
    for c in compaction.choose(maps, held, current, 0.8, compaction.skipped_logs(index)):
        done.append(compaction.compact_log(index, [d], c.log_id, compaction.Throttle(0), crash=crash))
    return done


def test_compaction_keeps_every_live_entry_and_frees_the_deleted_ledgers_space(tmp_path):
    d, env, index = _setup(tmp_path)
    try:
        n = _write(index, d, [1, 2])
        before = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        _drop(index, 1)
        done = _compact_all(index, d)
        assert len(done) >= 3
        after = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        assert after < before * 0.65
        _check(index, d, 2, n)
        assert set(list_logs(d)) == _named_logs(index)  # no file without a name, no name without a file
        assert compaction.get_state(index) is None
    finally:
        env.close()


@pytest.mark.parametrize("step", STEPS)
def test_a_sigkill_at_any_step_loses_nothing_and_leaks_nothing(tmp_path, step):
    d, env, index = _setup(tmp_path)
    n = _write(index, d, [1, 2])
    _drop(index, 1)
    env.close()
    pid = os.fork()
    if pid == 0:  # the child compacts and is killed at ``step``
        try:
            e2 = open_index(str(tmp_path), MAP_SIZE_BYTES)
            compaction.REPOINT_BATCH_ENTRIES = 7  # "repointing": killed with a log half repointed

            def crash(s):
                if s == step:
                    os.kill(os.getpid(), signal.SIGKILL)
            _compact_all(Index(e2), d, crash)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    env = open_index(str(tmp_path), MAP_SIZE_BYTES)
    index = Index(env)
    try:
        state = compaction.get_state(index)
        want = {"repointing": "repointing", "repointed": "repointed", "deleted": "repointed"}.get(step, "copying")
        assert state is not None and state["state"] == want
        if step == "repointing":  # some entries point into the new log, the rest into the old
            with index.env.begin() as txn:
                logs_named = {index.locate(txn, 2, e)[0] for e in range(n)}
            assert state["new"] in logs_named and state["old"] in logs_named
        _check(index, d, 2, n)  # readable even before recovery
        assert compaction.recover(index, [d])
        assert compaction.get_state(index) is None
        _check(index, d, 2, n)
        assert set(list_logs(d)) == _named_logs(index)
        _compact_all(index, d)  # the next pass finishes the job
        _check(index, d, 2, n)
        assert set(list_logs(d)) == _named_logs(index)
    finally:
        env.close()


def test_a_corrupt_entry_is_reported_the_log_undone_and_skipped_and_the_pass_goes_on(tmp_path):
    d, env, index = _setup(tmp_path)
    try:
        n = _write(index, d, [1, 2])
        _drop(index, 1)
        held, maps, current = compaction.held_ledgers(index)
        todo = compaction.choose(maps, held, current, 0.8)
        victim = todo[0].log_id
        with index.env.begin() as txn:
            loc = next(index.locate(txn, 2, e) for e in range(n) if index.locate(txn, 2, e)[0] == victim)
        with open(os.path.join(d, f"{victim:08x}.log"), "r+b") as f:
            f.seek(loc[1])
            f.write(b"\xff" * 16)  # the entry header now names another ledger
        with pytest.raises(compaction.CorruptEntry) as e:
            compaction.compact_log(index, [d], victim, compaction.Throttle(0))
        assert e.value.ledger_id == 2 and e.value.offset == loc[1]
        assert compaction.get_state(index) is None  # undone: no new log left behind
        assert set(list_logs(d)) == _named_logs(index)
        compaction.skip(index, victim)
        done = _compact_all(index, d)
        assert victim not in {o.log_id for o in done} and len(done) == len(todo) - 1
        assert victim in list_logs(d)
    finally:
        env.close()


def test_an_entry_moved_meanwhile_keeps_its_new_place(tmp_path):
    d, env, index = _setup(tmp_path)
    try:
        n = _write(index, d, [1, 2])
        _drop(index, 1)
        held, maps, current = compaction.held_ledgers(index)
        victim = compaction.choose(maps, held, current, 0.8)[0].log_id
        with index.env.begin() as txn:
            moved = next(e for e in range(n) if index.locate(txn, 2, e)[0] == victim)

        def recovery_add(step):  # a recovery add rewrites the entry while the copy runs
            if step == "synced":
                with index.env.begin(write=True) as txn:
                    index.put_locations(txn, 2, np.array([moved]), 999, np.array([7]), np.array([9]))
        compaction.compact_log(index, [d], victim, compaction.Throttle(0), crash=recovery_add)
        with index.env.begin() as txn:
            assert index.locate(txn, 2, moved) == (999, 7, 9)
    finally:
        env.close()


# -- disk states and the keys ----------------------------------------------------------------------
def test_a_disk_is_full_from_the_threshold_until_it_falls_below_the_low_water_mark():
    from bookie.core.diskcheck import FULL, OK, WARN, classify

    def step(used, prev):
        return classify(used, prev, threshold=0.95, warn=0.90, lwm=0.85)
    assert step(0.80, OK) == OK and step(0.91, OK) == WARN and step(0.95, WARN) == FULL
    assert step(0.92, FULL) == FULL and step(0.86, FULL) == FULL  # no flapping at 0.95
    assert step(0.84, FULL) == OK and step(0.88, FULL) == FULL
    assert step(0.88, OK) == OK  # coming up from below, lwm plays no part


@pytest.mark.parametrize("keys, complaint", [
    ({"diskUsageWarnThreshold": "0.97"}, "diskUsageWarnThreshold"),
    ({"diskUsageLwmThreshold": "0.99"}, "diskUsageLwmThreshold"),
    ({"minorCompactionThreshold": "0.9", "majorCompactionThreshold": "0.5"}, "minorCompactionThreshold"),
    ({"minorCompactionInterval": "90000"}, "minorCompactionInterval"),
    ({"majorCompactionThreshold": "1.5"}, "majorCompactionThreshold"),
])
def test_compaction_and_disk_keys_that_disagree_are_refused_naming_the_key(keys, complaint):
    from bookie.workers.config import BookieConfig, ConfigError
    with pytest.raises(ConfigError, match=complaint):
        BookieConfig.from_mapping(keys, check_dirs=False)


def test_compaction_keys_have_bookkeepers_defaults_and_units():
    from bookie.workers.config import BookieConfig
    c = BookieConfig.from_mapping({"majorCompactionMaxTimeMillis": "2500"}, check_dirs=False)
    assert (c.minor_compaction_threshold, c.major_compaction_threshold) == (0.2, 0.8)
    assert (c.minor_compaction_interval_s, c.major_compaction_interval_s) == (3600, 86400)
    assert c.major_compaction_max_time_s == 2.5 and c.minor_compaction_max_time_s < 0
    assert (c.compaction_rate_entries_per_s, c.compaction_rate_bytes_per_s, c.is_throttle_by_bytes) == (1000, 1_000_000, False)
    assert (c.disk_usage_threshold, c.disk_usage_warn_threshold, c.disk_usage_lwm_threshold) == (0.95, 0.90, 0.90)


def test_the_old_log_stays_while_a_reader_holds_an_older_snapshot(tmp_path, monkeypatch):
    d, env, index = _setup(tmp_path)
    try:
        n = _write(index, d, [1, 2])
        _drop(index, 1)
        held, maps, current = compaction.held_ledgers(index)
        victim = compaction.choose(maps, held, current, 0.8)[0].log_id
        monkeypatch.setattr(compaction, "READERS_WAIT_S", 0.2)
        stale = env.begin()  # a read worker's snapshot from before the repoint
        try:
            with pytest.raises(compaction.ReadersPending):
                compaction.compact_log(index, [d], victim, compaction.Throttle(0))
            assert victim in list_logs(d)  # what the stale snapshot names is still there
            reader = EntryLogReader([d])
            eid = next(e for e in range(n) if index.locate(stale, 2, e)[0] == victim)
            assert reader.read(*index.locate(stale, 2, eid)) == make_entry(2, eid, _payload(2, eid))
            reader.close()
            assert compaction.recover(index, [d]) == ""  # still held: nothing deleted
        finally:
            stale.abort()
        assert compaction.recover(index, [d]).startswith("finished")
        assert victim not in list_logs(d)
        _check(index, d, 2, n)
        assert set(list_logs(d)) == _named_logs(index)
    finally:
        env.close()


def test_a_pass_out_of_time_undoes_the_log_it_was_copying(tmp_path):
    d, env, index = _setup(tmp_path)
    try:
        n = _write(index, d, [1, 2])
        _drop(index, 1)
        held, maps, current = compaction.held_ledgers(index)
        victim = compaction.choose(maps, held, current, 0.8)[0].log_id
        before = set(list_logs(d))
        with pytest.raises(compaction.Abandoned):
            compaction.compact_log(index, [d], victim, compaction.Throttle(0), deadline=0.0)
        assert set(list_logs(d)) == before and compaction.get_state(index) is None
        _check(index, d, 2, n)
    finally:
        env.close()


class _Ctx:
    def __init__(self, **conf):
        from bookie.workers.config import BookieConfig
        self.conf = BookieConfig.from_mapping(conf, check_dirs=False)
        self.stopping = False


def test_major_compaction_when_due_or_asked_and_it_counts_as_the_minor_one():
    from bookie.workers.gc_worker import Compactor
    c = Compactor(_Ctx(minorCompactionInterval="10", majorCompactionInterval="100"), None, [], now=0.0)
    assert c.due(5.0, None) is None
    assert c.due(10.0, None) == "minor" and c.due(11.0, None) is None
    assert c.due(12.0, {"major": True, "minor": False}) == "major"
    assert c.due(21.0, None) is None  # the major pass at 12 reset the minor clock
    assert c.due(22.0, None) == "minor"
    assert c.due(112.0, None) == "major"
    off = Compactor(_Ctx(minorCompactionInterval="0", majorCompactionInterval="0"), None, [], now=0.0)
    assert off.due(10**9, None) is None and off.due(1.0, {"major": False, "minor": True}) == "minor"
