"""storage/read_ahead.py: read-ahead answers exactly what a pread of the entry log would, now.

A real entry log file, written as the add worker writes it (records appended in order, a
preallocated tail of zeros) while it is read; the reader is asked only for committed locations
and told only committed ends, as the read worker does.
"""

from __future__ import annotations

import os

from hypothesis import given, settings, strategies as st

from bookie.storage.entrylog import LOG_HEADER_SIZE, EntryLogReader, create_log
from bookie.storage.read_ahead import ReadAhead


class Log:
    """One entry log being appended to: records of entries, committed in order."""

    def __init__(self, directory: str, log_id: int, preallocate: int):
        self.log_id = log_id
        self.fd = create_log(directory, log_id, preallocate)
        self.end = LOG_HEADER_SIZE
        self.locs: list[tuple[int, int, int]] = []  # committed entries, in log order
        self.fill = 0

    def append(self, lengths) -> None:
        for ln in lengths:
            self.fill = (self.fill + 1) % 251
            os.pwrite(self.fd, bytes([self.fill + 1]) * ln, self.end)
            self.locs.append((self.log_id, self.end, ln))
            self.end += ln

    def committed_end(self) -> int:
        return self.locs[-1][1] + self.locs[-1][2] if self.locs else LOG_HEADER_SIZE


def check_spans(ra: ReadAhead) -> None:
    """The cache's own bookkeeping agrees: per log, the sorted starts are its spans' starts,
    spans do not overlap, the LRU holds every span once, cache_bytes is their sum."""
    assert set(ra._starts) == set(ra._spans)
    total = 0
    for log_id, spans in ra._spans.items():
        assert ra._starts[log_id] == sorted(spans) and spans
        ordered = [spans[s] for s in ra._starts[log_id]]
        assert all(a.end <= b.start for a, b in zip(ordered, ordered[1:]))
        total += sum(s.end - s.start for s in ordered)
    assert sorted(ra._lru) == sorted((lid, s) for lid, spans in ra._spans.items() for s in spans)
    assert ra.cache_bytes == total <= ra.max_bytes


def pread_all(fd, locs):
    return [os.pread(fd, ln, off) for _, off, ln in locs]


steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(1, 3000), min_size=1, max_size=20),
              st.integers(0, 1)),
    st.tuples(st.just("read"), st.integers(0, 10_000), st.integers(1, 40), st.integers(1, 3),
              st.booleans(), st.integers(0, 1)),
    st.just(("prune",))), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps=steps, max_kb=st.sampled_from([0, 8, 64, 4096]), batch=st.integers(1, 64),
       preallocate=st.booleans())
def test_answers_what_a_pread_returns_now(tmp_path_factory, steps, max_kb, batch, preallocate):
    """Whatever was read ahead, while appends go on past it: every answer is the bytes the
    file holds at those locations now, and no entry the request did not ask for."""
    d = str(tmp_path_factory.mktemp("logs"))
    logs = [Log(d, i, 1 << 20 if preallocate else 0) for i in (1, 2)]  # two logs appended to
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, max_kb * 1024, batch)
    try:
        for step in steps:
            if step[0] == "append":
                logs[step[2]].append(step[1])
            elif step[0] == "prune":
                ra.prune()
            elif logs[step[5]].locs:
                _, first, count, stride, tell, which = step
                log = logs[which]
                first %= len(log.locs)
                locs = log.locs[first:first + count * stride:stride]
                end = log.committed_end()
                got = ra.read_run(locs, (lambda lid: end) if tell else None)
                assert [bytes(g) for g in got] == pread_all(log.fd, locs)
                check_spans(ra)
                assert all(ra.written.get(g.log_id, 0) <= g.committed_end() for g in logs)
    finally:
        reader.close()
        for log in logs:
            os.close(log.fd)


def test_a_sequential_reader_is_served_from_memory(tmp_path):
    d = str(tmp_path)
    log = Log(d, 1, 1 << 20)
    log.append([100] * 1000)
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, 1 << 20, 100)
    end = log.committed_end()
    for first in range(0, 1000, 10):
        locs = log.locs[first:first + 10]
        assert [bytes(g) for g in ra.read_run(locs, lambda lid: end)] == pread_all(log.fd, locs)
    # one miss of 10 entries reads 100 more ahead: 10 of every 110 entries miss
    assert ra.misses == 100 and ra.hits == 900
    reader.close()
    os.close(log.fd)


def test_nothing_is_read_ahead_past_the_committed_end(tmp_path):
    """A tailer at the end of the log: the zeros of the preallocated tail, and bytes appended
    after the read, are never cached: the next entries are read from the file."""
    d = str(tmp_path)
    log = Log(d, 1, 1 << 20)
    log.append([100] * 10)
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, 1 << 20, 100)
    ra.read_run(log.locs, lambda lid: log.committed_end())
    assert ra.cache_bytes == 0
    log.append([100] * 10)
    locs = log.locs[10:]
    assert [bytes(g) for g in ra.read_run(locs)] == pread_all(log.fd, locs)
    assert ra.hits == 0
    reader.close()
    os.close(log.fd)


def test_a_deleted_log_is_forgotten(tmp_path):
    d = str(tmp_path)
    log = Log(d, 7, 0)
    log.append([100] * 100)
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, 1 << 20, 100)
    ra.read_run(log.locs[:1], lambda lid: log.committed_end())
    assert ra.cache_bytes > 0
    os.close(log.fd)
    os.unlink(os.path.join(d, "00000007.log"))
    ra.prune()
    assert ra.cache_bytes == 0 and 7 not in ra.written
    reader.close()


def test_off_reads_as_the_reader(tmp_path):
    d = str(tmp_path)
    log = Log(d, 1, 0)
    log.append([10, 20, 30] * 10)
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, 0, 100)
    assert [bytes(g) for g in ra.read_run(log.locs, lambda lid: log.committed_end())] == \
        [bytes(g) for g in reader.read_run(log.locs)]
    assert ra.cache_bytes == 0 and ra.hits == 0
    reader.close()
    os.close(log.fd)


def test_a_deleted_log_whose_fd_was_closed_is_forgotten_too(tmp_path):
    d = str(tmp_path)
    logs = [Log(d, i, 0) for i in (1, 2)]
    for log in logs:
        log.append([100] * 100)
    reader = EntryLogReader([d], max_open=1)  # reading log 2 closes log 1's fd
    ra = ReadAhead(reader, 1 << 20, 100)
    for log in logs:
        ra.read_run(log.locs[:1], lambda lid, log=log: log.committed_end())
    assert set(ra._spans) == {1, 2}
    os.unlink(os.path.join(d, "00000001.log"))
    ra.prune()
    assert set(ra._spans) == {2} and set(ra.written) == {2}
    reader.close()
    for log in logs:
        os.close(log.fd)


def test_a_span_that_covers_every_span_of_its_log_keeps_the_log_findable(tmp_path):
    """Reading back from an earlier place: the new span overlaps the log's only span, which is
    dropped (the log's last), and the new one must still be found.  (The nemesis met this: the
    new span's start went into a list no longer the log's, and later drops deleted the wrong
    start: reads failed with IndexError, BAD_REQUEST.)"""
    d = str(tmp_path)
    log = Log(d, 1, 0)
    log.append([100] * 100)
    reader = EntryLogReader([d])
    ra = ReadAhead(reader, 1 << 20, 10)
    end = log.committed_end()
    for first in (5, 0, 1, 30, 2):
        locs = log.locs[first:first + 2]
        assert [bytes(g) for g in ra.read_run(locs, lambda lid: end)] == pread_all(log.fd, locs)
        check_spans(ra)
    hits = ra.hits
    ra.read_run(log.locs[3:4], lambda lid: end)
    assert ra.hits == hits + 1
    reader.close()
    os.close(log.fd)


def test_a_tailer_looks_up_the_read_ahead_entry_once_per_batch(tmp_path):
    ra = ReadAhead(EntryLogReader([str(tmp_path)]), 1 << 20, 100)
    assert ra.probe_due(7, 10)
    ra.probe_failed(7, 110)  # entry 110 not written when the read of ..10 missed
    assert not any(ra.probe_due(7, last) for last in range(11, 110))
    assert ra.probe_due(7, 110) and ra.probe_due(8, 0)
