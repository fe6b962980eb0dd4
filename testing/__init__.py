"""Test harnesses shipped with the package, for this project's suite and for users' own.

- :class:`LocalBookies`: N real bookies on 127.0.0.1 (context manager).
- ``bookie.testing.zookeeper``: a real ZooKeeper server in a temp dir.
- ``bookie.testing.nemesis``: seeded fault injection with a checker (docs/testing.md).
- pytest fixtures (registered automatically through the ``pytest11`` entry point): see
  :mod:`bookie.testing.client_fixtures`.
"""

from bookie.testing.localbookies import LocalBookieError, LocalBookies

__all__ = ["LocalBookies", "LocalBookieError"]
