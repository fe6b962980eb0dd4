"""The sink's read-ahead of a task's Arrow batches: order, errors, and how far ahead it reads
(no Spark, no bookie)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from bookie.spark.sink import read_ahead  # noqa: E402


def test_batches_come_out_in_order_and_all_of_them():
    assert list(read_ahead(iter(range(1000)), depth=2)) == list(range(1000))
    assert list(read_ahead(iter([]))) == []


def test_an_error_reading_comes_out_after_the_batches_before_it():
    def batches():
        yield "a"
        yield "b"
        raise ConnectionResetError("the JVM went away")
    got = []
    with pytest.raises(ConnectionResetError, match="went away"):
        for batch in read_ahead(batches()):
            got.append(batch)
    assert got == ["a", "b"]


def test_it_reads_at_most_depth_batches_ahead_and_reads_while_the_task_waits():
    read = []
    ahead = threading.Event()

    def batches():
        for i in range(10):
            read.append(i)
            if len(read) == 4:
                ahead.set()
            yield i
    it = read_ahead(batches(), depth=2)
    assert next(it) == 0
    # while the task is busy with batch 0, the thread reads on: 1 and 2 queued, 3 in hand
    assert ahead.wait(10)
    time.sleep(0.1)
    assert read == [0, 1, 2, 3]
    assert list(it) == list(range(1, 10))
