"""In-order confirmation of adds under any order of bookie acks (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.protocol.pending import PendingAdds
from bookie.client.protocol.quorum import write_set


@st.composite
def ack_schedules(draw):
    e = draw(st.integers(1, 6))
    w = draw(st.integers(1, e))
    a = draw(st.integers(1, w))
    n = draw(st.integers(1, 25))
    acks = [(entry_id, p) for entry_id in range(n) for p in write_set(entry_id, e, w)]
    acks += draw(st.lists(st.sampled_from(acks), max_size=10))  # duplicates
    acks += [(draw(st.integers(0, n - 1)), p) for p in range(e)]  # outside the write set too
    order = draw(st.permutations(acks))
    batch = draw(st.integers(1, 4))
    return e, w, a, n, order, batch


def oracle_lac(counts, a):
    lac = -1
    while lac + 1 < len(counts) and counts[lac + 1] >= a:
        lac += 1
    return lac


@given(ack_schedules())
@settings(max_examples=300, deadline=None)
def test_entries_confirm_in_order_once_quorum_acked_under_any_arrival_order(schedule):
    e, w, a, n, order, batch = schedule
    pending = PendingAdds(e, w, a)
    for i in range(n):
        assert pending.append(b"x%d" % i) == i
    seen: dict[int, set] = {i: set() for i in range(n)}
    confirmed = []
    for k in range(0, len(order), batch):
        chunk = order[k:k + batch]
        # group by position, as one bookie answers one batched ADD
        by_pos: dict[int, list] = {}
        for entry_id, p in chunk:
            by_pos.setdefault(p, []).append(entry_id)
        for p, ids in by_pos.items():
            seen_now = [i for i in ids if p in write_set(i, e, w)]
            for i in seen_now:
                seen[i].add(p)
            done = pending.ack(p, ids)
            if done:
                first, last = done
                assert first == (confirmed[-1] + 1 if confirmed else 0)
                confirmed.extend(range(first, last + 1))
            counts = [len(seen[i]) for i in range(n)]
            assert pending.lac == oracle_lac(counts, a) == (confirmed[-1] if confirmed else -1)
    assert confirmed == list(range(n))
    assert len(pending) == 0


def test_failed_position_acks_stop_counting_and_revive_lists_entries_to_resend():
    pending = PendingAdds(3, 3, 2)
    for i in range(4):
        pending.append(b"e%d" % i)
    assert pending.ack(0, [0, 1, 2, 3]) is None
    pending.fail_position(0)
    assert pending.ack(1, [0, 1]) is None  # position 0's acks were forgotten
    assert pending.ack(0, [0, 1]) is None  # and new ones are ignored
    assert pending.ack(2, [0]) == (0, 0)
    assert pending.revive_position(0) == [1, 2, 3]
    assert pending.ack(0, [1]) == (1, 1)


def test_drain_keeps_the_real_lac():
    pending = PendingAdds(2, 2, 2)
    for i in range(3):
        pending.append(b"")
    pending.ack(0, [0])
    pending.ack(1, [0])
    assert pending.drain() == (1, 2)
    assert pending.lac == 0 and len(pending) == 0
