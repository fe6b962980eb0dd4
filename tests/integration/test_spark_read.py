"""The Spark source, batch reads: real local Spark (local[2,4]) over real bookies.

Every check compares what Spark returns with what was written, entry by entry.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from bookie.client import BookKeeper

pytest.importorskip("pyspark")

PW = "pw"
CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}


@pytest.fixture(scope="module")
def bk(spark_bookies):
    with BookKeeper(spark_bookies.metadata_uri, CONFIG) as client:
        yield client


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


@pytest.fixture(scope="module")
def spark(spark_session):
    return spark_session
