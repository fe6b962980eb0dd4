"""pytest fixtures for users' test suites: real local bookies and a connected client.

    # in your test module (or conftest.py):
    from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401

    def test_roundtrip(bookkeeper):
        lh = bookkeeper.create_ledger(3, 2, 2, password=b"pw")
        assert lh.add_entry(b"hello") == 0

``bookkeeper_ensemble`` starts the bookies once per test module (``LocalBookies``, embedded
LMDB metadata store, temp dir removed afterwards) and prints their log tails when a test of
the module failed; ``bookkeeper`` is a ``BookKeeper`` connected to it, also per module.
Size and client settings come from a module-level dict (or the same keys on a
``pytest.mark.bookkeeper(...)`` marker, registered when this module is loaded as a plugin)::

    BOOKKEEPER_OPTIONS = {"bookies": 5, "config": {"addEntryTimeout": 1}}
"""

from __future__ import annotations

import pytest

from bookie.client import BookKeeper

DEFAULT_BOOKIES = 3
# Quick failure detection suits tests: a killed bookie is noticed in about a second.
TEST_CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}


def _marker(request):
    marker = request.node.get_closest_marker("bookkeeper")
    if marker:
        return marker.kwargs
    return getattr(request.module, "BOOKKEEPER_OPTIONS", None) or {}


@pytest.fixture(scope="module")
def bookkeeper_ensemble(request):
    """``bookie.testing.LocalBookies`` of N bookies (default 3) for the test module."""
    from bookie.testing import LocalBookies
    opts = _marker(request)
    with LocalBookies(opts.get("bookies", DEFAULT_BOOKIES)) as ensemble:
        failed_before = request.session.testsfailed
        yield ensemble
        if request.session.testsfailed > failed_before:
            for i in range(ensemble.n):
                try:
                    print(f"--- bookie {i} ({ensemble.bookies[i]}) log tail ---\n"
                          f"{ensemble.log(i)[-4000:]}")
                except Exception as exc:  # noqa: BLE001 - best effort diagnostics
                    print(f"(no log for bookie {i}: {exc})")


@pytest.fixture(scope="module")
def bookkeeper(request, bookkeeper_ensemble):
    """A ``BookKeeper`` client connected to ``bookkeeper_ensemble``; closed after the module."""
    config = dict(TEST_CONFIG)
    config.update(_marker(request).get("config", {}))
    with BookKeeper(bookkeeper_ensemble.metadata_uri, config) as bk:
        yield bk


def pytest_configure(config):  # picked up when this module is loaded as a plugin
    config.addinivalue_line("markers", "bookkeeper(bookies=3, config=None): size and client "
                                       "settings of the bookkeeper fixtures")
