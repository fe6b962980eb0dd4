"""Slow-bookie avoidance in the pure reader: entries start at a replica that is not suspect."""

from hypothesis import given, strategies as st

from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import write_set
from bookie.client.protocol.reader import ReadOp


def _info(e, w):
    names = tuple(f"b{i}:1" for i in range(e))
    return LedgerInfo(1, e, w, 1, fragments=((0, names),)), names


@given(shape=st.integers(1, 7).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e))),
       last=st.integers(0, 60), data=st.data())
def test_reads_start_on_a_healthy_replica_whenever_an_entry_has_one(shape, last, data):
    e, w = shape
    info, names = _info(e, w)
    avoid = frozenset(data.draw(st.sets(st.sampled_from(names))))
    op = ReadOp(info, 0, last, decode=lambda raw: raw, max_count=1000, avoid=avoid)
    sends = [a for a in op.start() if isinstance(a, A.SendRead)]
    asked = {}
    for s in sends:
        for eid in range(s.first_entry_id, s.first_entry_id + s.max_count * s.stride, s.stride):
            asked.setdefault(eid, s.bookie)
    for eid in range(last + 1):
        replicas = [names[p] for p in write_set(eid, e, w)]
        healthy = [b for b in replicas if b not in avoid]
        assert asked[eid] == (healthy[0] if healthy else replicas[0])


def test_without_suspects_entries_start_at_their_write_set_head():
    info, names = _info(3, 2)
    op = ReadOp(info, 0, 5, decode=lambda raw: raw)
    starts = {e: s.bookie for s in op.start()
              for e in range(s.first_entry_id, s.first_entry_id + s.max_count * s.stride, s.stride)}
    assert starts == {0: names[0], 1: names[1], 2: names[2], 3: names[0], 4: names[1], 5: names[2]}
    # one striped READ per bookie: every third entry
    assert sorted((s.bookie, s.first_entry_id, s.max_count, s.stride) for s in op.start()) == [
        (names[0], 0, 2, 3), (names[1], 1, 2, 3), (names[2], 2, 2, 3)]
