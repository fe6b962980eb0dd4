"""The safe-to-stop rule (core/safe_to_stop.py), as pure logic: write sets of closed and open
ledgers, and each category against hand-worked cases and a brute-force oracle."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.core.safe_to_stop import check_stop, ledger_effects, write_sets


@dataclasses.dataclass
class L:
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    last_entry_id: int
    fragments: list


def test_write_sets_of_a_closed_ledger_are_those_holding_entries():
    led = L(3, 2, 2, 1, [(0, ["a", "b", "c"])])  # entries 0, 1
    assert [ws for ws, _ in write_sets(led, closed=True)] == [["a", "b"], ["b", "c"]]
    empty = L(3, 2, 2, -1, [(0, ["a", "b", "c"])])
    assert list(write_sets(empty, closed=True)) == []
    two = L(2, 2, 1, 4, [(0, ["a", "b"]), (5, ["a", "c"])])  # the second fragment is empty
    assert [ws for ws, _ in write_sets(two, closed=True)] == [["a", "b"], ["b", "a"]]


def test_write_sets_of_an_open_ledger_include_the_whole_last_ensemble():
    led = L(3, 2, 2, -1, [(0, ["a", "b", "c"])])
    assert [(ws, tail) for ws, tail in write_sets(led, closed=False)] == [
        (["a", "b"], True), (["b", "c"], True), (["c", "a"], True)]


def test_a_healthy_cluster_with_spare_copies_is_safe():
    led = L(3, 3, 2, 9, [(0, ["a", "b", "c"])])
    verdict = check_stop([(1, led, True)], live={"a", "b", "c", "d"}, stopping={"a"})
    assert verdict.safe and verdict.as_dict()["bookies"] == ["a"]


def test_a_ledger_whose_other_copies_are_down_loses_its_last_copy():
    led = L(2, 2, 2, 9, [(0, ["a", "b"])])
    verdict = check_stop([(7, led, True)], live={"a", "c"}, stopping={"a"})  # b is down
    assert not verdict.safe
    assert verdict.last_copy == [7] and verdict.unreadable == [7]
    assert verdict.below_ack_quorum == [7]


def test_a_write_set_on_the_stopped_rack_becomes_unreadable():
    led = L(3, 2, 2, 9, [(0, ["a", "b", "c"])])
    verdict = check_stop([(3, led, True)], live={"a", "b", "c"}, stopping={"a", "b"})
    assert verdict.last_copy == [3] and verdict.unreadable == [3]


def test_an_open_ledger_that_cannot_be_fenced_is_unreadable_without_losing_a_copy():
    led = L(3, 3, 2, 5, [(0, ["a", "b", "c"])])  # recovery needs Qw-Qa+1 = 2 per write set
    effects = ledger_effects(led, closed=False, live={"a", "b", "c"}, stopping={"a", "b"})
    assert effects == {"unreadable", "below_ack_quorum", "stalled"}
    assert ledger_effects(led, closed=True, live={"a", "b", "c"}, stopping={"a", "b"}) == {
        "below_ack_quorum"}


def test_bookies_outside_every_ensemble_change_nothing():
    led = L(2, 2, 2, 9, [(0, ["a", "b"])])
    assert check_stop([(1, led, True)], live={"a", "b", "z"}, stopping={"z", "y"}).safe


def test_a_rolling_restart_accepts_reduced_redundancy_alone_and_strict_refuses_it():
    closed = L(3, 2, 2, 9, [(0, ["a", "b", "c"])])  # Qw = Qa: any single stop is below Qa
    rolling = check_stop([(4, closed, True)], live={"a", "b", "c"}, stopping={"a"})
    assert rolling.safe and rolling.reduced_redundancy == [4] and rolling.below_ack_quorum == [4]
    strict = check_stop([(4, closed, True)], live={"a", "b", "c"}, stopping={"a"}, strict=True)
    assert not strict.safe and strict.as_dict()["strict"] is True


def test_an_open_ledger_goes_on_only_with_a_spare_writable_bookie():
    led = L(3, 2, 2, 5, [(0, ["a", "b", "c"])])
    no_spare = check_stop([(5, led, False)], live={"a", "b", "c"}, stopping={"a"})
    assert not no_spare.safe and no_spare.stalled == [5] and no_spare.reduced_redundancy == []
    spare = check_stop([(5, led, False)], live={"a", "b", "c", "d"}, stopping={"a"})
    assert spare.safe and spare.reduced_redundancy == [5]
    read_only_spare = check_stop([(5, led, False)], live={"a", "b", "c", "d"}, stopping={"a"},
                                 writable={"a", "b", "c"})  # d takes no new entries
    assert read_only_spare.stalled == [5]


def test_a_last_copy_stays_unsafe_for_a_rolling_restart():
    led = L(2, 2, 2, 9, [(0, ["a", "b"])])
    verdict = check_stop([(7, led, True)], live={"a", "c"}, stopping={"a"})  # b is down
    assert not verdict.safe and verdict.reduced_redundancy == []


@settings(max_examples=200, deadline=None)
@given(e=st.integers(1, 4), data=st.data())
def test_the_rule_matches_a_brute_force_oracle_entry_by_entry(e, data):
    qw = data.draw(st.integers(1, e))
    qa = data.draw(st.integers(1, qw))
    names = ["a", "b", "c", "d", "e", "f"]
    ensemble = data.draw(st.permutations(names).map(lambda p: list(p[:e])))
    last = data.draw(st.integers(-1, 8))
    live = set(data.draw(st.sets(st.sampled_from(names))))
    stopping = set(data.draw(st.sets(st.sampled_from(names), min_size=1)))
    led = L(e, qw, qa, last, [(0, ensemble)])
    got = ledger_effects(led, closed=True, live=live, stopping=stopping)
    want = set()
    for entry in range(last + 1):  # every stored entry, one by one
        ws = [ensemble[(entry + k) % e] for k in range(qw)]
        if not stopping.intersection(ws):
            continue
        before = sum(b in live for b in ws)
        after = sum(b in live and b not in stopping for b in ws)
        if after == 0:
            want.add("unreadable")
            if before:
                want.add("last_copy")
        if after < qa:
            want.add("below_ack_quorum")
    assert got == want
