"""pytest plugin of the bookie package (registered through the ``pytest11`` entry point).

Any test suite with the package installed gets the fixtures of
:mod:`bookie.testing.client_fixtures` (``bookkeeper_ensemble``, ``bookkeeper``), the
``bookkeeper`` marker and the bookie log tails in failing tests' reports, without importing
anything.  With plugin autoloading off (``PYTEST_DISABLE_PLUGIN_AUTOLOAD``), a ``conftest.py``
names it: ``pytest_plugins = ["bookie.testing.plugin"]``.
"""

from bookie.testing.client_fixtures import (  # noqa: F401  (pytest finds them by name)
    bookkeeper, bookkeeper_ensemble, bookkeeper_module_ensemble, pytest_configure,
    pytest_runtest_makereport)
