"""The Spark source, batch reads: real local Spark (local[2,4]) over real bookies.

Every check compares what Spark returns with what was written, entry by entry.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import pytest


import pyspark  # noqa: E402,F401  (tests/setup.sh installs the spark extra)
from spark_fixtures import bk, spark  # noqa: E402,F401  (module fixtures)

PW = "pw"


def payload(ledger_id, entry_id) -> bytes:
    return f"L{ledger_id}-E{entry_id}-".encode() + bytes([entry_id % 251]) * (entry_id % 40)


def write_ledger(bk, n, close=True, ensemble=(3, 2, 2)):
    lh = bk.create_ledger(*ensemble, password=PW.encode())
    if n:
        lh.add_range_async([payload(lh.ledger_id, i) for i in range(n)]).result(60)
    if close:
        lh.close()
    return lh


def reader(spark, spark_bookies, **options):
    r = (spark.read.format("bookie").option("metadataServiceUri", spark_bookies.metadata_uri)
         .option("password", PW).option("bookkeeper.readTimeout", "2"))
    for key, value in options.items():
        r = r.option(key, str(value))
    return r.load()


def rows(df):
    return sorted((r.ledger_id, r.entry_id, bytes(r.payload), r.log) for r in df.collect())


def expected(ledger_id, first, last, log=None):
    return [(ledger_id, e, payload(ledger_id, e), log) for e in range(first, last + 1)]


def test_closed_replicated_ledger_reads_whole_and_by_ranges(spark, spark_bookies, bk):
    lh = write_ledger(bk, 3000)
    lid = lh.ledger_id
    df = reader(spark, spark_bookies, ledgers=lid, maxEntriesPerPartition=700,
                readBatchEntries=250)
    assert df.rdd.getNumPartitions() == 5
    assert rows(df) == expected(lid, 0, 2999)
    ranged = reader(spark, spark_bookies, ledgers=lid,
                    startingOffsets=json.dumps({"ledgers": {str(lid): 1234}}),
                    endingOffsets=json.dumps({"ledgers": {str(lid): 2001}}), minPartitions=3)
    assert ranged.rdd.getNumPartitions() == 3
    assert rows(ranged) == expected(lid, 1234, 2000)


def test_open_ledger_is_read_to_the_lac_seen_when_planning_while_its_writer_adds(
        spark, spark_bookies, bk):
    lh = write_ledger(bk, 500, close=False)
    lid = lh.ledger_id
    stop = threading.Event()

    def keep_adding():
        i = 500
        while not stop.is_set():
            lh.add_range_async([payload(lid, e) for e in range(i, i + 50)]).result(60)
            i += 50
            time.sleep(0.01)

    writer = threading.Thread(target=keep_adding, daemon=True)
    writer.start()
    try:
        got = rows(reader(spark, spark_bookies, ledgers=lid))
    finally:
        stop.set()
        writer.join(60)
    assert len(got) >= 500 and got == expected(lid, 0, len(got) - 1)
    # never fenced: the writer adds on and closes normally
    assert lh.add_entry(payload(lid, lh.last_add_confirmed + 1)) == lh.last_add_confirmed
    lh.close()


def test_log_is_read_in_read_log_order_across_empty_ledgers_and_into_the_open_tail(
        spark, spark_bookies, bk):
    writer = bk.open_log("orders-read", password=PW.encode())
    written = []
    for step in (120, 0, 0, 75, 30):  # two empty ledgers in the middle; 30 in the open tail
        for _ in range(step):
            pos = writer.append(b"order-%d" % len(written))
            written.append((pos.ledger_id, pos.entry_id, b"order-%d" % len(written)))
        if step != 30:
            writer.roll()
    assert len(writer.ledgers) == 5
    deadline = time.monotonic() + 30
    while True:  # the open tail's last LAC reaches its bookies within explicitLacInterval
        want = [(r.ledger_id, r.entry_id, r.data)
                for r in bk.read_log("orders-read", password=PW.encode())]
        if want == written or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert want == written
    df = reader(spark, spark_bookies, log="orders-read", maxEntriesPerPartition=50)
    got = df.collect()
    assert sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in got) == want
    assert {r.log for r in got} == {"orders-read"}
    # a start inside the log, on the first entry of a ledger after the empty ones
    third = writer.ledgers[3]
    tail = reader(spark, spark_bookies, log="orders-read",
                  startingOffsets=json.dumps({"logs": {"orders-read": [third, 0]}}))
    assert sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in tail.collect()) == \
        [w for w in want if w[0] >= third]
    writer.close()


def test_fail_on_data_loss_names_a_deleted_ledger_or_skips_it(spark, spark_bookies, bk):
    kept, gone = write_ledger(bk, 40), write_ledger(bk, 40)
    bk.delete_ledger(gone.ledger_id)
    ledgers = f"{kept.ledger_id},{gone.ledger_id}"
    with pytest.raises(Exception, match=f"ledger {gone.ledger_id} was deleted"):
        reader(spark, spark_bookies, ledgers=ledgers).collect()
    got = rows(reader(spark, spark_bookies, ledgers=ledgers, failOnDataLoss="false"))
    assert got == expected(kept.ledger_id, 0, 39)


def test_fail_on_data_loss_names_a_log_position_that_left_the_list(spark, spark_bookies, bk):
    writer = bk.open_log("lossy", password=PW.encode())
    first = writer.ledger_id
    for i in range(10):
        writer.append(b"a%d" % i)
    writer.roll()
    second = writer.ledger_id
    for i in range(5):
        writer.append(b"b%d" % i)
    writer.close()
    start = json.dumps({"logs": {"lossy": [first - 1000, 3]}})  # a ledger never in the list
    with pytest.raises(Exception, match=f"log lossy: position \\[{first - 1000}, 3\\]"):
        reader(spark, spark_bookies, log="lossy", startingOffsets=start).collect()
    got = reader(spark, spark_bookies, log="lossy", startingOffsets=start,
                 failOnDataLoss="false", includeMetadata="true").collect()
    # skipped to the next ledger of the list, read from its first entry
    assert sorted((r.ledger_id, r.entry_id) for r in got) == \
        [(first, e) for e in range(10)] + [(second, e) for e in range(5)]
    assert {tuple(sorted(r.ledger_custom.items())) for r in got} == {(("log", "lossy"),)}
    assert all(r.ledger_ctime_ms > 0 for r in got)


@pytest.mark.parametrize("options, named", [
    ({}, "exactly one of the options ledgers, log, logPattern"),
    ({"ledgers": "1,x"}, "option ledgers"),
    ({"ledgers": "1", "log": "a"}, "exactly one of the options"),
    ({"ledgers": "1", "startingOffsets": "soon"}, "option startingOffsets"),
    ({"ledgers": "1", "bookkeeper.noSuchKey": "1"}, "option bookkeeper.noSuchKey"),
])
def test_a_bad_option_fails_with_an_error_naming_it(spark, spark_bookies, options, named):
    with pytest.raises(Exception, match="(?i)" + named):  # Spark lower-cases option names
        reader(spark, spark_bookies, **options).collect()


def test_a_bookie_killed_during_a_read_loses_nothing(spark, spark_bookies, bk):
    n = 12000
    lh = write_ledger(bk, n)
    df = reader(spark, spark_bookies, ledgers=lh.ledger_id, maxEntriesPerPartition=1000,
                readBatchEntries=100)
    victim = spark_bookies.bookies.index(lh.metadata.fragments[0][1][0])
    killed_at = []

    def kill():
        spark_bookies.kill(victim)
        killed_at.append(time.monotonic())

    killer = threading.Timer(0.5, kill)
    killer.start()
    try:
        got = rows(df)
        done_at = time.monotonic()
    finally:
        killer.join()
        spark_bookies.start(victim)
    assert got == expected(lh.ledger_id, 0, n - 1)
    assert killed_at and killed_at[0] < done_at  # the bookie died while the query read


def kill_first_attempt(entry_id):
    """Kill the Python worker of each partition's first attempt (Spark retries the task)."""
    import os
    from pyspark import TaskContext
    if TaskContext.get().attemptNumber() == 0 and entry_id % 500 == 250:
        os._exit(1)
    return entry_id


def test_a_retried_task_reads_exactly_the_same_entries(spark, spark_bookies, bk):
    from pyspark import cloudpickle
    from pyspark.sql.functions import col, udf
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    lh = write_ledger(bk, 1500)
    df = reader(spark, spark_bookies, ledgers=lh.ledger_id, maxEntriesPerPartition=500)
    checked = df.select("payload", "log", "ledger_id",
                        udf(kill_first_attempt, "bigint")(col("entry_id")).alias("entry_id"))
    assert rows(checked) == expected(lh.ledger_id, 0, 1499)
