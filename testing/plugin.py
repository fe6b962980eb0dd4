"""pytest plugin of the bookie package (registered through the ``pytest11`` entry point).

It makes the fixtures of :mod:`bookie.testing` available to any test suite that has the
package installed.
"""

from bookie.testing.fixtures import *  # noqa: F401,F403  (pytest discovers fixtures by name)
