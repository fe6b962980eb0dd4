"""bookie: a BookKeeper-style bookie appliance and its replication client.

The repository root is this package; its folders are the subpackages, one layer each (each
imports only the layers below it; docs/architecture.md, "Layers"):

- ``bookie.wire`` and ``bookie.metadata``: the wire protocol and the metadata stores (ground);
- ``bookie.workers``: the bookie itself (configuration, layout, on-disk formats, the workers);
- ``bookie.client``: the replication client;
- ``bookie.bench`` and ``bookie.testing``: benchmarks, and harnesses for users' own test suites;
- ``bookie.appliance``: the commands (supervisor, CLI, shell, localbookie).
"""

from bookie.compiled import choose as _choose

_choose()  # BOOKIE_PURE=1, or a stale build: the plain modules (bookie/compiled.py)


def _version() -> str:
    """The installed distribution's version: written once, in pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version  # lazy: importlib.metadata

    try:
        return version("bookie")
    except PackageNotFoundError:  # a checkout imported without being installed
        return "0+unknown"


def __getattr__(name: str):
    # ``__version__`` is read when asked for: importing the package stays instant (a Ctrl-C
    # at the start of ``bookie ...`` meets the console's handling, not this import).
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'bookie' has no attribute {name!r}")
