"""The sink: appending a DataFrame's ``payload`` column to a log, exactly once.

Theory of operation
-------------------
* **Tasks** (``write_task``): each task attempt creates its own ledger, tagged in the ledger's
  custom metadata with the sink id, batch id, partition and attempt (``TAG_*``), adds the
  partition's payloads in order, closes the ledger and returns its id in the commit message.
  The partition's Arrow batches are read on a thread of their own (``read_ahead``), so the
  JVM keeps sending while the task waits for room in the client's throttle.
  Nothing is in the log yet: a failed or retried attempt leaves at most an unlinked ledger.
* **Commit** (driver, ``commit_batch``): read the log's list and its version; if a ledger of the
  list's tail already carries this (sink, batch) tag, the batch is in the log - a replayed
  commit (after a restart, or a re-run batch write) - and the new ledgers are deleted instead.
  Otherwise the batch's ledgers, in partition order, are linked onto the list with one CAS
  (``BookKeeper.link_ledgers``); a lost CAS re-reads and re-checks.  So each batch enters the
  log once, whole, and in order.
* **Abort** deletes the attempt ledgers named by the messages (never one that is in the list).
* **Sweeping** (``sweep``): an attempt killed mid-write never reports its ledger; any ledger with
  this sink's tag that is not in the list and older than a grace period is deleted.  Commits
  sweep every ``SWEEP_EVERY`` batches (batch writes: every commit).
* **Cost.** ``sweep`` reads every ledger's metadata (``find_ledgers``) and ``batch_in_log`` up to
  ``TAIL_SCAN`` of the list's tail: one store read each, paid by the user waiting in ``save()``.
  A batch write without a ``sinkId`` tags its ledgers with a sink id of its own (``batch-<uuid>``),
  so both are known without reading: none of its ledgers is in the list but the ones its own
  commit links, and none is older than the write itself.  Its commit therefore checks the list
  for its own ledgers instead of scanning the tail, and sweeps only once the write has run for
  longer than the grace period (before that, the sweep could delete nothing) - or at once, with
  no grace, when a partition needed a retry: no later commit sweeps that sink id, and every
  attempt of the write has ended by its commit.

The log's last ledger must be closed before linking (a log never holds a ledger after one still
being written); a dead log writer's ledger is recovered first, which fences that writer: the sink
is the log's writer while it commits.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import uuid

import pyarrow as pa
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark import TaskContext

from bookie.client import BadVersionError, BookKeeperError, NoSuchLedgerError
from bookie.spark.clients import client_for
from bookie.spark.options import SinkOptions

log = logging.getLogger("bookie.spark")

TAG_SINK, TAG_BATCH = "spark.sink", "spark.batch"
TAG_PARTITION, TAG_ATTEMPT, TAG_LOG = "spark.partition", "spark.attempt", "spark.log"
SWEEP_EVERY = 10
TAIL_SCAN = 1000  # ledgers of the list's tail searched for a batch's tag
CAS_TRIES = 20
IN_FLIGHT = 4  # add_range calls outstanding per task
READ_AHEAD = 2  # Arrow batches a task reads ahead of its adds


@dataclasses.dataclass
class SinkMessage(WriterCommitMessage):
    """What a task attempt reports: its ledger (None: the partition was empty)."""
    sink_id: str
    batch_id: int
    partition: int
    attempt: int
    ledger_id: int | None
    entries: int


class BookieBatchWriter(DataSourceArrowWriter):
    """``df.write.format("bookie")``: one batch, idempotent for a given sinkId and batchId."""

    def __init__(self, so: SinkOptions):
        self.so = so
        # Without a sinkId each write is its own batch: exactly once within the job (task
        # retries), but a re-run of the job appends again.
        self.sink_id = so.sink_id or f"batch-{uuid.uuid4().hex}"
        self.own_sink_id = so.sink_id is None
        # Made on the driver before any task runs (Spark pickles this writer to the tasks and
        # to the commit): every ledger tagged with an own sink id is younger than this.
        self.started_s = time.time()

    def write(self, iterator) -> SinkMessage:
        return write_task(self.so, self.sink_id, self.so.batch_id, iterator)

    def commit(self, messages) -> None:
        if not self.own_sink_id:
            commit_batch(self.so, self.sink_id, self.so.batch_id, messages, sweep_now=True)
            return
        # No later commit sweeps a sink id made for this write: its own commit must.  A
        # partition that needed a retry may have lost an attempt that never reported its
        # ledger; every attempt has ended (or lost) by now, so that sweep needs no grace.
        # Without a retry, sweep only once the write outlived the grace period (before, the
        # sweep could delete nothing).
        retried = any(m is not None and m.attempt > 0 for m in messages)
        commit_batch(self.so, self.sink_id, self.so.batch_id, messages, own_sink_id=True,
                     sweep_now=retried or time.time() - self.started_s >= self.so.sweep_grace_s,
                     sweep_grace_s=0.0 if retried else None)

    def abort(self, messages) -> None:
        abort_batch(self.so, messages)


class BookieStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("bookie")``: each micro-batch enters the log once."""

    def __init__(self, so: SinkOptions):
        self.so = so

    def write(self, iterator) -> SinkMessage:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        sink_id = self.so.sink_id or ctx.getLocalProperty("sql.streaming.queryId")
        return write_task(self.so, sink_id, batch_id, iterator)

    def commit(self, messages, batchId: int) -> None:
        ids = {m.sink_id for m in messages if m is not None}
        if not ids:
            return  # no task reported: nothing was written
        (sink_id,) = ids
        commit_batch(self.so, sink_id, batchId, messages,
                     sweep_now=batchId % SWEEP_EVERY == 0)

    def abort(self, messages, batchId: int) -> None:
        abort_batch(self.so, messages)


# -- tasks -------------------------------------------------------------------------------------

def _payloads(batch: pa.RecordBatch) -> list:
    column = batch.column(batch.schema.get_field_index("payload"))
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in column.to_pylist()]
    return column.to_pylist()


def read_ahead(batches, depth: int = READ_AHEAD):
    """Yield ``batches`` in order, read on a thread of their own up to ``depth`` ahead.

    A task's thread blocks in the client's throttle while it hands a batch over; read on that
    thread, the next batch crosses from the JVM only after the hand-over (the JVM stops when
    the socket's buffer is full), and the adds drain meanwhile (19% of a task's time went to
    that wait).  An error reading the input comes out where its batch would have.  The thread
    only ever reads this task's input, and a caller that takes every batch returns after it has
    read the last: the Python worker reads its next command from the same stream.  (A task that
    fails stops taking batches; its worker exits, the reading thread with it.)
    """
    items: queue.Queue = queue.Queue(depth)
    end = object()

    def pump() -> None:
        try:
            for batch in batches:
                items.put((batch, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the task's thread
            items.put((end, exc))
        else:
            items.put((end, None))

    threading.Thread(target=pump, name="bookie-sink-read-ahead", daemon=True).start()
    while True:
        batch, exc = items.get()
        if exc is not None:
            raise exc
        if batch is end:
            return
        yield batch


def write_task(so: SinkOptions, sink_id: str, batch_id: int, iterator) -> SinkMessage:
    """Write one partition into a new ledger of this attempt; its commit message."""
    ctx = TaskContext.get()
    partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    bk = client_for(so.conn)
    lh = None
    entries = 0
    pending = []
    try:
        for batch in read_ahead(iterator):
            payloads = _payloads(batch)
            if not payloads:
                continue
            if any(p is None for p in payloads):
                raise ValueError(f"sink for log {so.log}: a payload is null (partition "
                                 f"{partition})")
            if lh is None:
                lh = bk.create_ledger(*so.quorums, digest=so.conn.digest,
                                      password=so.conn.password, custom={
                                          TAG_SINK: sink_id, TAG_BATCH: str(batch_id),
                                          TAG_PARTITION: str(partition),
                                          TAG_ATTEMPT: str(attempt), TAG_LOG: so.log})
            pending.append(lh.add_range_async(payloads))
            entries += len(payloads)
            while len(pending) > IN_FLIGHT:
                bk.wait(pending.pop(0))
        for fut in pending:
            bk.wait(fut)
        if lh is not None:
            lh.close()
    except BaseException:
        if lh is not None:
            _delete_quietly(bk, lh.ledger_id)
        raise
    return SinkMessage(sink_id, batch_id, partition, attempt,
                       None if lh is None else lh.ledger_id, entries)


# -- the driver --------------------------------------------------------------------------------

def commit_batch(so: SinkOptions, sink_id: str, batch_id: int, messages,
                 sweep_now: bool = False, own_sink_id: bool = False,
                 sweep_grace_s: float | None = None) -> list[int]:
    """Link the batch's ledgers onto the log, unless the batch is there already.

    Args:
        sweep_now: sweep the sink's unlinked ledgers after linking, those older than
            ``sweep_grace_s`` (default: the ``sweepGraceMs`` option).
        own_sink_id: ``sink_id`` was made for this one batch (a batch write without a
            sinkId): no other commit links ledgers tagged with it, so the batch is in the log
            exactly when one of its ledgers is, and the tail needs no scan.

    Returns:
        The ledgers linked ([] for a replayed commit or an empty batch).
    """
    bk = client_for(so.conn)
    msgs = sorted((m for m in messages if m is not None and m.ledger_id is not None),
                  key=lambda m: m.partition)
    new = [m.ledger_id for m in msgs]
    if so.create_log:
        bk.create_log(so.log)
    for _ in range(CAS_TRIES):
        ledgers, version = bk.log_ledgers(so.log)
        if (not set(new).isdisjoint(ledgers) if own_sink_id
                else batch_in_log(bk, ledgers, sink_id, batch_id)):
            log.info("sink %s batch %d is in log %s already: replayed commit, adds nothing",
                     sink_id, batch_id, so.log)
            for lid in set(new) - set(ledgers):
                _delete_quietly(bk, lid)
            new = []
            break
        if not new:
            break
        if ledgers:
            _close_tail(bk, so, ledgers[-1])
        try:
            bk.link_ledgers(so.log, new, version)
            break
        except BadVersionError:
            continue  # the list moved: re-read, re-check
    else:
        raise RuntimeError(f"sink {sink_id}: could not link batch {batch_id} onto log {so.log} "
                           f"in {CAS_TRIES} tries (the list keeps changing)")
    if sweep_now:
        sweep(bk, so.log, sink_id, so.sweep_grace_s if sweep_grace_s is None else sweep_grace_s)
    return new


def batch_in_log(bk, ledgers: list[int], sink_id: str, batch_id: int) -> bool:
    """True if a ledger near the list's tail carries this sink's tag for ``batch_id`` or a
    later batch (batches of one sink enter the log in order)."""
    for lid in reversed(ledgers[-TAIL_SCAN:]):
        try:
            custom = bk.ledger_metadata(lid).custom
        except NoSuchLedgerError:
            continue
        if custom.get(TAG_SINK) != sink_id:
            continue
        return int(custom.get(TAG_BATCH, -1)) >= batch_id
    return False


def _close_tail(bk, so: SinkOptions, ledger_id: int) -> None:
    """Recover the list's last ledger if a writer left it open (fencing that writer)."""
    try:
        if str(bk.ledger_metadata(ledger_id).state) != "CLOSED":
            bk.open_ledger(ledger_id, digest=so.conn.digest, password=so.conn.password,
                           recovery=True)
    except NoSuchLedgerError:
        pass


def abort_batch(so: SinkOptions, messages) -> None:
    """Delete the attempts' ledgers that are not in the log."""
    bk = client_for(so.conn)
    try:
        listed = set(bk.log_ledgers(so.log)[0])
    except BookKeeperError:
        listed = set()
    for m in messages or ():
        if m is not None and m.ledger_id is not None and m.ledger_id not in listed:
            _delete_quietly(bk, m.ledger_id)


def sweep(bk, log_name: str, sink_id: str, grace_s: float, now_s: float | None = None) -> list:
    """Delete ledgers tagged with ``sink_id`` for ``log_name`` that are not in the log's list
    and were created more than ``grace_s`` ago (attempts killed mid-write, or aborted ones
    whose abort never ran).  Returns the ids deleted."""
    now_ms = (time.time() if now_s is None else now_s) * 1000
    tagged = bk.find_ledgers({TAG_SINK: sink_id, TAG_LOG: log_name})
    if not tagged:
        return []
    listed = set(bk.log_ledgers(log_name)[0])
    gone = []
    for lid in tagged:
        if lid in listed:
            continue
        try:
            if bk.ledger_metadata(lid).ctime_ms > now_ms - grace_s * 1000:
                continue  # maybe a live attempt of the batch being written
        except NoSuchLedgerError:
            continue
        if _delete_quietly(bk, lid):
            gone.append(lid)
    if gone:
        log.info("sink %s: swept %d unlinked ledgers of log %s: %s", sink_id, len(gone),
                 log_name, gone)
    return gone


def _delete_quietly(bk, ledger_id: int) -> bool:
    try:
        bk.delete_ledger(ledger_id)
        return True
    except BookKeeperError as exc:
        log.warning("could not delete unlinked ledger %d: %s", ledger_id, exc)
        return False
