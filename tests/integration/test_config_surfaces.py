"""Configuration values reach a real client the same way from every surface: the Spark
format's ``bookkeeper.allowEmptyPassword=false`` refuses an empty password on real bookies, as
the keyword argument does (bookie.properties)."""

from __future__ import annotations

import pytest

from bookie.client import BookKeeper, InvalidArgumentError
from bookie.spark.options import SinkOptions
from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401


def _sink_client(ensemble, flag: str) -> tuple[BookKeeper, SinkOptions]:
    so = SinkOptions.parse({"metadataServiceUri": ensemble.metadata_uri, "log": "orders",
                            "bookkeeper.allowEmptyPassword": flag,
                            "bookkeeper.addEntryTimeout": "2"})
    return BookKeeper(so.conn.metadata_uri, dict(so.conn.config)), so


def test_spark_allow_empty_password_false_refuses_an_empty_password(bookkeeper_ensemble):
    bk, so = _sink_client(bookkeeper_ensemble, "false")
    with bk:
        assert so.conn.password == b""
        with pytest.raises(InvalidArgumentError, match="empty password"):
            bk.create_ledger(3, 2, 2, password=so.conn.password)


def test_spark_allow_empty_password_true_accepts_it(bookkeeper_ensemble):
    bk, so = _sink_client(bookkeeper_ensemble, "yes")
    with bk:
        lh = bk.create_ledger(3, 2, 2, password=so.conn.password)
        assert lh.add_entry(b"x") == 0
        lh.close()
