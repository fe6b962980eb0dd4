"""Autorecovery's pure decisions (bookie.autorecovery.rules): membership and the delay, what
the auditor marks or reports, and that a replication plan, carried out, leaves every entry of a
closed ledger on Qw live bookies that really hold it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from bookie.autorecovery import rules
from bookie.autorecovery.copier import RateLimiter
from bookie.client.protocol.quorum import write_set
from bookie.metadata.ledger import LedgerMetadata, LedgerState

POOL = [f"10.0.0.{i}:3181" for i in range(1, 10)]


def closed(E, Qw, Qa, fragments, last):
    return LedgerMetadata(E, Qw, Qa, state=LedgerState.CLOSED, last_entry_id=last,
                          fragments=fragments)


# -- membership --------------------------------------------------------------------------------

def test_a_bookie_back_before_the_delay_is_never_lost():
    m = rules.Membership(delay_s=10)
    m.observe(0, {"a", "b"})
    m.observe(1, {"a"})
    assert m.lost(9) == set()
    m.observe(9, {"a", "b"})
    assert m.lost(100) == set() and m.gone_since == {}


def test_a_bookie_gone_for_the_delay_is_lost_and_the_clock_starts_when_first_seen_gone():
    m = rules.Membership(delay_s=10)
    m.observe(5, {"a"}, known={"a", "z"})  # z named by a ledger, never seen registered
    assert m.lost(14) == set()
    assert m.lost(15) == {"z"}
    assert m.next_deadline(6) == 15


def test_a_bookie_never_seen_registered_waits_for_the_grace_as_well():
    m = rules.Membership(delay_s=0, unseen_grace_s=10)
    m.observe(0, {"a", "b"}, known={"c"})
    m.observe(1, {"a"}, known={"c"})
    assert m.lost(1) == {"b"}  # seen, then gone: the delay alone
    assert m.lost(9) == {"b"} and m.lost(10) == {"b", "c"}


# -- the auditor -------------------------------------------------------------------------------

def test_a_ledger_naming_a_lost_bookie_is_marked_missing_it():
    meta = closed(3, 2, 2, [(0, POOL[:3])], 99)
    audit = rules.audit_ledger(meta, {POOL[1]})
    assert audit.missing == (POOL[1],) and audit.lost_ranges == ()


def test_a_write_quorum_1_ledger_on_a_lost_bookie_is_lost_data_not_a_mark():
    meta = closed(3, 1, 1, [(0, POOL[:3])], 99)
    audit = rules.audit_ledger(meta, {POOL[1]})
    assert audit.lost_ranges == ((0, 99),)


def test_a_ledger_with_lost_and_healable_fragments_is_reported_and_marked_once_healed_not():
    both = closed(2, 1, 1, [(0, [POOL[0], POOL[1]]), (10, [POOL[0], POOL[2]])], 19)
    # fragment 0 holds entries whose only copy was on POOL[0]; so does fragment 10
    audit = rules.audit_ledger(both, {POOL[0]})
    assert audit.lost_ranges == ((0, 9), (10, 19)) and not audit.mark
    healable = closed(2, 2, 2, [(0, [POOL[0], POOL[1]]), (10, [POOL[2], POOL[3]])], 19)
    audit = rules.audit_ledger(healable, {POOL[0], POOL[1], POOL[2]})
    assert audit.lost_ranges == ((0, 9),) and audit.mark  # fragment 10 still has POOL[3]


def test_a_partial_loss_is_marked_for_what_has_a_copy_and_reported_for_the_rest():
    # (3, 2, 2) on A, B, C; B and C lost: entries e % 3 == 1 had both copies on B and C (gone),
    # the others still have a copy on A - marked, so that a worker copies them
    meta = closed(3, 2, 2, [(0, POOL[:3])], 29)
    audit = rules.audit_ledger(meta, {POOL[1], POOL[2]})
    assert audit.lost_ranges == ((0, 29),) and audit.mark
    heals = rules.plan_ledger(meta, {POOL[1], POOL[2]}, random.Random(1))
    assert [(h.bookie, h.unhealable) for h in heals] == [(POOL[1], True), (POOL[2], True)]
    copied = {(h.bookie, c.residue, c.sources) for h in heals for c in h.copies}
    assert copied == {(POOL[1], 0, (POOL[0],)), (POOL[2], 2, (POOL[0],))}


def test_a_lost_bookie_at_a_position_its_fragment_never_wrote_to_is_marked_to_repoint():
    # The nemesis (seed 777, ledger 147 of a log): a writer on (3, 2, 2) over A, B, C whose C
    # died wrote entry 0 to A and B only (its write set), then replaced C at entry 1, the first
    # entry whose write set holds position 2.  Fragment 0 (entry 0) still names C and holds
    # nothing there: nothing to copy and nothing lost, but the ledger names a lost bookie.  The
    # auditor never marked it, and it named C for good.
    meta = closed(3, 2, 2, [(0, POOL[:3]), (1, [POOL[0], POOL[1], POOL[3]])], 39)
    audit = rules.audit_ledger(meta, {POOL[2]})
    assert audit.missing == (POOL[2],) and audit.lost_ranges == () and audit.mark
    heals = rules.plan_ledger(meta, {POOL[2]}, random.Random(1))
    assert [(h.first, h.last, h.position, h.copies, h.unhealable) for h in heals] == \
        [(0, 0, 2, (), False)]  # repointed without a copy
    # a bookie whose position holds entries and has no live copy is still lost data, not a mark
    assert not rules.audit_ledger(closed(3, 1, 1, [(0, POOL[:3])], 0), {POOL[0]}).mark


def test_an_open_ledger_is_fenced_only_for_a_loss_in_its_last_fragment():
    healed_itself = LedgerMetadata(3, 2, 2, fragments=[(0, POOL[:3]),
                                                       (10, [POOL[0], POOL[3], POOL[2]])])
    assert not rules.needs_fence(healed_itself, {POOL[1]})  # the writer replaced it already
    assert rules.needs_fence(healed_itself, {POOL[3]})
    assert rules.needs_fence(LedgerMetadata(3, 2, 2, fragments=[(0, POOL[:3])]), {POOL[1]})
    assert not rules.needs_fence(closed(3, 2, 2, [(0, POOL[:3])], 9), {POOL[1]})
    audit = rules.audit_ledger(healed_itself, {POOL[1]})
    assert audit.mark and audit.lost_ranges == ()
    heals = rules.plan_ledger(healed_itself, {POOL[1]}, random.Random(1))
    assert [(h.first, h.last, h.position) for h in heals] == [(0, 9, 1)]  # never the open tail


def test_an_empty_trailing_fragment_loses_nothing():
    meta = closed(2, 1, 1, [(0, POOL[:2]), (10, POOL[2:4])], 9)
    assert rules.audit_ledger(meta, {POOL[2], POOL[3]}).lost_ranges == ()
    assert rules.audit_ledger(meta, {POOL[2], POOL[3]}).missing == (POOL[2], POOL[3])


def test_an_open_tail_is_never_reported_lost_before_recovery_closes_it():
    meta = LedgerMetadata(3, 1, 1, fragments=[(0, POOL[:3])])
    audit = rules.audit_ledger(meta, {POOL[0]})
    assert audit.missing == (POOL[0],) and audit.lost_ranges == ()


@pytest.mark.parametrize("meta, registered, expected", [
    (None, set(), rules.DROP_DELETED),
    (closed(3, 2, 2, [(0, POOL[3:6])], 5), set(), rules.DROP_HEALED),
    (closed(3, 2, 2, [(0, POOL[:3])], 5), {POOL[0]}, rules.DROP_BACK),
    (closed(3, 2, 2, [(0, POOL[:3])], 5), {POOL[1], POOL[2]}, rules.KEEP),
])
def test_a_mark_is_settled_when_its_ledger_is_gone_healed_or_its_bookie_is_back(
        meta, registered, expected):
    assert rules.settle_mark([POOL[0]], meta, registered) == expected


# -- replication plans, carried out ------------------------------------------------------------

@st.composite
def ledgers(draw):
    E = draw(st.integers(1, 5))
    Qw = draw(st.integers(1, E))
    Qa = draw(st.integers(1, Qw))
    n_fragments = draw(st.integers(1, 3))
    firsts = sorted(draw(st.sets(st.integers(1, 40), min_size=n_fragments - 1,
                                 max_size=n_fragments - 1)))
    firsts = [0] + firsts
    fragments = [(f, draw(st.permutations(POOL[:7]))[:E]) for f in firsts]
    last = draw(st.integers(-1, 60))
    return closed(E, Qw, Qa, fragments, last)


def holdings_of(meta):
    """bookie -> entries it holds, as the writer left them (every write set complete)."""
    held: dict[str, set[int]] = {}
    for first, last, ensemble in rules.fragment_ranges(meta):
        for e in range(first, last + 1):
            for p in write_set(e, meta.ensemble_size, meta.write_quorum):
                held.setdefault(ensemble[p], set()).add(e)
    return held


@settings(max_examples=150, deadline=None)
@given(meta=ledgers(), data=st.data())
def test_a_carried_out_plan_leaves_every_entry_on_qw_live_bookies_that_hold_it(meta, data):
    orig = meta
    dead = set(data.draw(st.sets(st.sampled_from(POOL[:7]), max_size=3)))
    held = holdings_of(meta)
    for bookie in dead:
        held.pop(bookie, None)
    writable = [b for b in POOL if b not in dead]
    rng = random.Random(data.draw(st.integers(0, 1000)))
    audit = rules.audit_ledger(meta, dead)
    for heal in rules.plan_ledger(meta, dead, rng):
        ensemble = dict(meta.fragments)[heal.first]
        target = rules.choose_replacement(ensemble, writable, rng)
        assert target is not None and target not in ensemble and target not in dead
        for copy in heal.copies:
            for k in range(copy.count):
                e = copy.first_entry + k * meta.ensemble_size
                assert heal.first <= e <= heal.last and e % meta.ensemble_size == copy.residue
                assert copy.sources and all(e in held.get(s, ()) for s in copy.sources)
                held.setdefault(target, set()).add(e)
        if heal.unhealable:
            assert audit.lost_ranges
        meta = rules.replace_bookie(meta, heal.first, heal.position, heal.bookie, target)
    assert not (rules.named_bookies(meta) & dead)
    E, Qw = meta.ensemble_size, meta.write_quorum
    for (first, last, ensemble), (_, _, before) in zip(rules.fragment_ranges(meta),
                                                       rules.fragment_ranges(orig)):
        for e in range(first, last + 1):
            if all(e in held.get(ensemble[p], ()) for p in write_set(e, E, Qw)):
                continue
            # only an entry whose every copy was on a dead bookie may be short of copies
            assert all(before[p] in dead for p in write_set(e, E, Qw)), (e, ensemble)
            assert audit.lost_ranges


def test_replace_refuses_a_fragment_someone_else_changed():
    meta = closed(3, 2, 2, [(0, POOL[:3])], 9)
    moved = rules.replace_bookie(meta, 0, 1, POOL[1], POOL[5])
    assert moved.fragments[0][1] == [POOL[0], POOL[5], POOL[2]]
    with pytest.raises(ValueError):
        rules.replace_bookie(moved, 0, 1, POOL[1], POOL[6])
    with pytest.raises(ValueError):
        rules.replace_bookie(meta, 0, 1, POOL[1], POOL[2])


def test_no_replacement_when_every_writable_bookie_is_in_the_ensemble():
    assert rules.choose_replacement(POOL[:3], POOL[:3]) is None


def test_plan_refuses_an_open_ledger():
    with pytest.raises(ValueError):
        rules.plan_ledger(LedgerMetadata(3, 2, 2, fragments=[(0, POOL[:3])]), {POOL[0]})


def test_the_rate_limiter_spaces_batches_to_the_configured_rate():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s
    limiter = RateLimiter(1000, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.spend(500)
    assert now[0] == pytest.approx(2.0)  # 2500 bytes at 1000 B/s: the first batch is free
    RateLimiter(-1, clock=lambda: 0.0, sleep=sleep).spend(10 ** 9)
    assert len(slept) == 4


# -- the replacement follows the client's placement policy (issue 24 item 1) -------------------

def test_the_replacement_keeps_the_write_sets_spread_over_racks_as_the_client_would():
    from bookie.client.config import PLACEMENT_POLICIES
    from bookie.client.protocol.placement import Placement
    from bookie.workers.config import PLACEMENT_SPELLINGS
    assert set(PLACEMENT_SPELLINGS) == set(PLACEMENT_POLICIES)  # the bookie key's spellings
    a, b, c, d, e = POOL[:5]
    racks = {a: "/r/one", b: "/r/two", c: "/r/one", d: "/r/two", e: "/r/one"}
    placement = Placement("rackaware", racks)
    for seed in range(50):  # b (rack two) lost from (a, b): only d keeps two racks
        assert rules.choose_replacement([a, b], [a, c, d, e], random.Random(seed), position=1,
                                        write_quorum=2, placement=placement) == d
    assert rules.choose_replacement([a, b], [a, c, d, e], random.Random(0), avoid={d},
                                    position=1, write_quorum=2, placement=placement) in (c, e)
    enforced = Placement("rackaware", racks, min_domains=2, enforce=True)
    assert rules.choose_replacement([a, b], [a, c, e], random.Random(0), position=1,
                                    write_quorum=2, placement=enforced) is None
    picks = {rules.choose_replacement([a, b], [a, c, d, e], random.Random(s)) for s in range(50)}
    assert picks == {c, d, e}  # no placement: at random, as before


def test_a_closed_ledger_with_no_entries_naming_a_lost_bookie_is_marked_to_be_repointed():
    empty = closed(3, 2, 2, [(0, POOL[:3])], -1)
    assert rules.audit_ledger(empty, {POOL[1]}).mark
    heals = rules.plan_ledger(empty, {POOL[1]})
    assert [(h.position, h.copies, h.unhealable) for h in heals] == [(1, (), False)]
    assert rules.may_repoint(heals[0], gone=set())
