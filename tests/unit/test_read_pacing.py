"""The client's read pacing (client/pacing.py): the budget per bookie, the order of held READs,
the entry size learned from answers, and the back-off of READs refused TOO_MANY_REQUESTS."""

from bookie.client.pacing import BUSY_MAX_BACKOFF_S, ReadPacer
from bookie.wire import MAX_READ_BYTES

MIB = 1024 * 1024


class Op:
    over = False


def _answer(entries: int, each_bytes: int) -> list:
    return [b"header", b"\0" * (4 * entries), b"x" * (entries * each_bytes)]


def test_reads_are_held_past_the_budget_and_let_go_in_order_as_answers_come():
    pacer = ReadPacer(budget_bytes=8 * MIB)
    op = Op()
    assert pacer.admit("b", 8) == MAX_READ_BYTES  # nothing learned yet: the most an answer holds
    assert pacer.admit("b", 8) == MAX_READ_BYTES
    assert pacer.admit("b", 8) == 0
    pacer.hold("b", (op, 8, "third"))
    pacer.hold("b", (op, 8, "fourth"))
    assert pacer.admit("c", 8) == MAX_READ_BYTES  # another bookie has its own budget
    pacer.learn("b", _answer(4, MIB))
    released = pacer.release("b", MAX_READ_BYTES)
    assert [item[2] for item, _ in released] == ["third"]  # 4 MiB free: one 4 MiB READ
    assert pacer.release("b", MAX_READ_BYTES)[0][0][2] == "fourth"


def test_one_read_always_goes_even_over_the_budget_and_ended_operations_are_dropped():
    pacer = ReadPacer(budget_bytes=1024)
    assert pacer.admit("b", 100) == MAX_READ_BYTES
    ended = Op()
    ended.over = True
    pacer.hold("b", (ended, 100, "gone"))
    assert pacer.release("b", MAX_READ_BYTES) == []
    assert pacer.bookies["b"].in_flight_bytes == 0


def test_small_entries_are_charged_by_the_size_answers_show():
    pacer = ReadPacer()
    pacer.admit("b", 1)
    pacer.learn("b", _answer(1000, 100))
    pacer.release("b", MAX_READ_BYTES)
    assert pacer.admit("b", 1000) == 1000 * 101
    pacer.learn("b", None)  # a refusal teaches nothing
    assert pacer.bookies["b"].entry_bytes == 101


def test_a_busy_read_backs_off_doubling_until_the_operation_timeout():
    pacer = ReadPacer(retry_s=10.0)
    delays = [pacer.retry_delay(0.0, n, 1.0) for n in range(12)]
    assert delays[0] == 0.005 and delays[1] == 0.01 and max(delays) == BUSY_MAX_BACKOFF_S
    assert pacer.retry_delay(0.0, 3, 10.0) is None
