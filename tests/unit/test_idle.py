"""The idle strategy of the bookie's loops (bookie.core.idle): spin, then yield, then park."""

import math

import pytest

from bookie.core.idle import PARK, PREEMPTED_S, SPIN, SPIN_SHARE, YIELD, Backoff


def test_spins_then_yields_then_parks_within_its_time():
    idle = Backoff(2 ** -10)  # seconds that add up exactly in binary (~977 us)
    idle.start(10.0)
    t = 10.0
    steps = []
    while not steps or steps[-1] != PARK:
        steps.append(idle.step(t))
        t += 2 ** -15  # a look every ~31 us
    spins = math.ceil(32 * SPIN_SHARE)
    assert steps == [SPIN] * spins + [YIELD] * (32 - spins) + [PARK]
    idle.start(20.0)  # each wait starts its own time
    assert idle.step(20.0 + 2 ** -15) == SPIN
    assert idle.preempted == 0


def test_a_spin_that_lost_its_cpu_parks_at_once():
    idle = Backoff(0.01)
    idle.start(1.0)
    assert idle.step(1.0 + 2e-6) == SPIN
    assert idle.step(1.0 + 2e-6 + PREEMPTED_S * 2) == PARK  # descheduled between two looks
    assert idle.preempted == 1


def test_zero_parks_at_once_and_a_negative_time_is_refused():
    idle = Backoff(0.0)
    assert not idle
    idle.start(1.0)
    assert idle.step(1.0) == PARK
    with pytest.raises(ValueError, match="negative"):
        Backoff(-1e-6)


def test_no_spin_while_the_load_fills_the_cores():
    idle = Backoff(0.01)
    idle.observe_load(2.0, 2)
    idle.start(1.0)
    assert idle.step(1.0) == PARK
    idle.observe_load(1.5, 2)
    assert idle.step(1.0) == SPIN
