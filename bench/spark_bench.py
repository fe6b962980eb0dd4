"""``bookie bench spark``: the Spark source and sink next to the raw client, in one run.

1. writes ``--entries`` entries of ``--entrysize`` bytes to a fresh ledger (``--ensemble`` /
   ``--quorum``) with the raw client in this process, ``WRITE_IN_FLIGHT`` adds outstanding as
   ``bench writes`` keeps them, and closes it - the sink's reference rate, from the same minutes;
2. reads it whole with the raw client (``--window`` reads of ``--batch`` entries in flight) -
   the count's reference rate;
3. counts it with ``spark.read.format("bookie")`` on a local Spark (``--cores``), once cold
   (JVM, Python workers and clients starting) and ``--repeat`` times warm;
4. appends the same number of rows with ``df.write.format("bookie")``, once cold and
   ``--repeat`` times warm, each time to a fresh log (deleted after the timed ``save()``).
   The cold write pays for Spark starting the Python workers that plan and commit a data
   source write (once per session, a few seconds); the warm ones are the sink's rate.

Prints progress and a summary on stderr and one JSON line on stdout (``--json-out FILE``
appends the same line to FILE, as the other bench tools do).  Needs the ``spark`` extra.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections import deque

from bookie.client import BookKeeper
from bookie.spark import register

WRITE_IN_FLIGHT = 10_000  # bench writes' default --throttle


def _say(emit, line: str) -> None:
    if emit:
        emit(line)


def raw_read_rate(bk: BookKeeper, ledger_id: int, password: bytes, batch: int,
                  window: int) -> tuple[int, float]:
    """(entries, seconds) to read the ledger whole with ``window`` reads in flight."""
    rh = bk.open_ledger(ledger_id, password=password, recovery=False)
    last = rh.last_add_confirmed
    start = time.perf_counter()
    inflight: deque = deque()
    first = count = 0
    while first <= last or inflight:
        while first <= last and len(inflight) < window:
            inflight.append(rh.read_entries_async(first, min(last, first + batch - 1)))
            first += batch
        count += len(bk.wait(inflight.popleft()))
    return count, time.perf_counter() - start


def _text(value) -> str:
    """A typed client key's value as the Spark option's text (spark/options.py types it back)."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value).lower() if isinstance(value, bool) else str(value)


def run(params: dict, uri: str, emit=None) -> dict:
    """Run the benchmark against the bookies registered at ``uri``; the result dict."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # lazy: pyspark

    password = b"bench"
    n, size = params["entries"], params["entrysize"]
    result = {"tool": "spark", "host": socket.gethostname(), "params": params,
              "load_before": os.getloadavg()}
    client_keys = params.get("client_keys") or {}  # --client-conf / --set: CURVE keys, ZooKeeper auth
    spark_options = {f"bookkeeper.{k}": _text(v) for k, v in client_keys.items()}
    with BookKeeper(uri, client_keys or None, throttle=WRITE_IN_FLIGHT) as bk:
        _say(emit, f"writing {n} entries of {size} B (E={params['ensemble']} "
                   f"Qw={params['quorum']})")
        lh = bk.create_ledger(params["ensemble"], params["quorum"], params["quorum"],
                              password=password)
        body = os.urandom(size)
        start = time.perf_counter()
        pending: deque = deque()
        for first in range(0, n, 1000):  # the client's throttle keeps WRITE_IN_FLIGHT outstanding
            pending.append(lh.add_range_async([body] * min(1000, n - first)))
            while pending and pending[0].done():
                pending.popleft().result()
        for fut in pending:
            fut.result(300)
        secs = time.perf_counter() - start
        lh.close()
        result["raw_write"] = {"entries": n, "seconds": secs, "rate": n / secs}
        _say(emit, f"raw client write: {n / secs:,.0f} entries/s")
        count, secs = raw_read_rate(bk, lh.ledger_id, password, params["batch"],
                                    params["window"])
        result["raw_read"] = {"entries": count, "seconds": secs, "rate": count / secs}
        _say(emit, f"raw client read: {count / secs:,.0f} entries/s")

        spark = (SparkSession.builder.master(f"local[{params['cores']}]")
                 .appName("bookie-bench-spark").config("spark.ui.enabled", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        try:
            df = (spark.read.format("bookie").options(**spark_options).option("metadataServiceUri", uri)
                  .option("password", password.decode()).option("ledgers", lh.ledger_id)
                  .option("minPartitions", params["cores"] * 2).load())
            runs = []
            for i in range(1 + params["repeat"]):
                start = time.perf_counter()
                got = df.count()
                secs = time.perf_counter() - start
                assert got == n, f"count {got} != {n}"
                runs.append(secs)
                _say(emit, f"spark count {'cold' if i == 0 else 'warm'}: {n / secs:,.0f} "
                           f"entries/s ({secs:.2f} s)")
            best = min(runs[1:]) if len(runs) > 1 else runs[0]
            result["spark_count"] = {"seconds": runs, "rate_cold": n / runs[0],
                                     "rate_warm": n / best}
            result["spark_vs_raw"] = (n / best) / result["raw_read"]["rate"]

            rows = spark.range(0, n, numPartitions=params["cores"] * 2).selectExpr(
                f"cast(repeat('x', {size}) as binary) as payload")
            runs = []
            for i in range(1 + params["repeat"]):
                log_name = f"bench-spark-sink-{int(time.time())}-{i}"
                start = time.perf_counter()
                (rows.write.format("bookie").options(**spark_options)
                 .option("metadataServiceUri", uri)
                 .option("password", password.decode()).option("log", log_name)
                 .option("ensembleSize", params["ensemble"])
                 .option("writeQuorumSize", params["quorum"])
                 .option("ackQuorumSize", params["quorum"]).mode("append").save())
                secs = time.perf_counter() - start
                runs.append(secs)
                _say(emit, f"spark sink {'cold' if i == 0 else 'warm'}: {n / secs:,.0f} "
                           f"entries/s ({secs:.2f} s)")
                bk.delete_log(log_name)  # not part of save(): outside the timed span
            best = min(runs[1:]) if len(runs) > 1 else runs[0]
            # "rate" is the warm rate, as the count's ratio takes (older results: the cold one)
            result["spark_sink"] = {"entries": n, "seconds": runs, "rate_cold": n / runs[0],
                                    "rate_warm": n / best, "rate": n / best}
            result["sink_vs_write"] = (n / best) / result["raw_write"]["rate"]
        finally:
            spark.stop()
        bk.delete_ledger(lh.ledger_id)
    result["load_after"] = os.getloadavg()
    return result


def print_result(result: dict, json_out: str | None = None) -> None:
    """The summary line on stderr, the JSON line on stdout (and appended to ``json_out``)."""
    raw, count = result["raw_read"]["rate"], result["spark_count"]["rate_warm"]
    sink = result["spark_sink"]
    print(f"raw client read {raw:,.0f}/s; spark count {count:,.0f}/s warm "
          f"({result['spark_vs_raw']:.2f}x raw), {result['spark_count']['rate_cold']:,.0f}/s "
          f"cold; raw client write {result['raw_write']['rate']:,.0f}/s; spark sink "
          f"{sink['rate_warm']:,.0f}/s warm ({result['sink_vs_write']:.2f}x raw write), "
          f"{sink['rate_cold']:,.0f}/s cold; load {result['load_before'][0]:.1f} -> "
          f"{result['load_after'][0]:.1f}", file=sys.stderr)
    line = json.dumps(result)
    print(line)
    if json_out:
        with open(json_out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
