"""Journal files: group commit writes, scans, and what a crash (or junk) leaves behind."""

import os

import pytest

from bookie.storage import journal, records
from bookie.core.group_commit import GroupCommitPolicy
from bookie.storage.journal import (CorruptJournalError, JournalWriter,
                                    delete_old_journals, journal_end, journal_name, list_journals,
                                    read_lastmark, scan, write_lastmark)


def _groups(n, size=100):
    return [records.fence_record(i, b"k" * (size - 24)) for i in range(n)]


def _write(d, groups, max_size=1 << 20, start=0):
    w = JournalWriter(str(d), start, max_size, 4096)
    for g in groups:
        w.append([g])
    w.close()
    return w


def _bodies(d, mark=0):
    return [bytes(g.body) for g in scan(str(d), mark)]


def test_groups_read_back_in_order_across_rolled_files(tmp_path):
    gs = _groups(30)
    w = _write(tmp_path, gs, max_size=1024)
    assert len(list_journals(str(tmp_path))) > 3
    assert _bodies(tmp_path) == gs
    assert journal_end(str(tmp_path)) == w.position == sum(map(len, gs))


def test_scan_from_a_mark_skips_what_is_before_it(tmp_path):
    gs = _groups(10)
    _write(tmp_path, gs)
    assert _bodies(tmp_path, mark=len(gs[0]) * 4) == gs[4:]


def _last_file(d):
    return os.path.join(d, journal_name(list_journals(str(d))[-1]))


def _group_offsets(path):
    return [g.file_offset for g in journal.scan_file(path)]


@pytest.mark.parametrize("damage", ["truncate_mid_group", "zero_tail", "truncate_mid_header"])
def test_a_torn_tail_ends_the_journal_at_the_last_whole_group(tmp_path, damage):
    gs = _groups(8)
    _write(tmp_path, gs)
    path = _last_file(tmp_path)
    last = _group_offsets(path)[-1]
    with open(path, "r+b") as f:
        if damage == "truncate_mid_group":
            f.truncate(last + 40)
        elif damage == "truncate_mid_header":
            f.truncate(last + 10)
        else:
            f.seek(last + 30)
            f.write(b"\0" * 200)
    assert _bodies(tmp_path) == gs[:-1]
    assert journal_end(str(tmp_path)) == sum(map(len, gs[:-1]))


def test_junk_in_the_middle_refuses_with_the_file_named(tmp_path):
    gs = _groups(8)
    _write(tmp_path, gs)
    path = _last_file(tmp_path)
    third = _group_offsets(path)[2]
    with open(path, "r+b") as f:
        f.seek(third + 30)
        f.write(b"\xff" * 8)
    with pytest.raises(CorruptJournalError, match=os.path.basename(path)):
        list(scan(str(tmp_path)))


def test_a_gap_between_files_is_corruption(tmp_path):
    _write(tmp_path, _groups(3), max_size=250)
    ids = list_journals(str(tmp_path))
    assert len(ids) >= 3
    os.unlink(os.path.join(tmp_path, journal_name(ids[1])))
    with pytest.raises(CorruptJournalError, match="not contiguous"):
        list(scan(str(tmp_path)))


def test_writer_restarted_after_a_torn_tail_continues_contiguously(tmp_path):
    gs = _groups(4)
    _write(tmp_path, gs)
    path = _last_file(tmp_path)
    with open(path, "r+b") as f:
        f.truncate(_group_offsets(path)[-1] + 40)
    end = journal_end(str(tmp_path))
    more = _groups(2)
    _write(tmp_path, more, start=end)
    assert _bodies(tmp_path) == gs[:-1] + more


def test_lastmark_round_trip_and_damage_means_replay_everything(tmp_path):
    assert read_lastmark(str(tmp_path)) == 0
    write_lastmark(str(tmp_path), 12345)
    assert read_lastmark(str(tmp_path)) == 12345
    with open(tmp_path / "lastMark", "r+b") as f:
        f.write(b"\x01")
    assert read_lastmark(str(tmp_path)) == 0


def test_old_journals_go_once_wholly_before_the_mark_keeping_backups(tmp_path):
    w = _write(tmp_path, _groups(20), max_size=300)
    ids = list_journals(str(tmp_path))
    deleted = delete_old_journals(str(tmp_path), w.position, keep_backups=2, current_id=ids[-1])
    left = list_journals(str(tmp_path))
    assert deleted and len(left) == 3 and left[-1] == ids[-1]
    assert delete_old_journals(str(tmp_path), 0, 0, ids[-1]) == []


def test_group_commit_policy():
    p = GroupCommitPolicy(0.002, 1000, flush_when_queue_empty=True, adaptive=True)
    assert not p.should_flush(0, 1.0, False)
    assert p.should_flush(10, 0.0, more_waiting=False)
    assert not p.should_flush(10, 0.0, more_waiting=True)
    assert p.should_flush(10, 0.003, more_waiting=True)
    assert p.should_flush(1000, 0.0, more_waiting=True)
    q = GroupCommitPolicy(0.002, 1000, flush_when_queue_empty=False, adaptive=True)
    assert not q.should_flush(10, 0.0, more_waiting=False)
    assert q.wait_s(0.0005) == pytest.approx(0.0015)
    r = GroupCommitPolicy(0.002, 1000, flush_when_queue_empty=False, adaptive=False)
    assert r.should_flush(1, 0.0, more_waiting=True)


def test_records_round_trip():
    parts, size, off = records.add_batch_parts(7, b"key", b"\x28\0\0\0", b"e" * 40, recovery=True)
    buf = b"".join(parts)
    assert len(buf) == size
    rec = records.parse(buf, 0)
    assert (rec.type, rec.ledger_id, rec.master_key, rec.flags) == (records.ADD_BATCH, 7, b"key", records.FLAG_RECOVERY | records.FLAG_STORED_KEY)
    assert buf[off:] == b"e" * 40
    lac = records.parse(records.lac_record(3, 99, b"k"), 0)
    assert (lac.type, lac.ledger_id, lac.lac) == (records.LAC, 3, 99)
    with pytest.raises(records.RecordError):
        records.parse(buf[:-1], 0)


def test_a_scan_skips_files_deleted_under_it_before_the_mark(tmp_path, monkeypatch):
    gs = _groups(20)
    w = _write(tmp_path, gs, max_size=300)
    ids = list_journals(str(tmp_path))
    real = journal.list_journals

    def listing_then_delete(d):
        out = real(d)
        os.unlink(os.path.join(d, journal_name(ids[0])))  # the journal worker's cleanup
        return out

    monkeypatch.setattr(journal, "list_journals", listing_then_delete)
    mark = w.position - len(gs[-1]) * 2
    assert _bodies(tmp_path, mark) == gs[-2:]
