"""pytest fixtures for users' test suites: real local bookies and a connected client.

The plugin (:mod:`bookie.testing.plugin`, registered through the ``pytest11`` entry point when
the package is installed) provides them without any import; with plugin autoloading off, name
it in a ``conftest.py``: ``pytest_plugins = ["bookie.testing.plugin"]``.

    BOOKKEEPER_OPTIONS = {"bookies": 4, "bookie_config": {"journalMaxGroupWaitMSec": 0},
                          "client_config": {"addEntryTimeout": 1}}

    def test_roundtrip(bookkeeper):
        lh = bookkeeper.create_ledger(3, 2, 2, password=b"pw")
        assert lh.add_entry(b"hello") == 0

Theory of operation:

- ``bookkeeper_ensemble`` is a ``LocalBookies`` (embedded LMDB metadata store, temp dir).  The
  bookies are started once per test module and shared by its tests.  Before each test the
  fixture puts the ensemble back as a test expects it: a bookie an earlier test killed or
  stopped is started again and a bookie it made read-only is made writable again, so each test
  begins with every bookie running and writable, whatever the test before it did.
- ``bookkeeper`` is a ``BookKeeper`` client connected to it, new for each test (opening one
  costs milliseconds; a fresh one carries no state of a bookie an earlier test killed).
- Options come from the module's ``BOOKKEEPER_OPTIONS`` dict, then from ``bookkeeper`` markers,
  farthest first (module ``pytestmark``, class, function); dict options merge key by key.  A
  test whose options ask for other bookies (``bookies`` or ``bookie_config``) than its module's
  gets an ensemble of its own for that test alone.
- Any option the fixtures do not know, a marker with positional arguments, a bookie key the
  bookie does not know (or one the harness sets per bookie), or a client key the client does
  not know, fails the test's set-up with one line naming it; no bookie is started for it.
- A failing test's report carries the log tails of the bookies it used (section "bookie logs").
"""

from __future__ import annotations

import difflib
import time
from typing import Any, Iterator

import pytest

from bookie.client import BookKeeper
from bookie.client.config import ClientConfig
from bookie.client.errors import InvalidArgumentError
from bookie.metadata import open_metadata
from bookie.testing.localbookies import LocalBookieError, LocalBookies
from bookie.workers.config import KEY_BY_NAME, BookieConfig, ConfigError, nearest_key

DEFAULT_BOOKIES = 3
# Quick failure detection suits tests: a killed bookie is noticed in about two seconds.
TEST_CONFIG = {"addEntryTimeout": 2.0, "readTimeout": 2.0, "operationTimeout": 60.0}
# What each option means; "config" is the first name of "client_config", still accepted.
OPTIONS = {
    "bookies": "how many bookies (default 3)",
    "bookie_config": "bookie configuration keys for every bookie, as in bookie.conf",
    "client_config": "client configuration keys of the bookkeeper fixture",
    "config": "the same as client_config",
}
# Set by LocalBookies for each bookie: a test cannot choose them.
HARNESS_KEYS = ("bookiePort", "journalDirectory", "journalDirectories", "ledgerDirectories", "metadataServiceUri",
                "zkServers", "zkLedgersRootPath")
RESTORE_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 4000


class FixtureOptionError(ValueError):
    """Options the bookkeeper fixtures cannot honour; the message is one line naming where."""


# -- options (pure) ----------------------------------------------------------------------------

def merge_options(layers: list[tuple[str, Any]]) -> dict[str, Any]:
    """Merge option layers, farthest first, into ``{"bookies", "bookie_config", "client_config"}``.

    Args:
        layers: ``(where, options)`` pairs; ``where`` names the source in messages
            ("BOOKKEEPER_OPTIONS of test_x", "pytest.mark.bookkeeper on test_y").
    Returns:
        The options, every one checked; a later layer's dict option updates the earlier one's.
    Raises:
        FixtureOptionError: the first unknown option, bad value or unknown key.
    """
    opts: dict[str, Any] = {"bookies": DEFAULT_BOOKIES, "bookie_config": {},
                            "client_config": dict(TEST_CONFIG)}
    for where, layer in layers:
        if not isinstance(layer, dict):
            raise FixtureOptionError(f"{where}: expected a dict of options, got {layer!r}")
        if "config" in layer and "client_config" in layer:
            raise FixtureOptionError(f"{where}: give client_config or config, not both")
        for name, value in layer.items():
            if name not in OPTIONS:
                near = _nearest(name, OPTIONS)
                raise FixtureOptionError(
                    f"{where}: unknown option {name!r}{near} (known: {', '.join(OPTIONS)})")
            if name == "bookies":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise FixtureOptionError(f"{where}: bookies must be an integer >= 1, "
                                             f"got {value!r}")
                opts["bookies"] = value
                continue
            if not isinstance(value, dict):
                raise FixtureOptionError(f"{where}: {name} must be a dict, got {value!r}")
            target = "client_config" if name == "config" else name
            opts[target] = {**opts[target], **value}
        _check_bookie_config(where, opts["bookie_config"])
        _check_client_config(where, opts["client_config"])
    return opts


def ensemble_options(opts: dict[str, Any]) -> tuple:
    """What decides which bookies a test needs: two tests with equal values can share them."""
    return opts["bookies"], sorted((k, str(v)) for k, v in opts["bookie_config"].items())


def _nearest(name: str, known) -> str:
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _check_bookie_config(where: str, bookie_config: dict) -> None:
    for key in bookie_config:
        if key in HARNESS_KEYS:
            raise FixtureOptionError(f"{where}: bookie_config: {key} is set by the harness for "
                                     f"each bookie")
        if key not in KEY_BY_NAME:
            near = nearest_key(key)
            hint = f" (did you mean {near!r}?)" if near else ""
            raise FixtureOptionError(f"{where}: bookie_config: unknown bookie configuration key "
                                     f"{key!r}{hint}")
    raw = {k: str(v) for k, v in bookie_config.items()}
    raw.setdefault("ledgerDirectories", "/placeholder")  # only the given keys are checked here
    try:
        BookieConfig.from_mapping(raw, check_dirs=False)
    except ConfigError as e:
        raise FixtureOptionError(f"{where}: bookie_config: {e}") from None


def _check_client_config(where: str, client_config: dict) -> None:
    try:
        ClientConfig.build(client_config)
    except InvalidArgumentError as e:
        raise FixtureOptionError(f"{where}: client_config: {e}") from None


# -- where the options come from ---------------------------------------------------------------

def _layers(request: pytest.FixtureRequest, node: pytest.Item | pytest.Collector) -> list:
    module = node.getparent(pytest.Module) if not isinstance(node, pytest.Module) else node
    layers = []
    module_options = getattr(module.obj, "BOOKKEEPER_OPTIONS", None)
    if module_options is not None:
        layers.append((f"BOOKKEEPER_OPTIONS of {module.name}", module_options))
    for owner, mark in reversed(list(node.iter_markers_with_node("bookkeeper"))):
        where = f"pytest.mark.bookkeeper on {owner.name}"
        if mark.args:
            raise FixtureOptionError(f"{where}: takes keyword options only "
                                     f"({', '.join(OPTIONS)}), got {mark.args!r}")
        layers.append((where, mark.kwargs))
    return layers


def options_for(request: pytest.FixtureRequest, node) -> dict[str, Any]:
    """The checked options of ``node`` (a test or a module); a bad one fails the set-up in one
    line, without a traceback."""
    try:
        return merge_options(_layers(request, node))
    except FixtureOptionError as e:
        pytest.fail(str(e), pytrace=False)


# -- the ensemble between tests ----------------------------------------------------------------

def restore(ensemble, timeout_s: float = RESTORE_TIMEOUT_S) -> None:
    """Bring every bookie of ``ensemble`` back to running and writable, and wait until the
    metadata store lists all of them as writable.

    Raises:
        bookie.testing.LocalBookieError: a bookie did not start again;
        TimeoutError: a bookie is still not listed as writable after ``timeout_s``.
    """
    stopped = [i for i in range(ensemble.n) if not ensemble.running(i)]
    for i in stopped:  # all at once: each start waits out its old registration lease
        ensemble.start(i, wait=False)
    for i in stopped:
        ensemble.wait_serving(i)
    deadline = time.monotonic() + timeout_s
    with open_metadata(ensemble.metadata_uri) as store:
        for bookie_id in store.list_bookies(readonly=True):
            if bookie_id in ensemble.bookies:
                ensemble.set_readonly(ensemble.bookies.index(bookie_id), False)
        while True:
            readonly = set(store.list_bookies(readonly=True)) & set(ensemble.bookies)
            missing = set(ensemble.bookies) - set(store.list_bookies())
            if not readonly and not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"bookies not writable again after {timeout_s} s: "
                                   f"read-only {sorted(readonly)}, not registered "
                                   f"{sorted(missing - readonly)}")
            time.sleep(0.05)


def log_tails(ensemble) -> str:
    """The last lines of every bookie's log, for a failing test's report."""
    parts = []
    for i in range(ensemble.n):
        try:
            tail = ensemble.log(i)[-LOG_TAIL_BYTES:]
        except Exception as exc:  # noqa: BLE001 - diagnostics must not hide the failure
            tail = f"(no log: {exc})"
        parts.append(f"--- bookie {i} ({ensemble.bookies[i]}) ---\n{tail}")
    return "\n".join(parts)


def _start(opts: dict[str, Any]) -> LocalBookies:
    try:
        return LocalBookies(opts["bookies"], conf=opts["bookie_config"]).__enter__()
    except LocalBookieError as e:
        pytest.fail(f"bookkeeper_ensemble: the bookies did not start: {e}", pytrace=False)


# -- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bookkeeper_module_ensemble(request) -> Iterator:
    """The bookies a module's tests share (its ``BOOKKEEPER_OPTIONS`` and module markers);
    tests use ``bookkeeper_ensemble``, which restores them before each test."""
    ensemble = _start(options_for(request, request.node))
    try:
        yield ensemble
    finally:
        ensemble.close()


@pytest.fixture
def bookkeeper_ensemble(request) -> Iterator:
    """A ``bookie.testing.LocalBookies`` with every bookie running and writable.

    The module's shared bookies when this test's options ask for the same bookies as its
    module's, else bookies started for this test alone.  Whatever an earlier test did to the
    shared bookies (kill, stop, set_readonly) is undone before this one starts.
    """
    opts = options_for(request, request.node)
    module_opts = options_for(request, request.node.getparent(pytest.Module))
    if ensemble_options(opts) == ensemble_options(module_opts):
        ensemble = request.getfixturevalue("bookkeeper_module_ensemble")
        # Undone before the next test rather than after this one: no restart after a module's
        # last test, whose bookies are about to stop anyway.
        try:
            restore(ensemble)
        except (LocalBookieError, TimeoutError) as e:
            pytest.fail(f"bookkeeper_ensemble: the module's bookies could not be restored "
                        f"after an earlier test: {e}", pytrace=False)
        yield ensemble
    else:
        ensemble = _start(opts)
        try:
            yield ensemble
        finally:
            ensemble.close()


@pytest.fixture
def bookkeeper(request, bookkeeper_ensemble) -> Iterator[BookKeeper]:
    """A ``bookie.client.BookKeeper`` connected to ``bookkeeper_ensemble``, closed after the
    test; its configuration is the options' ``client_config`` over quick test timeouts."""
    opts = options_for(request, request.node)
    with BookKeeper(bookkeeper_ensemble.metadata_uri, opts["client_config"]) as bk:
        yield bk


def pytest_configure(config) -> None:
    """Register the marker (this runs when the module is loaded as a plugin)."""
    config.addinivalue_line(
        "markers", "bookkeeper(bookies=3, bookie_config=None, client_config=None): the bookies "
                   "and client settings of the bookkeeper fixtures for this test")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the bookies gets their log tails as a report section."""
    outcome = yield
    report = outcome.get_result()
    ensemble = getattr(item, "funcargs", {}).get("bookkeeper_ensemble")
    if ensemble is not None and report.failed and call.when in ("call", "setup"):
        report.sections.append(("bookie logs", log_tails(ensemble)))
