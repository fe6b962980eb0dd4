"""pytest plugin of the bookie package (registered through the ``pytest11`` entry point).

It makes the fixtures of :mod:`bookie.testing.fixtures` available to any test suite that has
the package installed.
"""

from bookie.testing.fixtures import bookie_ensemble  # noqa: F401  (pytest finds fixtures by name)
