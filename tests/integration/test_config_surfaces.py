"""Configuration values reach a real client the same way from every surface: the Spark
format's ``bookkeeper.allowEmptyPassword=false`` refuses an empty password on real bookies, as
the keyword argument does (bookie.properties); BookKeeper's client.conf names (issue 24.5) through
``BookKeeper.from_conf`` and the tools' ``--client-conf``."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys

import pytest

from bookie.client import AsyncBookKeeper, BookKeeper, InvalidArgumentError
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


# -- BookKeeper's client configuration names (issue 24.5) --------------------------------------

def _client_conf(tmp_path, ensemble, extra: str = "") -> str:
    conf = tmp_path / "client.conf"
    conf.write_text(f"# as BookKeeper's client.conf\nmetadataServiceUri={ensemble.metadata_uri}\n"
                    f"addEntryTimeoutSec=2\nreadEntryTimeoutSec=2\nuseV2WireProtocol=true\n"
                    f"numIOThreads=4\nallowEmptyPassword=yes\n{extra}")
    return str(conf)


def test_from_conf_reads_bookkeeper_names_and_logs_the_ignored_once(tmp_path, bookkeeper_ensemble,
                                                                    caplog):
    path = _client_conf(tmp_path, bookkeeper_ensemble)
    with caplog.at_level(logging.INFO, logger="bookie.client"):
        with BookKeeper.from_conf(path) as bk:
            assert (bk.config.addEntryTimeout, bk.config.readTimeout) == (2.0, 2.0)
            lh = bk.create_ledger(3, 2, 2, password=b"")
            assert [lh.add_entry(b"e%d" % i) for i in range(3)] == [0, 1, 2]
            lh.close()
            rh = bk.open_ledger(lh.ledger_id, password=b"")
            assert [e.data for e in rh.read_entries(0, 2)] == [b"e0", b"e1", b"e2"]
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert ignored == ["client configuration keys with no meaning here, ignored: "
                       "useV2WireProtocol, numIOThreads"]


def test_from_conf_refuses_unknown_keys_with_did_you_mean(tmp_path, bookkeeper_ensemble):
    path = _client_conf(tmp_path, bookkeeper_ensemble, "addEntryTimeoutSecs=1\n")
    with pytest.raises(InvalidArgumentError, match="did you mean 'addEntryTimeoutSec'"):
        BookKeeper.from_conf(path)


def test_async_from_conf(tmp_path, bookkeeper_ensemble):
    path = _client_conf(tmp_path, bookkeeper_ensemble)

    async def run():
        bk = await AsyncBookKeeper.from_conf(path)
        try:
            lh = await bk.create_ledger(3, 2, 2, password=b"pw")
            assert await lh.add(b"x") == 0
            await lh.close()
        finally:
            await bk.close()
    asyncio.run(run())


def _bookie_cli(*args, timeout_s=120):
    return subprocess.run([sys.executable, "-m", "bookie", *args], capture_output=True,
                          text=True, timeout=timeout_s)


def test_shell_and_bench_take_the_metadata_store_from_client_conf(tmp_path, bookkeeper_ensemble):
    path = _client_conf(tmp_path, bookkeeper_ensemble)
    r = _bookie_cli("shell", "simpletest", "--ensemble-size", "3", "--write-quorum", "2",
                    "--ack-quorum", "2", "--entries", "5", "--client-conf", path)
    assert r.returncode == 0 and "simpletest: OK: 5 entries" in r.stdout, r.stderr
    r = _bookie_cli("bench", "writes", "--client-conf", path, "--ensemble", "1", "--quorum", "1",
                    "--time", "1", "--warmup-messages", "0", "--entrysize", "100",
                    "--throttle", "100", "--quiet")
    assert r.returncode == 0 and '"tool":"writes"' in r.stdout, r.stderr
    bare = tmp_path / "bare.conf"
    bare.write_text("readEntryTimeoutSec=2\n")
    r = _bookie_cli("bench", "writes", "--client-conf", str(bare), "--time", "1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no ensemble" in r.stderr, r.stderr
