"""The pure rules of a reader's stale metadata (client/protocol/staleness.py)."""

from hypothesis import given
from hypothesis import strategies as st

from bookie.client.errors import (BKTimeoutError, BookieError, DigestMismatchError,
                                  NoSuchEntryError, UnauthorizedError)
from bookie.client.protocol.ledger import LedgerInfo, LedgerState
from bookie.client.protocol.staleness import refresh_wanted, wakes_a_poll, worth_retrying

A, B, C, D, E = "a:1", "b:1", "c:1", "d:1", "e:1"
OLD = LedgerInfo(7, 3, 2, 2, fragments=((0, (A, B, C)),))
NEW = OLD.replace(fragments=((0, (A, B, C)), (10, (A, D, E))))


def test_a_missing_confirmed_entry_refreshes_the_view():
    assert refresh_wanted(NoSuchEntryError("x"), 10, told_lac=19)
    assert refresh_wanted(BKTimeoutError("x"), 19, told_lac=19)
    assert refresh_wanted(BookieError("x"), 12, told_lac=19)


def test_an_entry_past_the_told_lac_or_a_bad_copy_does_not():
    assert not refresh_wanted(NoSuchEntryError("x"), 20, told_lac=19)
    assert not refresh_wanted(DigestMismatchError("x"), 10, told_lac=19)
    assert not refresh_wanted(UnauthorizedError("x"), 10, told_lac=19)


def test_a_new_fragment_over_the_range_is_worth_a_retry_and_the_same_view_is_not():
    assert worth_retrying(OLD, NEW, 9, 12)
    assert worth_retrying(OLD, NEW, 10, 10)
    assert not worth_retrying(OLD, NEW, 0, 9)  # the range is all in the unchanged fragment
    assert not worth_retrying(NEW, NEW, 0, 19)


@given(st.integers(0, 30), st.integers(0, 30), st.integers(1, 30))
def test_a_retry_is_worth_it_exactly_when_some_entry_moved(first, span, cut):
    last = first + span
    moved = any(OLD.ensemble_for(e) != NEW.ensemble_for(e) for e in range(first, last + 1))
    assert worth_retrying(OLD, NEW, first, last) == moved
    other = OLD.replace(fragments=((0, (A, B, C)), (cut, (A, B, C))))  # same bookies, cut
    assert not worth_retrying(OLD, other, first, last)  # a cut with the same bookies moves nothing


CLOSED = NEW.replace(state=LedgerState.CLOSED, last_entry_id=19)
RECOVERING = OLD.replace(state=LedgerState.IN_RECOVERY)


def test_a_close_a_recovery_or_a_new_fragment_wakes_a_parked_poll():
    assert wakes_a_poll(OLD, NEW)
    assert wakes_a_poll(OLD, CLOSED)
    assert wakes_a_poll(NEW, CLOSED)
    assert wakes_a_poll(OLD, RECOVERING)
    assert not wakes_a_poll(NEW, NEW)  # the view it holds: nothing to tell the poll
    assert not wakes_a_poll(NEW, OLD)  # a watch's delivery older than a fresh read
    assert not wakes_a_poll(CLOSED, NEW)


VIEWS = st.builds(
    lambda state, n: OLD.replace(state=state, last_entry_id=10 * n - 1 if state is LedgerState.CLOSED else -1,
                                 fragments=tuple((10 * k, (A, B, C)) for k in range(n))),
    st.sampled_from(list(LedgerState)), st.integers(1, 4))


@given(VIEWS, VIEWS, VIEWS)
def test_the_view_only_moves_forward(a, b, c):
    assert not (wakes_a_poll(a, b) and wakes_a_poll(b, a))  # never both ways: no flip-flop
    assert not wakes_a_poll(a, a)
    if wakes_a_poll(a, b) and wakes_a_poll(b, c):
        assert wakes_a_poll(a, c)  # an order: a run of deliveries cannot come back round
