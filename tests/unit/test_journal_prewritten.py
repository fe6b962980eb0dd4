"""Journal files are preallocated in journalPreAllocSizeMB steps by writing zeros after small
groups and at a writer's first step (a group's fdatasync over pre-written blocks commits no
extent change), and with posix_fallocate after large groups.  The scan still reads the zeros
after the last group as the end of written data."""

import os

import pytest

from bookie.storage import journal, records
from bookie.storage.journal import JournalWriter, journal_name, list_journals, scan

PREALLOC = 8192


def _groups(n, size):
    return [records.fence_record(i, b"k" * (size - 24)) for i in range(n)]


def _only_file(d):
    (jid,) = list_journals(str(d))
    return os.path.join(str(d), journal_name(jid))


@pytest.fixture
def fallocated(monkeypatch):
    """The offsets posix_fallocate was asked to allocate from."""
    calls = []
    real = os.posix_fallocate
    monkeypatch.setattr(os, "posix_fallocate", lambda fd, off, n: (calls.append(off),
                                                                   real(fd, off, n)))
    return calls


def test_after_small_groups_files_grow_in_steps_of_written_zeros(tmp_path, fallocated):
    gs = _groups(5, 3000)  # 15,000 bytes of groups: a group crosses each 8 KiB step
    w = JournalWriter(str(tmp_path), 0, 1 << 20, PREALLOC)
    for g in gs:
        w.append([g])
    w.close()
    assert fallocated == []
    path = _only_file(tmp_path)
    size = os.path.getsize(path)
    assert size == 2 * PREALLOC  # header + 15,160 bytes of groups: two steps, no more
    with open(path, "rb") as f:
        data = f.read()
    assert data.startswith(b"BKJRNL03")  # the header was not zeroed over
    end = journal.FILE_HEADER_SIZE + sum(journal.GROUP_HEADER_SIZE + len(g) for g in gs)
    assert not data[end:].strip(b"\0")  # past the data: zeros only
    assert os.stat(path).st_blocks * 512 >= size  # space written, not a sparse file
    assert [bytes(g.body) for g in scan(str(tmp_path))] == gs  # zeros read as end of data


def test_a_rolled_file_after_small_groups_is_prewritten(tmp_path, fallocated):
    w = JournalWriter(str(tmp_path), 0, 4 * PREALLOC, PREALLOC)
    gs = _groups(60, 1000)  # 60 KB through files of 32 KiB: two rolls
    for g in gs:
        w.append([g])
    w.close()
    assert fallocated == [] and len(list_journals(str(tmp_path))) >= 2
    assert [bytes(g.body) for g in scan(str(tmp_path))] == gs


def test_a_full_disk_while_preallocating_leaves_the_group_to_its_own_write(tmp_path, monkeypatch):
    def full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(journal, "prewrite_zeros", full)
    monkeypatch.setattr(os, "posix_fallocate", full)
    gs = _groups(100, 200)  # 20 KB: steps of both kinds refused
    w = JournalWriter(str(tmp_path), 0, 1 << 20, PREALLOC)
    for g in gs:
        w.append([g])
    w.close()
    assert [bytes(g.body) for g in scan(str(tmp_path))] == gs


def test_prewrite_zeros_writes_exactly_the_range(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    fd = os.open(path, os.O_WRONLY)
    try:
        journal.prewrite_zeros(fd, 4, 3 * (1 << 20) + 5)
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[:4] == b"xxxx" and len(data) == 3 * (1 << 20) + 5 and not data[4:].strip(b"\0")


def test_large_groups_get_fallocated_steps_small_ones_written_zeros(tmp_path, fallocated):
    """Zeros cost a write per byte, fallocated space a metadata commit per group: a step
    after large groups is fallocated, one after small groups written."""
    calls = fallocated
    step = 256 * 1024
    w = JournalWriter(str(tmp_path), 0, 1 << 30, step)
    big = [records.fence_record(i, b"k" * 32_000) for i in range(2)]  # one 64 KB group
    for _ in range(10):  # 640 KB: the steps after the first follow steps of large groups
        w.append(big)
    assert calls and calls[0] == step  # the first step was zeros (nothing measured yet)
    small = _groups(1, 200)[0]
    before = len(calls)
    while w._alloc_end < 6 * step:  # many small groups fill the step
        w.append([small])
    assert len(calls) <= before + 1  # the step after the small groups: zeros, not fallocate
    w.close()
    assert len(list(scan(str(tmp_path)))) > 6
