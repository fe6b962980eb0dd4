"""Shared fixtures of the test suite.  Keep each block self-contained, with a heading comment.

(The fixtures users' own suites get from the installed package live in bookie/testing/.)
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# -- Hypothesis: no wall-time limits -----------------------------------------------------------
# A property test asserts behaviour, never how fast an example ran: on a loaded machine (the
# suite at a load of 15 on 2 cores) the 200 ms default deadline and the "too slow" health check
# fail correct code.  Benchmarks measure time; tests do not.
settings.register_profile("bookie", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("bookie")


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the test item, so fixtures can tell in their teardown whether
    # the test failed (and then print the logs of the servers it used).
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(autouse=True)
def _restore_bookie_logger():
    # A CLI run in-process (``bookie.appliance.cli.main``) installs the log-line handler on the
    # ``bookie`` logger and stops propagation, as a real process should; put the logger back
    # after each test so later tests' ``caplog`` still sees the client's records.
    import logging
    logger = logging.getLogger("bookie")
    saved = (list(logger.handlers), logger.propagate, logger.level)
    yield
    logger.handlers[:] = saved[0]
    logger.propagate, logger.level = saved[1], saved[2]


def _failed(request) -> bool:
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


# -- ZooKeeper and metadata stores ------------------------------------------------------------
# One real ZooKeeper server (Debian's package) per test session; each test gets its own root
# ("chroot") in it, so tests never see each other's nodes.  A store is opened only where one was
# created: the URI fixtures below create theirs, except ``uncreated_metadata_uri``.

@pytest.fixture(scope="session")
def zookeeper_server():
    """The session's ZooKeeper server (bookie.testing.zookeeper.ZooKeeperServer)."""
    from bookie.testing.zookeeper import ZooKeeperServer
    server = ZooKeeperServer().start()
    yield server
    server.stop()


@pytest.fixture
def zk_root(zookeeper_server, request):
    """A fresh root path for this test in the session's ZooKeeper; prints the server log if the
    test fails."""
    root = zookeeper_server.chroot()
    yield root
    if _failed(request):
        print(f"--- ZooKeeper log tail ({zookeeper_server.hosts}) ---\n"
              f"{zookeeper_server.log_tail(4096)}")


def _create_store(uri: str) -> str:
    """Initialise the store at ``uri`` (as ``bookie shell metaformat`` does) and return the URI:
    bookies, clients and the shell refuse a URI that names no store."""
    from bookie.metadata import open_metadata
    open_metadata(uri, timeout_s=10.0, create=True).close()
    return uri


@pytest.fixture
def zk_uri(zookeeper_server, zk_root):
    """zk://127.0.0.1:PORT/<fresh root> of an empty, initialised store (hierarchical layout)."""
    return _create_store(zookeeper_server.uri(zk_root))


@pytest.fixture(params=["lmdb", "zk", "zk+flat"])
def uncreated_metadata_uri(request, tmp_path):
    """A URI that names no store yet, once per backend (and ZooKeeper layout)."""
    if request.param == "lmdb":
        return f"lmdb://{tmp_path}/metadata"
    server = request.getfixturevalue("zookeeper_server")
    return server.uri(request.getfixturevalue("zk_root"), scheme=request.param)


@pytest.fixture
def metadata_uri(uncreated_metadata_uri):
    """A URI of an empty, initialised metadata store, once per backend (and ZooKeeper layout)."""
    return _create_store(uncreated_metadata_uri)


@pytest.fixture
def metadata_store(metadata_uri):
    """An open store on ``metadata_uri`` (fast watch polling and short leases for the
    embedded store), closed after the test."""
    from bookie.metadata import open_metadata
    store = open_metadata(metadata_uri, timeout_s=10.0, lease_ms=1000, watch_poll_s=0.02)
    yield store
    store.close()


# -- Spark ------------------------------------------------------------------------------------
# One local Spark session and one set of bookies for every Spark test of the session: Spark
# starts in 7-11 s, so the tests share it.  local[2,4]: two cores, and a failed task is retried
# (up to 4 attempts), as on a cluster; plain local[N] never retries.

@pytest.fixture(scope="session")
def spark_session(tmp_path_factory):
    """A SparkSession (local[2,4]) with the bookie format registered."""
    import pyspark  # noqa: E402,F401  (tests/setup.sh installs the spark extra)
    import os
    import sys
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must import this venv's bookie
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    from bookie.spark import register
    spark = (SparkSession.builder.master("local[2,4]").appName("bookie-tests")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
             .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def spark_bookies(request):
    """Three LocalBookies (embedded metadata store) shared by the Spark tests; prints their
    log tails if any test failed."""
    from bookie.testing import LocalBookies
    with LocalBookies(3) as bookies:
        failed_before = request.session.testsfailed
        yield bookies
        if request.session.testsfailed > failed_before:
            for i in range(bookies.n):
                try:
                    print(f"--- bookie {i} log tail ---\n{bookies.log(i)[-3000:]}")
                except Exception as exc:  # noqa: BLE001 - best effort diagnostics
                    print(f"(no log for bookie {i}: {exc})")
