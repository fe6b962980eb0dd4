"""The idle strategy of the bookie's loops (bookie.core.idle): spin, then yield, then park."""

import pytest

from bookie.core.idle import PARK, SPIN, YIELD, Backoff


def test_spins_then_yields_then_parks_within_its_time():
    idle = Backoff(0.25)  # seconds that add up exactly in binary
    idle.start(10.0)
    assert idle.step(10.0) == SPIN
    assert idle.step(10.0625) == SPIN
    assert idle.step(10.125) == YIELD
    assert idle.step(10.1875) == YIELD
    assert idle.step(10.25) == PARK
    idle.start(20.0)  # each wait starts its own time
    assert idle.step(20.0625) == SPIN


def test_zero_parks_at_once_and_a_negative_time_is_refused():
    idle = Backoff(0.0)
    assert not idle
    idle.start(1.0)
    assert idle.step(1.0) == PARK
    with pytest.raises(ValueError, match="negative"):
        Backoff(-1e-6)
