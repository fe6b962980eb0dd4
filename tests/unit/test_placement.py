"""Rack- and region-aware placement (client/protocol/placement.py), pure: every write quorum
spans as many racks (regions) as there are, checked against a brute-force oracle over small
clusters; a replacement keeps the spread and prefers the lost bookie's rack; enforcement names
the racks."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bookie.client.protocol.placement import Placement, check_location, write_sets


def cluster(racks: list[int], regions: int = 1) -> dict[str, str]:
    """bookie id -> location: racks[i] bookies in rack i, racks dealt over the regions."""
    out = {}
    n = 0
    for r, count in enumerate(racks):
        for _ in range(count):
            out[f"b{n}:3181"] = f"/region{r % regions}/rack{r}"
            n += 1
    return out


def best_spread(placement: Placement, bookies, e: int, qw: int) -> int:
    """The oracle: the highest spread of any ensemble of E of ``bookies``."""
    best = 0
    for combo in itertools.combinations(bookies, e):
        for perm in itertools.permutations(combo):
            best = max(best, placement.spread(perm, qw))
            if best == min(qw, len({placement.domain(b) for b in bookies})):
                return best
    return best


@settings(max_examples=150, deadline=None)
@given(racks=st.lists(st.integers(1, 3), min_size=1, max_size=4), e=st.integers(1, 5),
       qw_less=st.integers(0, 4), seed=st.integers(0, 1000))
@example(racks=[1, 1, 3], e=5, qw_less=2, seed=0)  # rack C's three must sit apart: C A C B C
def test_chosen_ensembles_are_as_spread_as_the_oracle_allows(racks, e, qw_less, seed):
    locations = cluster(racks)
    bookies = sorted(locations)
    qw = max(1, e - qw_less)
    placement = Placement("rackaware", locations)
    chosen = placement.choose(e, qw, bookies, random.Random(seed))
    if len(bookies) < e:
        assert chosen is None
        return
    assert len(set(chosen)) == e and set(chosen) <= set(bookies)
    assert placement.spread(chosen, qw) == best_spread(placement, bookies, e, qw)


def test_regionaware_spreads_over_regions_not_racks():
    locations = cluster([2, 2, 2, 2], regions=2)  # racks 0, 2 in region0; 1, 3 in region1
    placement = Placement("regionaware", locations)
    for seed in range(20):
        ens = placement.choose(4, 2, sorted(locations), random.Random(seed))
        assert placement.spread(ens, 2) == 2
        assert all(len({locations[ens[p]].split("/")[1] for p in ws}) == 2
                   for ws in write_sets(4, 2))


def test_a_replacement_keeps_the_spread_and_prefers_the_lost_bookies_rack():
    locations = {"a1:1": "/r/a", "a2:1": "/r/a", "b1:1": "/r/b", "b2:1": "/r/b", "c1:1": "/r/c"}
    placement = Placement("rackaware", locations)
    ensemble = ("a1:1", "b1:1", "c1:1")
    for seed in range(20):
        new = placement.replace(ensemble, [2], 2, sorted(locations), random.Random(seed))
        # rack c is gone with c1: position 2 sits between b1 and a1 (wrapping), so a2 and b2
        # each leave one write set on one rack - a tie, broken by chance
        assert new[:2] == ("a1:1", "b1:1") and new[2] in ("a2:1", "b2:1")
    locations["c2:1"] = "/r/c"
    for seed in range(20):
        new = Placement("rackaware", locations).replace(ensemble, [2], 2, sorted(locations),
                                                        random.Random(seed))
        assert new[2] == "c2:1"  # the lost bookie's rack, when it keeps the spread too


def test_enforcement_names_the_racks():
    locations = {"a1:1": "/r/a", "a2:1": "/r/a", "a3:1": "/r/a"}
    placement = Placement("rackaware", locations, min_domains=2, enforce=True)
    ens = placement.choose(3, 2, sorted(locations), random.Random(1))
    why = placement.short_of(ens, 2)
    assert why and "spans only 1 of the 2 racks" in why
    assert placement.domains_of(sorted(locations)) == "/r/a (3)"
    assert Placement("rackaware", locations, enforce=False).short_of(ens, 2) is None


def test_bookies_without_a_location_share_the_default_rack_and_default_is_random():
    placement = Placement("rackaware", {})
    assert placement.spread(("x:1", "y:1"), 2) == 1
    default = Placement("default")
    assert default.spread(("x:1", "y:1"), 2) == 2  # no domains: every bookie its own


@pytest.mark.parametrize("location, ok", [("/eu/r1", True), ("eu/r1", False), ("/eu", False),
                                          ("/eu/r1/x", False), ("//r1", False)])
def test_locations_are_region_and_rack(location, ok):
    assert (check_location(location) is None) is ok
