"""The Spark source, streams: offsets, triggers and restarts, over real bookies and a real
local Spark (local[2,4])."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest


import pyspark  # noqa: E402,F401  (tests/setup.sh installs the spark extra)
from spark_fixtures import bk, spark  # noqa: E402,F401  (module fixtures)

PW = "pw"


def stream(spark, spark_bookies, **options):
    r = (spark.readStream.format("bookie")
         .option("metadataServiceUri", spark_bookies.metadata_uri).option("password", PW))
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


class Batches:
    """foreachBatch target: rows by batch id (a replayed batch replaces its rows)."""

    def __init__(self):
        self.by_batch = {}
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(r.ledger_id, r.entry_id, bytes(r.payload)) for r in df.collect()]
        with self.lock:
            self.by_batch[batch_id] = got

    def rows(self):
        with self.lock:
            return [row for b in sorted(self.by_batch) for row in self.by_batch[b]]


def wait_for(predicate, timeout_s=180, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def test_stream_tails_a_live_log_writer_and_restarts_from_its_checkpoint(
        spark, spark_bookies, bk, tmp_path):
    name = "tail-live"
    writer = bk.open_log(name, password=PW.encode(), roll_entries=150)  # rolls between triggers
    written = []
    lock = threading.Lock()
    stop = threading.Event()

    def keep_appending(count):
        for _ in range(count):
            if stop.is_set():
                return
            data = b"rec-%d" % len(written)
            pos = writer.append(data)
            with lock:
                written.append((pos.ledger_id, pos.entry_id, data))
            time.sleep(0.004)

    keep_appending(100)
    checkpoint = str(tmp_path / "checkpoint")
    sink = Batches()

    def start():
        return (stream(spark, spark_bookies, log=name, startingOffsets="earliest",
                       maxOffsetsPerTrigger=120)
                .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
                .trigger(processingTime="500 milliseconds").start())

    appender = threading.Thread(target=keep_appending, args=(600,), daemon=True)
    query = start()
    appender.start()
    try:
        wait_for(lambda: len(sink.rows()) >= 250, what="the first rows")
        query.stop()  # mid-stream, the writer still appending
        appender.join(120)
        keep_appending(50)
        writer.close()
        query = start()
        wait_for(lambda: len(sink.rows()) >= len(written), what="every row after restart")
    finally:
        stop.set()
        query.stop()
    got = sink.rows()
    assert got == written  # in log order, no duplicate, no gap
    assert len({lid for lid, _, _ in written}) >= 4


def test_available_now_reads_what_was_there_at_start_and_stops(
        spark, spark_bookies, bk, tmp_path):
    lh = bk.create_ledger(3, 2, 2, password=PW.encode())
    lh.add_range_async([b"a%d" % i for i in range(700)]).result(60)
    empty = bk.create_ledger(3, 2, 2, password=PW.encode())  # open, no entry yet
    sink = Batches()
    query = (stream(spark, spark_bookies, ledgers=f"{lh.ledger_id},{empty.ledger_id}",
                    startingOffsets="earliest", maxOffsetsPerTrigger=300)
             .writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True)
             .start())
    lh.add_range_async([b"late"] * 50).result(60)  # after the start: maybe not read
    assert query.awaitTermination(240)
    got = sink.rows()
    assert len(got) in (700, 750)  # the late entries only if they beat the target offsets
    assert got[:700] == [(lh.ledger_id, i, b"a%d" % i) for i in range(700)]
    assert len(sink.by_batch) >= 3  # the limit was honoured: 700 entries in >= 3 batches
    progress = query.lastProgress or query.recentProgress[-1]
    end = json.loads(progress["sources"][0]["endOffset"]) if isinstance(
        progress["sources"][0]["endOffset"], str) else progress["sources"][0]["endOffset"]
    assert end["ledgers"][str(empty.ledger_id)] == 0
    lh.close()
    empty.close()
    assert os.path.isdir(tmp_path / "cp" / "offsets")


@pytest.mark.spark_slow
def test_log_pattern_stream_picks_up_new_logs_and_fails_when_a_position_leaves_the_list(
        spark, spark_bookies, bk, tmp_path):
    from bookie.client.log import encode_record

    def filled(name, count):
        with bk.open_log(name, password=PW.encode()) as writer:
            for i in range(count):
                writer.append(b"%s-%d" % (name.encode(), i))
            return writer.ledgers

    filled("pat-a", 20)
    sink = Batches()
    query = (stream(spark, spark_bookies, logPattern="pat-.*", startingOffsets="earliest")
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: len(sink.rows()) == 20, what="log pat-a")
        filled("pat-b", 10)  # matched at a later trigger, read from its start
        wait_for(lambda: len(sink.rows()) == 30, what="log pat-b")
        # pat-a's list loses the ledger the stream's position is in (truncated by hand)
        ledgers, version = bk.log_ledgers("pat-a")
        replacement = bk.create_ledger(3, 2, 2, password=PW.encode())
        replacement.close()
        bk.write_record("/logs/pat-a", encode_record([replacement.ledger_id]), version)
        with pytest.raises(Exception, match=f"log pat-a: position \\[{ledgers[0]}, 20\\]"):
            query.awaitTermination(120)
            raise AssertionError("the query did not fail")
    finally:
        query.stop()
    assert len(sink.rows()) == 30  # each entry once
    assert {d for _, _, d in sink.rows()} == {b"pat-a-%d" % i for i in range(20)} | \
        {b"pat-b-%d" % i for i in range(10)}
