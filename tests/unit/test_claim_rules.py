"""ledgers.py rule 7: which holdings of a ledger id the metadata store may refute (pure logic)."""

from hypothesis import given, settings, strategies as st

from bookie.core.ledgers import LedgerTable, StoredLedger
from test_bookie_core import KEY, OTHER, add_record, fence_record

THIRD = b"third-key"


def test_a_binding_is_contested_only_by_another_key():
    table = LedgerTable()
    table.apply(add_record(1, OTHER))
    assert table.claimed_by_other(1, KEY) and not table.claimed_by_other(1, OTHER)


def test_an_unbound_fence_is_contested_only_while_one_other_key_made_it():
    table = LedgerTable()
    table.apply(fence_record(1, OTHER))
    assert table.claimed_by_other(1, KEY) and not table.claimed_by_other(1, OTHER)
    table.apply(fence_record(2, KEY))  # a recovery by the writer's key: never contested
    assert not table.claimed_by_other(2, KEY)
    table.apply(fence_record(1, KEY))  # two keys fenced it: it holds for good
    assert table.get(1).fenced_by == b"" and not table.claimed_by_other(1, KEY)
    table.apply(fence_record(1, OTHER))  # and a third fence does not bring a fencer back
    assert not table.claimed_by_other(1, KEY)
    table.apply(fence_record(3, b""))  # the recovery credential (no key in the record)
    assert table.get(3).fenced and not table.claimed_by_other(3, KEY)


def test_nothing_held_deleted_or_bound_by_the_same_key_is_contested():
    table = LedgerTable(load=lambda lid: StoredLedger.tombstone() if lid == 9 else None)
    assert not table.claimed_by_other(5, KEY)  # nothing held
    assert not table.claimed_by_other(9, KEY)  # deleted
    table.apply(fence_record(1, OTHER))
    table.apply(add_record(1, KEY, recovery=True))  # bound by its first add: fencer forgotten
    assert table.get(1).fenced_by == b"" and not table.claimed_by_other(1, KEY)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "radd", "fence"]),
                          st.sampled_from([KEY, OTHER, THIRD, b""])), max_size=8))
def test_the_fencer_is_what_replay_from_any_mark_rebuilds(ops):
    """fenced_by is state like the rest: applying the records again from any point over the
    table they built changes nothing (rule 8), and the index form round-trips."""
    recs = [add_record(1, k, i, recovery=(op == "radd")) if op != "fence" else fence_record(1, k)
            for i, (op, k) in enumerate(ops) if k or op == "fence"]
    table = LedgerTable()
    for r in recs:
        table.apply(r)
    final = table.get(1)
    for mark in range(len(recs) + 1):
        again = LedgerTable(load=lambda lid, d=final.as_dict() if final else None:
                            StoredLedger.from_dict(d) if d else None)
        for r in recs[mark:]:
            again.apply(r)
        assert again.get(1) == final
