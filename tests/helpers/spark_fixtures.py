"""The Spark tests' module fixtures, written once: ``spark`` (the session's SparkSession) and
``bk`` (a client of the shared Spark bookies with short timeouts, so a killed bookie shows up
in seconds).  A test module takes them with ``from spark_fixtures import bk, spark``."""

from __future__ import annotations

import pytest

from bookie.client import BookKeeper

CLIENT_CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}


@pytest.fixture(scope="module")
def spark(spark_session):
    return spark_session


@pytest.fixture(scope="module")
def bk(spark_bookies):
    with BookKeeper(spark_bookies.metadata_uri, CLIENT_CONFIG) as client:
        yield client
