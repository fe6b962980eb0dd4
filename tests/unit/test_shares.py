"""Principals and per-principal shares of pending places (core/shares.py), as pure logic."""

import pytest
from hypothesis import given, settings, strategies as st

from bookie import wire
from bookie.wire import Op, Status
from bookie.core.answers import Pending
from bookie.core.shares import PendingAdds, address_principal, curve_principal, share


class Frame:  # what the workers read of a zmq.Frame
    def __init__(self, **props):
        self.props = props

    def get(self, name):
        if name not in self.props:
            raise ValueError(name)
        return self.props[name]


def test_the_principal_is_the_key_under_curve_and_the_host_without_loopback_too():
    assert curve_principal(Frame(**{"User-Id": "alice", "Peer-Address": "10.0.0.1"}), b"c1") == "alice"
    assert address_principal(Frame(**{"Peer-Address": "10.0.0.1"}), b"c1") == "10.0.0.1"
    for loopback in ("127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"):  # issue 22, finding 7
        assert address_principal(Frame(**{"Peer-Address": loopback}), b"c1") == loopback
    assert address_principal(Frame(), b"c1") == b"c1"  # not TCP: its connection
    assert share(10_000) == 2_500 and share(3) == 1


def client_pending(ident: bytes, end: int) -> Pending:
    return Pending(end, [ident, wire.pack_header(Op.ADD, Status.OK, 1, 1)], 1)


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.one_of(st.tuples(st.just("add"), st.sampled_from(["a", "b", "c"])),
                                st.tuples(st.just("fence")), st.tuples(st.just("answer"))),
                      max_size=80),
       max_pending=st.integers(4, 20))
def test_pending_adds_count_each_principal_until_answered(steps, max_pending):
    pending = PendingAdds(max_pending, lambda frame, ident: frame.get("User-Id"))
    model = []  # owner per pending answer, None for the read worker's
    for step in steps:
        if step[0] == "add":
            mine = model.count(step[1])
            try:
                pending.admit(Frame(**{"User-Id": step[1]}), step[1].encode(), Op.ADD)
            except wire.ProtocolError as e:
                assert e.status == Status.TOO_MANY_REQUESTS and mine >= share(max_pending)
                continue
            assert mine < share(max_pending)
            pending.append(client_pending(step[1].encode(), len(model)))
            model.append(step[1])
        elif step[0] == "fence":  # an answer for the read worker: nobody's share
            pending.admit(Frame(), b"conn", Op.INFO)
            pending.append(Pending(0, [None, b"r", b"F", b"t", b"s"], 1))
            model.append(None)
        elif model:
            pending.popleft()
            model.pop(0)
        assert len(pending) == len(model)
        assert pending.held.counts == {p: model.count(p) for p in set(model) if p is not None}


def test_the_principal_is_looked_up_for_the_requests_that_take_a_place_only():
    looked = []
    pending = PendingAdds(100, lambda frame, ident: looked.append(ident) or ident)
    for op in (Op.ADD, Op.WRITE_LAC, Op.INFO, Op.READ):
        pending.admit(None, b"c1", op)
    assert looked == [b"c1", b"c1"]


def test_a_refused_admit_counts_nothing_and_clear_forgets():
    pending = PendingAdds(4, lambda frame, ident: ident)
    pending.admit(None, b"x", Op.ADD)
    pending.append(client_pending(b"x", 1))
    with pytest.raises(wire.ProtocolError):
        pending.admit(None, b"x", Op.WRITE_LAC)
    pending.admit(None, b"y", Op.ADD)
    pending.clear()
    assert not pending and not pending.held.counts and not pending.owners


def test_what_a_connection_shut_for_flooding_had_queued_is_dropped_for_the_rest_of_its_second():
    from bookie.workers.client_sockets import RefusalBudget

    class Cap:
        open = {7}

        def shut(self, fd):
            return True

    now = [0.0]
    budget = RefusalBudget(3, Cap(), clock=lambda: now[0])
    frame = Frame()
    frame.get = lambda name: 7  # its zmq.SRCFD, a descriptor the cap saw accepted
    assert [budget.refused(b"c", frame) for _ in range(5)] == [False, False, False, True, True]
    assert budget.shut_total == 1 and budget.dropping(b"c") and not budget.dropping(b"d")
    pending = PendingAdds(8, lambda frame, ident: ident, budget)
    with pytest.raises(wire.ProtocolError):
        pending.admit(None, b"c", Op.INFO)  # dropped, whatever the op
    now[0] = 1.5
    assert budget.dropping(b"c")  # its queue may take longer than a second to get through
    now[0] = RefusalBudget.DRAIN_S + 0.5
    assert not budget.dropping(b"c")  # drained by now: a reused identity is served again
