"""Write sets, ack quorums and fence/LAC coverage against brute-force oracles (every E <= 7)."""

import itertools

import pytest

from bookie.client.protocol.quorum import (Coverage, ack_quorum_reached, check_quorums,
                                           in_write_set, write_set, write_sets)

CONFIGS = [(e, w, a) for e in range(1, 8) for w in range(1, e + 1) for a in range(1, w + 1)]


def oracle_write_set(entry_id, e, w):
    ring = list(range(e)) * 2
    return ring[entry_id % e: entry_id % e + w]


def oracle_covered(e, w, a, answered):
    # Conclusive iff no ack quorum (any Qa bookies of any write set) lies wholly outside the
    # answered set, i.e. no quorum could still ack an add without having seen our fence.
    for start in range(e):
        ws = oracle_write_set(start, e, w)
        for ack in itertools.combinations(ws, a):
            if not set(ack) & answered:
                return False
    return True


def subsets(e):
    for mask in range(1 << e):
        yield {p for p in range(e) if mask >> p & 1}


def test_creation_invariant_rejects_impossible_quorums():
    check_quorums(3, 2, 2)
    for bad in [(2, 3, 2), (3, 2, 3), (3, 3, 0), (0, 0, 0)]:
        with pytest.raises(ValueError, match="ensemble_size >= write_quorum"):
            check_quorums(*bad)


def test_write_set_matches_protocol_table():
    # bookkeeperProtocol: E=4, Qw=3: entry 2 -> B3, B4, B1
    assert [write_set(e, 4, 3) for e in range(6)] == [
        (0, 1, 2), (1, 2, 3), (2, 3, 0), (3, 0, 1), (0, 1, 2), (1, 2, 3)]


@pytest.mark.parametrize("e,w,a", CONFIGS)
def test_write_sets_and_membership_match_oracle(e, w, a):
    assert len({frozenset(ws) for ws in write_sets(e, w)}) == (1 if w == e else e)
    for entry_id in range(3 * e + 1):
        ws = write_set(entry_id, e, w)
        assert list(ws) == oracle_write_set(entry_id, e, w)
        for p in range(e):
            assert in_write_set(p, entry_id, e, w) == (p in ws)


@pytest.mark.parametrize("e,w,a", CONFIGS)
def test_coverage_matches_oracle_for_every_response_subset(e, w, a):
    for answered in subsets(e):
        cov = Coverage(e, w, a)
        for p in answered:
            cov.answer(p)
        assert cov.covered == oracle_covered(e, w, a, answered), (e, w, a, answered)
        # hopeless: with these positions failed, even every other one answering is not enough
        failed = answered
        cov2 = Coverage(e, w, a)
        for p in failed:
            cov2.fail(p)
        assert cov2.hopeless == (not oracle_covered(e, w, a, set(range(e)) - failed))


@pytest.mark.parametrize("e,w,a", CONFIGS)
def test_ack_quorum_matches_oracle_for_every_ack_subset(e, w, a):
    for entry_id in range(e):
        ws = set(oracle_write_set(entry_id, e, w))
        for acked in subsets(e):
            assert ack_quorum_reached(acked, entry_id, e, w, a) == (len(acked & ws) >= a)


def test_coverage_of_fence_means_no_ack_quorum_can_form_without_a_fenced_bookie():
    # The protocol's reason for (Qw - Qa) + 1: after coverage, every possible ack quorum of
    # every write set contains a bookie that answered the fence.
    for e, w, a in CONFIGS:
        for answered in subsets(e):
            cov = Coverage(e, w, a)
            for p in answered:
                cov.answer(p)
            if cov.covered:
                unfenced = set(range(e)) - answered
                for entry_id in range(e):
                    assert not ack_quorum_reached(unfenced, entry_id, e, w, a)
