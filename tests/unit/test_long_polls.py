"""The read worker's long-poll table against a plain list model, and its bounds."""

from hypothesis import given, settings, strategies as st

from bookie.core.long_polls import LongPolls

park = st.tuples(st.just("park"), st.integers(0, 3), st.integers(-1, 6), st.integers(0, 20))
ops = st.lists(st.one_of(
    park, park,  # parks twice as often as the others: the per-key and per-principal limits bind
    st.tuples(st.just("moved"), st.integers(0, 3), st.one_of(st.none(), st.integers(-1, 8))),
    st.tuples(st.just("tick"), st.integers(0, 20)),
    st.tuples(st.just("drop"), st.integers(0, 2)),
), max_size=200)


def key(request: int) -> int:  # the model's "connection" of a request
    return request % 3


def principal(request: int):  # connections 0 and 1 are one principal's; 2 counts to nobody
    return None if key(request) == 2 else "p"


@settings(max_examples=300, deadline=None)
@given(ops=ops, limit=st.integers(1, 30), per_key=st.one_of(st.none(), st.integers(1, 12)),
       per_principal=st.one_of(st.none(), st.integers(1, 6)))
def test_long_polls_answer_what_a_scan_of_every_poll_would(ops, limit, per_key, per_principal):
    table = LongPolls(limit, per_key, key=key, per_principal=per_principal)
    model = []  # [(ledger, previous, deadline, request)]
    now, n = 0, 0
    for op in ops:
        if op[0] == "park":
            n += 1
            parked = table.park(op[1], op[2], now + op[3] + 0.5, n, principal(n))
            mine = sum(1 for p in model if key(p[3]) == key(n))
            ours = sum(1 for p in model if principal(n) is not None and principal(p[3]) == principal(n))
            assert parked == (len(model) < limit and (per_key is None or mine < per_key)
                              and (per_principal is None or principal(n) is None or ours < per_principal))
            if parked:
                model.append((op[1], op[2], now + op[3] + 0.5, n))
        elif op[0] == "moved":
            want = sorted(p[3] for p in model if p[0] == op[1] and (op[2] is None or p[1] < op[2]))
            assert sorted(table.ledger_moved(op[1], op[2])) == want
            model = [p for p in model if p[3] not in want]
        elif op[0] == "drop":
            gone = [p for p in model if key(p[3]) == op[1]]
            assert table.drop_where(lambda request: key(request) == op[1]) == len(gone)
            model = [p for p in model if key(p[3]) != op[1]]
        else:
            now += op[1]
            want = sorted(p[3] for p in model if p[2] <= now)
            assert sorted(table.expired(now)) == want
            model = [p for p in model if p[3] not in want]
        assert len(table) == len(model)
        assert table._per_principal.counts == ({"p": len([p for p in model if principal(p[3])])}
                                        if per_principal is not None and any(principal(p[3]) for p in model) else {})
        assert table.next_deadline() == (min(p[2] for p in model) if model else None)


def test_heaps_stay_within_a_constant_factor_of_the_live_polls():
    table = LongPolls(10)
    for i in range(100_000):  # one ledger that never moves, polled again at every timeout
        assert table.park(1, 5, float(i), i)
        assert table.expired(float(i)) == [i]
    assert len(table) == 0 and not table._by_ledger and len(table._deadlines) <= 1024
    for i in range(10):
        table.park(2, i, 1e9, i)
    assert not table.park(2, 0, 1e9, 99)
    assert sorted(table.ledger_moved(2, 5)) == [0, 1, 2, 3, 4] and len(table) == 5


def test_one_principal_on_many_connections_parks_at_most_its_share():
    table = LongPolls(100, per_key=25, key=lambda request: request[0], per_principal=25)
    parked = [table.park(1, 5, 1e9, (conn, i), "alice") for conn in range(4) for i in range(25)]
    assert sum(parked) == 25  # four connections, one share
    assert table.park(1, 5, 1e9, ("b", 0), "bob")  # another principal still parks
    assert table.park(1, 5, 1e9, ("c", 0), None)  # None: counted per connection only
    assert len(table.ledger_moved(1, 6)) == 27
    assert table.park(1, 5, 1e9, (9, 0), "alice")  # the places came back
