"""A long poll on a ledger its bookies hold nothing of yet parks (issue 32, item 3).

Before, a bookie answered a long poll on a ledger it held nothing of at once (NO_LEDGER), so
the documented tailing loop on a new ledger span: thousands of calls in seconds, each polling
every bookie and re-reading the metadata; and after an ensemble change, the new fragment's
bookies gave the same early answer, an empty list.  Now a bookie asks the metadata store
(off its loop): a ledger the store knows parks until an entry moves its LAC past the poll or
the poll's timeout; a made-up id is still answered at once.
"""

from __future__ import annotations

import threading
import time

from bookie.client import BookKeeper
from bookie.metadata import LedgerMetadata, open_metadata
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status

KEY = b"empty-long-poll"
PW = b"empty-tail"


def test_a_long_poll_on_an_empty_known_ledger_parks_and_a_made_up_id_is_answered_at_once(tmp_path):
    with LocalBookies(1, base_dir=str(tmp_path / "b")) as lb:
        (a,) = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            ledger, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [a])]))
        with RawBookieClient(a, timeout_s=30) as c:
            # a 120 s poll answered within the client's 30 s: at once, not parked
            status, _, _ = c.read_lac(ledger + 1000, long_poll=(-1, 120_000))
            assert status == Status.NO_LEDGER
            start = time.monotonic()
            c.read_lac(ledger, long_poll=(-1, 1500))
            assert time.monotonic() - start >= 1.3, "a poll on a known empty ledger answered early"
            # parked, then woken by the entry whose LAC passes it
            got = {}

            def poll():
                with RawBookieClient(a, timeout_s=60) as c2:  # under the poll's 120 s
                    got["answer"] = c2.read_lac(ledger, long_poll=(-1, 120_000))
            t = threading.Thread(target=poll)
            t.start()
            time.sleep(0.5)
            for e in range(2):  # entry 1 carries LAC 0
                assert c.add(ledger, [make_entry(ledger, e, b"x", lac=e - 1)], KEY) == Status.OK
            t.join(90)
            assert got["answer"][0] == Status.OK and got["answer"][1] == 0


def test_the_tailing_loop_on_a_new_ledger_waits_instead_of_spinning(tmp_path):
    with LocalBookies(2, base_dir=str(tmp_path / "b")) as lb:
        with BookKeeper(lb.metadata_uri) as wbk, BookKeeper(lb.metadata_uri) as rbk:
            lh = wbk.create_ledger(2, 2, 2, password=PW)
            rh = rbk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            calls, start = 0, time.monotonic()
            while time.monotonic() - start < 3.0:
                entries = rh.read_new_entries_async(-1, timeout_s=1.0).result(30)
                calls += 1
                assert entries == []
            assert calls <= 6, f"{calls} tail calls in 3 s on a new ledger"
            lh.add_entry(b"e0")
            lh.add_entry(b"e1")
            entries = rh.read_new_entries_async(-1, timeout_s=10).result(30)
            assert [e.data for e in entries][:1] == [b"e0"]


def test_a_tail_poll_on_a_new_fragment_its_bookies_hold_nothing_of_waits(tmp_path):
    """After an ensemble change the last fragment's bookies hold nothing yet: the poll waits for
    its timeout (or an entry), it does not come back empty at once."""
    with LocalBookies(2, base_dir=str(tmp_path / "b")) as lb:
        a, b = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            ledger, _ = store.create_ledger(LedgerMetadata(1, 1, 1, fragments=[(0, [a]), (3, [b])]))
        with RawBookieClient(a, timeout_s=30) as c:
            for e in range(3):
                assert c.add(ledger, [make_entry(ledger, e, b"e%d" % e, lac=e - 1)], KEY) == Status.OK
        with BookKeeper(lb.metadata_uri) as rbk:
            rh = rbk.open_ledger(ledger, password=KEY, recovery=False)
            start = time.monotonic()
            entries = rh.read_new_entries_async(2, timeout_s=1.5).result(30)
            assert entries == [] and time.monotonic() - start >= 1.3, \
                f"empty answer after {time.monotonic() - start:.2f} s"
