"""docs/spark.md's examples run as written (against the suite's bookies and Spark session)."""

from __future__ import annotations

import os
import re

import pytest

import pyspark  # noqa: E402,F401  (tests/setup.sh installs the spark extra)

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "spark.md")


def test_the_examples_of_docs_spark_md_run_as_written(spark_session, spark_bookies, tmp_path):
    with open(DOC, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 4
    code = "\n".join(blocks)
    code = code.replace('"lmdb:///tmp/bk/metadata"', repr(spark_bookies.metadata_uri))
    code = code.replace('"/tmp/cp-', f'"{tmp_path}/cp-')
    code = code.replace('.format("console")', '.format("noop")')  # keep the test's output short
    exec(compile(code, "docs/spark.md", "exec"), {"__name__": "docs_spark"})
