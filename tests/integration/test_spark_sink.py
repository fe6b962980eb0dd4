"""The Spark sink: a batch and a stream appended to a log exactly once, with a task killed
mid-write and a commit replayed (real bookies, real local Spark: local[2,4] retries tasks)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

import pyspark  # noqa: E402,F401  (tests/setup.sh installs the spark extra)
from spark_fixtures import bk, spark  # noqa: E402,F401  (module fixtures)

from pyspark import cloudpickle  # noqa: E402

from bookie.spark.sink import TAG_LOG, TAG_SINK, sweep  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

PW = "pw"


def log_payloads(bk, name):
    return [r.data for r in bk.read_log(name, password=PW.encode())]


def sink(writer, spark_bookies, **options):
    w = writer.format("bookie").option("metadataServiceUri", spark_bookies.metadata_uri) \
        .option("password", PW)
    for key, value in options.items():
        w = w.option(key, str(value))
    return w


def die_once(i):
    """Kill the Python worker of partition 1's first attempt after half its rows."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx.partitionId() == 1 and ctx.attemptNumber() == 0 and i == 750:
        os._exit(1)
    return b"row-%d" % i


def test_batch_write_is_exactly_once_with_a_killed_task_and_a_replayed_commit(
        spark, spark_bookies, bk):
    from pyspark.sql.functions import col, udf
    make = udf(die_once, "binary")
    df = spark.range(0, 2000, numPartitions=4).select(make(col("id")).alias("payload"))
    sink(df.write, spark_bookies, log="batch-out", sinkId="nightly", batchId=7).mode(
        "append").save()
    want = [b"row-%d" % i for i in range(2000)]
    assert log_payloads(bk, "batch-out") == want
    ledgers = bk.log_ledgers("batch-out")[0]
    assert len(ledgers) == 4
    # the same batch again (a re-run job, or a replayed commit): nothing is added
    again = spark.range(0, 2000, numPartitions=4).selectExpr(
        "cast(concat('row-', id) as binary) as payload")
    sink(again.write, spark_bookies, log="batch-out", sinkId="nightly", batchId=7).mode(
        "append").save()
    assert bk.log_ledgers("batch-out")[0] == ledgers
    # the killed attempt's ledger (if its worker died before deleting it) is swept
    sweep(bk, "batch-out", "nightly", grace_s=0)
    assert bk.find_ledgers({TAG_SINK: "nightly", TAG_LOG: "batch-out"}) == sorted(ledgers)
    # a plain string payload column is appended as UTF-8
    text = spark.createDataFrame([("é",), ("z",)], "payload string")
    sink(text.write, spark_bookies, log="batch-out").mode("append").save()
    assert log_payloads(bk, "batch-out") == want + ["é".encode(), b"z"]


def test_stream_write_is_exactly_once_when_a_batch_is_replayed(spark, spark_bookies, bk,
                                                                 tmp_path):
    lh = bk.create_ledger(3, 2, 2, password=PW.encode())
    want = [b"s-%d" % i for i in range(900)]
    lh.add_range_async(want).result(60)
    lh.close()
    checkpoint = str(tmp_path / "cp")

    def run():
        source = (spark.readStream.format("bookie")
                  .option("metadataServiceUri", spark_bookies.metadata_uri)
                  .option("password", PW).option("ledgers", lh.ledger_id)
                  .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 300)
                  .load().select("payload"))
        query = sink(source.writeStream, spark_bookies, log="stream-out") \
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
        assert query.awaitTermination(240)
        assert query.exception() is None
        return query.id

    query_id = run()
    assert log_payloads(bk, "stream-out") == want
    ledgers = bk.log_ledgers("stream-out")[0]
    # forget that the last batch was committed: the restarted query replays it, new tasks
    # write new ledgers, and the commit finds the batch's tag on the log's tail
    commits = sorted(os.listdir(os.path.join(checkpoint, "commits")),
                     key=lambda n: int(n) if n.isdigit() else -1)
    os.remove(os.path.join(checkpoint, "commits", commits[-1]))
    shutil.rmtree(os.path.join(checkpoint, "commits", ".crc"), ignore_errors=True)
    for name in os.listdir(os.path.join(checkpoint, "commits")):
        if name.endswith(".crc"):
            os.remove(os.path.join(checkpoint, "commits", name))
    assert run() == query_id
    assert log_payloads(bk, "stream-out") == want
    assert bk.log_ledgers("stream-out")[0] == ledgers
    tagged = bk.find_ledgers({TAG_SINK: query_id, TAG_LOG: "stream-out"})
    assert sorted(tagged) == sorted(ledgers)  # the replay's ledgers were deleted


def test_allow_empty_password_false_reaches_the_sink_as_false(spark, spark_bookies, bk):
    """bookkeeper.allowEmptyPassword=false is false in the sink's tasks (it once arrived as the
    truthy string 'false' and let a ledger with the well-known empty key be written)."""
    rows = spark.createDataFrame([("a",), ("b",)], "payload string").coalesce(1)

    def write(flag):
        (rows.write.format("bookie").option("metadataServiceUri", spark_bookies.metadata_uri)
         .option("password", "").option("bookkeeper.allowEmptyPassword", flag)
         .option("log", f"empty-password-{flag}").mode("append").save())
    with pytest.raises(Exception, match="empty password"):
        write("false")
    write("true")
    assert [r.data for r in bk.read_log("empty-password-true", password=b"")] == [b"a", b"b"]
