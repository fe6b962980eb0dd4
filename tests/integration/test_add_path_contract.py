"""The add path's client contract where it once differed from BookKeeper's (issue 31, items 1
and 5), on real bookies:

- ``create_ledger_adv``: an entry refused for its size uses up no id; a later entry is stored
  under its own id, never under the refused one's (a gap stays a gap);
- ``last_add_pushed`` is the highest id handed to the handle as soon as ``add_entry_async``
  returned, not when the client's I/O thread took the add;
- ``force()`` on a closed handle raises LedgerClosedError (BookKeeper's
  LedgerClosedException).
"""

from __future__ import annotations

import pytest

from bookie.client import InvalidArgumentError, LedgerClosedError
from bookie.testing.client_fixtures import bookkeeper  # noqa: F401

BOOKKEEPER_OPTIONS = {"bookies": 3, "client_config": {"throttle": 100}}
PW = b"pw"


def test_adv_entry_refused_for_its_size_leaves_a_gap_and_shifts_no_later_entry(bookkeeper):
    lh = bookkeeper.create_ledger_adv(3, 2, 2, password=PW)
    too_big = b"x" * (8 << 20)
    with pytest.raises(InvalidArgumentError, match="exceeds"):
        lh.add_entry_async(0, too_big)
    later = [lh.add_entry_async(i, b"entry-%d" % i) for i in (1, 2)]
    assert lh.last_add_pushed == -1 and not any(f.done() for f in later)  # behind the gap
    assert lh.add_entry(0, b"entry-0") == 0  # the id is still free
    assert [f.result(timeout=30) for f in later] == [1, 2]
    lh.close()
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW)
    assert rh.last_add_confirmed == 2
    assert [(e.entry_id, e.data) for e in rh.read_entries(0, 2)] == \
        [(i, b"entry-%d" % i) for i in range(3)]


def test_adv_entry_refused_for_its_size_after_others_keeps_their_ids(bookkeeper):
    lh = bookkeeper.create_ledger_adv(3, 2, 2, password=PW)
    assert lh.add_entry(0, b"e0") == 0
    held = lh.add_entry_async(2, b"e2")  # waits for entry 1
    with pytest.raises(InvalidArgumentError, match="exceeds"):
        lh.add_entry(1, b"y" * (8 << 20))
    assert not held.done()
    lh.close()  # entry 2 was never written: it fails, and the ledger ends at entry 0
    with pytest.raises(LedgerClosedError):
        held.result(timeout=10)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW)
    assert rh.last_add_confirmed == 0
    assert [e.data for e in rh.read_entries(0, 0)] == [b"e0"]


def test_last_add_pushed_is_the_highest_id_handed_when_add_entry_async_returns(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    for i in range(50):
        f = lh.add_entry_async(b"p%d" % i)
        assert lh.last_add_pushed == i  # at once, whatever the I/O thread has taken yet
    assert f.result(timeout=30) == 49
    futures = lh.add_entries_async([b"a", b"b", b"c"])
    assert lh.last_add_pushed == 52
    assert [x.result(timeout=30) for x in futures] == [50, 51, 52]
    lh.close()
    assert lh.last_add_pushed == 52


def test_force_on_a_closed_handle_raises_ledger_closed(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    lh.add_entry(b"a")
    assert lh.force() == 0
    lh.close()
    with pytest.raises(LedgerClosedError):
        lh.force()
    with pytest.raises(LedgerClosedError):
        lh.force_async().result(timeout=10)
