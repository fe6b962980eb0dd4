"""The ``bookie`` format: the Spark data source (batch and stream readers) and its registration.

Every reader and writer here is pickled to Spark's Python workers: they carry parsed options
only, and take a client from ``bookie.spark.clients`` in the process they run in.
"""

from __future__ import annotations

import json

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    InputPartition)
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxBytes, ReadMaxRows,
                                              SupportsTriggerAvailableNow)

from bookie.spark import plan
from bookie.spark.clients import client_for
from bookie.spark.options import OptionError, ReadOptions, SinkOptions
from bookie.spark.read import read_span, schema_ddl
from bookie.spark.sink import BookieBatchWriter, BookieStreamWriter

DEFAULT_ENTRY_SIZE_BYTES = 1024  # for maxBytesPerTrigger, until closed ledgers tell better


class SpanPartition(InputPartition):
    """One partition: entries ``first``..``last`` of one ledger."""

    def __init__(self, span: plan.Span):
        super().__init__((span.log, span.ledger_id, span.first, span.last))
        self.span = span


class BookieDataSource(DataSource):
    """``spark.read.format("bookie")`` / ``readStream`` / ``write`` / ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "bookie"

    def schema(self) -> str:
        return schema_ddl(ReadOptions.parse(self.options, stream=False))

    def reader(self, schema) -> "BookieBatchReader":
        return BookieBatchReader(ReadOptions.parse(self.options, stream=False))

    def streamReader(self, schema) -> "BookieStreamReader":
        return BookieStreamReader(ReadOptions.parse(self.options, stream=True))

    def writer(self, schema, overwrite: bool):
        _check_sink_schema(schema, overwrite)
        return BookieBatchWriter(SinkOptions.parse(self.options))

    def streamWriter(self, schema, overwrite: bool):
        _check_sink_schema(schema, overwrite)
        return BookieStreamWriter(SinkOptions.parse(self.options))


def _check_sink_schema(schema, overwrite: bool) -> None:
    if overwrite:
        raise OptionError("mode overwrite: a log is append-only (use mode append)")
    names = [f.name for f in schema.fields]
    if "payload" not in names:
        raise OptionError(f"the sink appends the column payload (BINARY or STRING); the "
                          f"DataFrame has {names}")


class BookieBatchReader(DataSourceReader):
    """A batch read: planned once, open ledgers up to the LAC seen when planning."""

    def __init__(self, ro: ReadOptions):
        self.ro = ro

    def partitions(self):
        ro = self.ro
        bk = client_for(ro.conn)
        start = plan.start_positions(bk, ro, ro.starting)
        found = plan.available(bk, ro, start, ro.ending)
        spans = [s for key in sorted(found) for s in found[key][0]]
        parts = plan.split(spans, ro.max_entries_per_partition, ro.min_partitions)
        return [SpanPartition(s) for s in parts] or [SpanPartition(plan.Span(None, -1, 0, -1))]

    def read(self, partition: SpanPartition):
        if partition.span.ledger_id < 0:
            return iter(())  # Spark needs one partition even when there is nothing to read
        return read_span(self.ro, partition.span)


class BookieStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream: each trigger reads every open ledger's LAC once and the log lists afresh."""

    def __init__(self, ro: ReadOptions):
        self.ro = ro
        self._initial: dict | None = None
        self._target: dict | None = None  # Trigger.AvailableNow: go no further than this

    def initialOffset(self) -> dict:
        # Called more than once by Spark: resolve "latest" once, or the stream would skip.
        if self._initial is None:
            bk = client_for(self.ro.conn)
            self._initial = plan.start_positions(bk, self.ro, self.ro.starting)
        return self._initial

    def getDefaultReadLimit(self):
        if self.ro.max_offsets_per_trigger:
            return ReadMaxRows(self.ro.max_offsets_per_trigger)
        if self.ro.max_bytes_per_trigger:
            return ReadMaxBytes(self.ro.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit=None) -> dict:
        bk = client_for(self.ro.conn)
        start = _normal(start)
        found = plan.available(bk, self.ro, start, self._target)
        found = plan.admit(found, self._entry_budget(bk, found, limit))
        return _never_back(start, plan.offsets_of(found, start))

    def prepareForTriggerAvailableNow(self) -> None:
        bk = client_for(self.ro.conn)
        start = self.initialOffset()
        self._target = plan.offsets_of(plan.available(bk, self.ro, start), start)

    def _entry_budget(self, bk, found: dict, limit) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        if isinstance(limit, ReadMaxBytes):
            return max(1, limit.max_bytes // _entry_size(bk, found))
        return None

    def partitions(self, start: dict, end: dict):
        bk = client_for(self.ro.conn)
        spans = plan.spans_between(bk, self.ro, _normal(start), _normal(end))
        parts = plan.split(spans, self.ro.max_entries_per_partition, self.ro.min_partitions)
        return [SpanPartition(s) for s in parts]

    def read(self, partition: SpanPartition):
        return read_span(self.ro, partition.span)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: ledgers are read, never consumed

    def stop(self) -> None:
        pass


def _normal(offsets) -> dict:
    """Offsets as plain dicts with string keys (they may arrive as a JSON string)."""
    if isinstance(offsets, str):
        offsets = json.loads(offsets)
    return {"ledgers": {str(k): int(v) for k, v in (offsets or {}).get("ledgers", {}).items()},
            "logs": {str(k): [int(v[0]), int(v[1])]
                     for k, v in (offsets or {}).get("logs", {}).items()}}


def _never_back(start: dict, end: dict) -> dict:
    """``end`` with no position below ``start``'s (per ledger; per log, by ledger order)."""
    out = {"ledgers": dict(end["ledgers"]), "logs": dict(end["logs"])}
    for key, first in start["ledgers"].items():
        out["ledgers"][key] = max(first, out["ledgers"].get(key, first))
    for name, pos in start["logs"].items():
        other = out["logs"].get(name, pos)
        if other[0] != -1 and (pos[0] == -1 or tuple(other) >= tuple(pos)):
            continue
        out["logs"][name] = pos
    return out


def _entry_size(bk, found: dict) -> int:
    """Mean entry size of the closed ledgers about to be read (a guess for open ones)."""
    total_bytes = total_entries = 0
    for spans, _ in found.values():
        for span in spans[:4]:
            meta = bk.ledger_metadata(span.ledger_id)
            if str(meta.state) == "CLOSED" and meta.last_entry_id >= 0:
                total_bytes += meta.length
                total_entries += meta.last_entry_id + 1
    return total_bytes // total_entries if total_entries else DEFAULT_ENTRY_SIZE_BYTES
