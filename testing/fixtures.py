"""pytest fixtures for users' own test suites."""

from __future__ import annotations

import pytest

from bookie.appliance.localbookie import LocalBookies


@pytest.fixture(scope="module")
def bookie_ensemble(request):
    """A module-scoped ensemble of 3 local bookies on an embedded metadata store.

    Override the size with ``@pytest.mark.bookie_ensemble(n=5)`` on the module's tests.
    """
    marker = request.node.get_closest_marker("bookie_ensemble")
    n = marker.kwargs.get("n", 3) if marker else 3
    with LocalBookies(n) as ens:
        yield ens
