"""pytest plugin of the bookie package (registered through the ``pytest11`` entry point).

Any test suite with the package installed gets the fixtures of
:mod:`bookie.testing.client_fixtures` (``bookkeeper_ensemble``, ``bookkeeper``) and the
``bookkeeper`` marker, without importing anything.
"""

from bookie.testing.client_fixtures import (  # noqa: F401  (pytest finds them by name)
    bookkeeper, bookkeeper_ensemble, pytest_configure)
