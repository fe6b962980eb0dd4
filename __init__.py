"""bookie: a BookKeeper-style bookie appliance and its replication client.

The repository root is this package; its folders are the subpackages:
``bookie.appliance`` (supervisor, configuration, CLI, metadata stores),
``bookie.workers`` (journal, add, read and GC workers), ``bookie.client``
(the replication client), ``bookie.bench`` (benchmarks) and ``bookie.testing``
(fixtures for users' own test suites).
"""

__version__ = "0.1.0"
