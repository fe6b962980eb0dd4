"""Read-ahead for catch-up readers: the next bytes of an entry log, read in the same ``pread``
as a run that missed, kept in a bounded LRU of byte spans (BookKeeper's
``dbStorage_readAheadCacheMaxSizeMb`` and ``dbStorage_readAheadCacheBatchSize``).

Theory of operation
-------------------
The read worker asks for entries by their *locations* (log id, offset, length), each taken from
the index in the request's own snapshot; ``ReadAhead.read_run`` answers exactly what
``EntryLogReader.read_run`` would for the same locations.  When a run of neighbouring locations
is not all in the cache, it is read with one ``pread`` that goes on past the run's end by
``batch_entries`` entries' worth of bytes (at the run's mean entry size); the whole read is
kept as a *span* (log id, start, end, bytes).  A later run that lies inside a span is sliced
from memory: no system call, no copy.

Why a span's bytes are the bytes a ``pread`` would return now, for any location served from it:

1. Only bytes known *final* are read ahead.  An entry log has one writer at a time, which
   appends records in order (the add worker's ``EntryLogWriter``; compaction's new log, written
   whole and synced before any location in it is committed), and a byte before the end of a
   record is never written again once the record's ``append`` returned.  A location committed to
   the index was appended before its commit, so every byte of its log before the location's end
   is final once the location is in the index.  ``written`` holds, per log, the furthest such
   end this reader has seen in an index snapshot (the runs it was asked for, and the end the
   caller's ``more_written`` names: the read worker's is the entry the read-ahead would reach);
   read-ahead never passes it.  Bytes the add worker is still appending past it, or a
   preallocated log's zeros, are never cached.
2. A location's bytes never change while its log exists, and log ids are never reused
   (``Index.allocate_log_id``).  A ledger deleted, or entries moved by compaction, change the
   index, not the bytes: the cache is asked only for locations the index returned in the
   request's snapshot, so a deleted ledger's entries, or entries past the range a reader asked
   for, are never served from it, whatever it holds.
3. A deleted log's spans are dropped when the reader finds the log gone (``prune``): memory, not
   correctness (by 2 nothing points into a deleted log any more).

What it costs: one lookup per run (a bisect in the log's spans) and, on a miss, one ``pread`` of
the run plus the read-ahead; the memory is ``max_bytes`` at most (the spans' sizes, each span
its own buffer).  A reader far behind a ledger written alone reads it in spans of
``batch_entries`` entries; a tailer at the end of the log meets no written bytes past its run
and reads as without a cache.
"""

from __future__ import annotations

import bisect
import collections

from bookie.storage.entrylog import EntryLogReader

MERGE_GAP_BYTES = 4096  # neighbouring locations closer than this are read in one pread
MAX_RUN_BYTES = 8 * 1024 * 1024  # one pread of a run reads at most this much
MAX_AHEAD_BYTES = 1 * 1024 * 1024  # what one miss reads ahead, at most
MAX_LOGS_KNOWN = 256  # logs whose final end is remembered without a span of them


class Span:
    """Bytes ``start..end`` of entry log ``log_id``, all final when read (rule 1)."""

    __slots__ = ("log_id", "start", "end", "data")

    def __init__(self, log_id: int, start: int, data):
        self.log_id = log_id
        self.start = start
        self.end = start + len(data)
        self.data = data


class ReadAhead:
    """``EntryLogReader.read_run`` with read-ahead into a bounded cache of spans.

    Args:
        reader: the worker's ``EntryLogReader`` (its fds are shared, its ``prune`` used).
        max_bytes: the spans' bytes at most; 0 reads as ``reader.read_run`` does, caching
            nothing.
        batch_entries: entries' worth of bytes read ahead past a run that missed.
    """

    def __init__(self, reader: EntryLogReader, max_bytes: int, batch_entries: int):
        self.reader = reader
        self.max_bytes = max_bytes
        self.ahead_bytes_cap = min(MAX_AHEAD_BYTES, max_bytes // 4)
        self.batch_entries = batch_entries
        self.written: dict[int, int] = {}  # log id -> end of final bytes seen (rule 1)
        self._missing: dict[int, int] = {}  # ledger id -> an entry found not written (probe_due)
        self._starts: dict[int, list[int]] = {}  # log id -> its spans' starts, ascending
        self._spans: dict[int, dict[int, Span]] = {}  # log id -> start -> span
        self._lru: collections.OrderedDict[tuple[int, int], Span] = collections.OrderedDict()
        self.cache_bytes = 0
        self.hits = 0  # entries served from a span
        self.misses = 0  # entries read from the log

    # -- reading ---------------------------------------------------------------------------------
    def read_run(self, locs, more_written=None) -> list:
        """The bytes of each location, in order (``EntryLogReader.read_run``'s answer).

        Args:
            locs: (log_id, offset, length) of committed entries, from the index.
            more_written: ``f(log_id) -> int | None``, the end of a location committed in that
                log (None: none known); asked only when a miss would read ahead past what is
                known final.  Every byte before the end it names must be final (rule 1).
        Raises:
            OSError: as ``EntryLogReader.read`` (a log missing or shorter than a location).
        """
        out: list = []
        i, n = 0, len(locs)
        while i < n:
            log_id, off, ln = locs[i]
            span = self._find(log_id, off)
            if span is not None and off + ln <= span.end:
                self._lru.move_to_end((log_id, span.start))
                data, base, limit = span.data, span.start, span.end
                k = i
                while k < n:
                    lid, o, l2 = locs[k]
                    if lid != log_id or o < base or o + l2 > limit:
                        break
                    out.append(data[o - base:o - base + l2])
                    k += 1
                self.hits += k - i
                i = k
                continue
            j, end = i + 1, off + ln
            while j < n and locs[j][0] == log_id and locs[j][1] >= end \
                    and locs[j][1] - end < MERGE_GAP_BYTES \
                    and locs[j][1] + locs[j][2] - off <= MAX_RUN_BYTES:
                end = locs[j][1] + locs[j][2]
                j += 1
            stop = self._ahead_end(log_id, off, end, j - i, more_written)
            data = memoryview(self.reader.read(log_id, off, stop - off))
            for k in range(i, j):
                _, o, l2 = locs[k]
                out.append(data[o - off:o - off + l2])
            self.misses += j - i
            if stop > end:  # the whole read is kept: a second reader of the run hits too
                self._put(Span(log_id, off, data))
            i = j
        return out

    def _ahead_end(self, log_id: int, off: int, end: int, count: int, more_written) -> int:
        """Where the pread of run ``off..end`` (``count`` entries) stops: past ``end`` by the
        read-ahead, never past the log's known-final bytes (rule 1)."""
        known = self.written.get(log_id, 0)
        if end > known:
            known = self.written[log_id] = end  # the run's own locations are committed
        if not self.max_bytes:
            return end
        want = end + min(self.ahead_bytes_cap, self.batch_entries * -(-(end - off) // count))
        if known < want and more_written is not None:
            named = more_written(log_id)
            if named is not None and named > known:
                known = self.written[log_id] = named
        return max(end, min(want, known, off + MAX_RUN_BYTES))

    # -- when the caller's index look-up is worth it ----------------------------------------------
    def probe_due(self, ledger_id: int, last: int) -> bool:
        """Whether a reader whose read ends at entry ``last`` should look up the entry the
        read-ahead would reach: not while ``last`` is short of an entry found missing before
        (the ledger ended before it then: the reader is at its tail, and a tailer's every read
        misses).  Knowing this less only costs look-ups."""
        return last >= self._missing.get(ledger_id, -1)

    def probe_failed(self, ledger_id: int, entry_id: int) -> None:
        """The caller found entry ``entry_id`` of the ledger not (yet) in its index."""
        if len(self._missing) >= MAX_LOGS_KNOWN and ledger_id not in self._missing:
            self._missing.clear()
        self._missing[ledger_id] = entry_id

    # -- the cache -------------------------------------------------------------------------------
    def _find(self, log_id: int, off: int) -> Span | None:
        starts = self._starts.get(log_id)
        if not starts:
            return None
        i = bisect.bisect_right(starts, off) - 1
        if i < 0:
            return None
        span = self._spans[log_id][starts[i]]
        return span if off < span.end else None

    def _put(self, span: Span) -> None:
        size = span.end - span.start
        if size > self.max_bytes:
            return
        self._drop_overlapping(span)
        # taken after the drops: dropping a log's last span removes its list (``_drop``)
        starts = self._starts.setdefault(span.log_id, [])
        bisect.insort(starts, span.start)
        self._spans.setdefault(span.log_id, {})[span.start] = span
        self._lru[(span.log_id, span.start)] = span
        self.cache_bytes += size
        while self.cache_bytes > self.max_bytes:
            self._drop(next(iter(self._lru.values())))

    def _drop_overlapping(self, span: Span) -> None:
        """Spans of one log never overlap: drop those ``span`` meets."""
        starts = self._starts.get(span.log_id)
        i = max(bisect.bisect_right(starts, span.start) - 1, 0) if starts else 0
        while starts and i < len(starts) and starts[i] < span.end:
            old = self._spans[span.log_id][starts[i]]
            if old.end <= span.start:
                i += 1
                continue
            self._drop(old)
            if span.log_id not in self._starts:
                return  # that was the log's last span

    def _drop(self, span: Span) -> None:
        del self._lru[(span.log_id, span.start)]
        spans = self._spans[span.log_id]
        del spans[span.start]
        starts = self._starts[span.log_id]
        del starts[bisect.bisect_left(starts, span.start)]
        if not spans:
            del self._spans[span.log_id], self._starts[span.log_id]
        self.cache_bytes -= span.end - span.start

    def forget(self, log_id: int) -> None:
        """Drop what is known of a log (its spans, its final end): it was deleted."""
        for start in list(self._spans.get(log_id, ())):
            self._drop(self._spans[log_id][start])
        self.written.pop(log_id, None)

    def prune(self) -> None:
        """``EntryLogReader.prune``, and the spans of the logs found deleted (rule 3).  What
        is known final of logs without spans is forgotten past ``MAX_LOGS_KNOWN`` of them
        (learnt again when read; knowing less only reads ahead less)."""
        for log_id in self.reader.prune():
            self.forget(log_id)
        for log_id in [lid for lid in self._spans if self.reader.gone(lid)]:
            self.forget(log_id)
        if len(self.written) > MAX_LOGS_KNOWN:
            for log_id in [lid for lid in self.written if lid not in self._spans]:
                del self.written[log_id]
