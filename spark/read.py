"""Reading one partition (a ``Span``: ledger, first, last) into Arrow record batches.

Runs in Spark's Python workers.  The ledger is opened without recovery (nothing is fenced) and
read in chunks of ``readBatchEntries`` with a few chunk reads in flight, each chunk becoming
one Arrow batch.  A span never reaches past the LAC seen when it was planned, and the LAC only
grows, so a retried task reads exactly the same entries.

An entry that no replica holds intact, or a ledger deleted under the query, is data loss:
``DataLossError`` naming it, or with ``failOnDataLoss=false`` a warning and the entries that
can be read.  Other failures (a timeout, no bookie answering) fail the task for Spark to retry.
"""

from __future__ import annotations

import collections

import pyarrow as pa

from bookie.client import (DigestMismatchError, NoSuchEntryError, NoSuchLedgerError)
from bookie.spark.clients import client_for
from bookie.spark.options import ReadOptions
from bookie.spark.plan import Span, data_loss

IN_FLIGHT = 8  # chunk reads outstanding per task (as `bookie bench reads --window`)
LOST = (NoSuchEntryError, DigestMismatchError)

BASE_FIELDS = [pa.field("payload", pa.binary()), pa.field("log", pa.string()),
               pa.field("ledger_id", pa.int64()), pa.field("entry_id", pa.int64())]
METADATA_FIELDS = [pa.field("ledger_ctime_ms", pa.int64()),
                   pa.field("ledger_custom", pa.map_(pa.string(), pa.string()))]

BASE_SCHEMA = "payload BINARY, log STRING, ledger_id BIGINT, entry_id BIGINT"
METADATA_SCHEMA = BASE_SCHEMA + ", ledger_ctime_ms BIGINT, ledger_custom MAP<STRING, STRING>"


def schema_ddl(ro: ReadOptions) -> str:
    return METADATA_SCHEMA if ro.include_metadata else BASE_SCHEMA


def read_span(ro: ReadOptions, span: Span):
    """Arrow record batches of the span's entries, in entry order."""
    bk = client_for(ro.conn)
    try:
        rh = bk.open_ledger(span.ledger_id, digest=ro.conn.digest, password=ro.conn.password,
                            recovery=False)
        rh.verify_reads = ro.verify
        extra = _metadata_columns(bk, ro, span.ledger_id)
    except NoSuchLedgerError:
        data_loss(ro, f"ledger {span.ledger_id}"
                      f"{f' of log {span.log}' if span.log else ''} was deleted; entries "
                      f"{span.first}..{span.last} are lost")
        return
    step = ro.read_batch_entries
    chunks = collections.deque()
    first = span.first
    while first <= span.last or chunks:
        while first <= span.last and len(chunks) < IN_FLIGHT:
            last = min(span.last, first + step - 1)
            chunks.append((first, last, rh.read_entries_async(first, last)))
            first = last + 1
        lo, hi, fut = chunks.popleft()
        try:
            entries = bk.wait(fut)
        except LOST:
            entries = _one_by_one(bk, ro, rh, span, lo, hi)
        except NoSuchLedgerError:
            data_loss(ro, f"ledger {span.ledger_id} was deleted while being read; entries "
                          f"{lo}..{span.last} are lost")
            for _, _, other in chunks:
                other.cancel()
            return
        if entries:
            yield _batch(span, [e.data for e in entries], [e.entry_id for e in entries], extra)


def _one_by_one(bk, ro: ReadOptions, rh, span: Span, lo: int, hi: int):
    """The chunk's entries read one at a time, each lost one reported (or raised)."""
    out = []
    for entry_id in range(lo, hi + 1):
        try:
            out.append(rh.read_entry(entry_id))
        except LOST as exc:
            data_loss(ro, f"ledger {span.ledger_id} entry {entry_id}"
                          f"{f' (log {span.log})' if span.log else ''} is lost: no replica "
                          f"holds an intact copy ({exc})")
    return out


def _metadata_columns(bk, ro: ReadOptions, ledger_id: int):
    if not ro.include_metadata:
        return None
    meta = bk.ledger_metadata(ledger_id)
    return meta.ctime_ms, sorted(meta.custom.items())


def _batch(span: Span, payloads, entry_ids, extra) -> pa.RecordBatch:
    n = len(payloads)
    columns = [pa.array(payloads, pa.binary()),
               pa.array([span.log] * n, pa.string()) if span.log is not None
               else pa.nulls(n, pa.string()),
               pa.array([span.ledger_id] * n, pa.int64()),
               pa.array(entry_ids, pa.int64())]
    fields = BASE_FIELDS
    if extra is not None:
        columns += [pa.array([extra[0]] * n, pa.int64()),
                    pa.array([extra[1]] * n, METADATA_FIELDS[1].type)]
        fields = BASE_FIELDS + METADATA_FIELDS
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))
