"""Spark's data source and sink for ledgers and logs: the format ``bookie``.

    from bookie.spark import register
    register(spark)
    df = (spark.read.format("bookie")
          .option("metadataServiceUri", "zk://zk1:2181/ledgers")
          .option("log", "orders").load())

A recipe over the client's public API (``bookie.client``); needs the ``spark`` extra
(pyspark, pyarrow).  See docs/spark.md.
"""

from __future__ import annotations

__all__ = ["register"]


def register(spark) -> None:
    """Register the ``bookie`` format with a SparkSession (once per session)."""
    from bookie.spark.source import BookieDataSource  # lazy: pyspark
    spark.dataSource.register(BookieDataSource)
