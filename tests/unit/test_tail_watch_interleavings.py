"""A reader's long poll and its watch on the ledger's metadata, over every order of events
(client/handle.py ``_long_poll``, ``_watch``, ``_seen``; the rule is
client/protocol/staleness.py ``wakes_a_poll``).

The runner and the store here are stand-ins that only record what the handle asks of them and
hand back futures the test completes: the logic under test is which poll is live, who
completes the caller's future and with what, in whatever order the bookies' answers and the
watch's deliveries arrive.  Real bookies and stores run the same code in
tests/integration/test_client_tail_end.py.

Invariants, after any sequence of events:
* the caller's future is completed once, and then no poll is left running (each was answered
  or cancelled: nothing more is sent for it);
* while it is pending exactly one poll is live, and it asks the last fragment of the newest
  view the handle holds;
* a close delivered while it is pending completes it at once with the closed ledger's last
  entry, and the handle reports the ledger closed;
* the view only moves forward (a delivery older than the view is ignored).
"""

from __future__ import annotations

from concurrent.futures import Future

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.digest import DigestManager
from bookie.client.handle import LedgerHandle
from bookie.client.metadata import LedgerMetadata, to_info
from bookie.client.protocol.lac import LongPollLacOp
from bookie.client.protocol.ledger import LedgerState

LID, AFTER = 7, 4
ENS1, ENS2, ENS3 = ["a:1", "b:1", "c:1"], ["a:1", "d:1", "c:1"], ["e:1", "d:1", "c:1"]


def meta(state=LedgerState.OPEN, fragments=((0, ENS1),), last=-1) -> LedgerMetadata:
    return LedgerMetadata(3, 2, 2, state=state, last_entry_id=last,
                          fragments=[(f, list(e)) for f, e in fragments])


class Runner:
    """Records the operations started; their futures are the test's to complete."""

    def __init__(self):
        self.polls: list[tuple[LongPollLacOp, Future]] = []

    def run(self, op, ledger_id, master_key, collect=False, key_flags=0) -> Future:
        fut: Future = Future()
        assert isinstance(op, LongPollLacOp) and ledger_id == LID
        self.polls.append((op, fut))
        return fut

    def wait(self, fut, timeout_s=None):
        return fut.result(0)


class Store:
    """The ledger's record now, and the watch callbacks taken."""

    def __init__(self, record: LedgerMetadata):
        self.record = record
        self.watchers: list = []
        self.store = self

    def read_info(self, ledger_id):
        return to_info(ledger_id, self.record), 0

    def watch_ledger(self, ledger_id, callback):
        entry = [callback]
        self.watchers.append(entry)
        return lambda: self.watchers.remove(entry) if entry in self.watchers else None


FRAG2 = ((0, ENS1), (6, ENS2))
FRAG3 = ((0, ENS1), (6, ENS2), (9, ENS3))
RECORDS = {  # what the store may come to hold, in the order a ledger can go through them
    "open2": meta(fragments=FRAG2),
    "open3": meta(fragments=FRAG3),
    "recovering": meta(LedgerState.IN_RECOVERY, FRAG2),
    "closed": meta(LedgerState.CLOSED, FRAG2, last=8),
    "closed3": meta(LedgerState.CLOSED, FRAG3, last=12),
}
EVENTS = st.lists(st.one_of(
    st.tuples(st.just("answer"), st.integers(-1, 2)),  # the live poll answers AFTER + k
    st.tuples(st.just("answer_old"), st.integers(-1, 2)),  # a replaced one answers late
    st.tuples(st.just("deliver"), st.sampled_from(sorted(RECORDS))),
    st.tuples(st.just("redeliver"), st.just("")),  # the watch repeats what it saw last
), max_size=8)


def _stage(rh) -> tuple[int, int]:
    order = {LedgerState.OPEN: 0, LedgerState.IN_RECOVERY: 1, LedgerState.CLOSED: 2}
    return order[rh.metadata.state], len(rh.metadata.fragments)


def _live(runner):
    return [(op, f) for op, f in runner.polls if not f.done()]


@settings(max_examples=400, deadline=None)
@given(EVENTS, st.sampled_from([None, "closed", "open2"]),
       st.sampled_from([None, "closed", "open2", "recovering"]))
def test_a_poll_and_the_watch_agree_in_any_order(events, changed_before_watch, between_polls):
    """``changed_before_watch``: the record changes between the caller's read and the watch's
    start (first poll).  ``between_polls``: with the watch on since an earlier poll that found
    entries, a change the watch delivers after the caller looked (``_view_closed``) and before
    its next poll parks."""
    store = Store(meta())
    runner = Runner()
    rh = LedgerHandle(LID, to_info(LID, store.record), DigestManager(LID, "crc32c", b"pw"),
                      b"key", runner, store, 1 << 20, last_add_confirmed=AFTER - 1)
    if between_polls:
        first = rh._long_poll(AFTER - 1, 10.0)
        runner.polls[-1][1].set_result(AFTER)
        assert first.result(0) == AFTER and rh._watching and not rh._polled_empty
        rh._lac = AFTER
        assert not rh._view_closed()  # the watch keeps the view: no read of the store
        store.record = RECORDS[between_polls]
        for (callback,) in list(store.watchers):
            callback(store.record, 1)
    elif changed_before_watch:  # lands between the caller's read and the watch's start
        store.record = RECORDS[changed_before_watch]
    out = rh._long_poll(AFTER, 10.0)
    seen_last = store.record
    closed_at = None
    if store.record.state is LedgerState.CLOSED:
        closed_at = store.record.last_entry_id
    answered_first = False  # a bookie answered before any close was delivered
    views = [_stage(rh)]
    for kind, arg in events:
        was_done = out.done()
        if kind == "answer" and _live(runner):
            _live(runner)[-1][1].set_result(AFTER + arg)
            answered_first = answered_first or (not was_done and out.done())
        elif kind == "answer_old":
            old = [f for _, f in runner.polls[:-1] if not f.done()]
            if old:
                old[0].set_result(AFTER + arg)
        elif kind in ("deliver", "redeliver"):
            record = RECORDS[arg] if kind == "deliver" else seen_last
            store.record, seen_last = record, record
            for (callback,) in list(store.watchers):
                callback(record, 1)
            if record.state is LedgerState.CLOSED and not was_done and closed_at is None:
                closed_at = record.last_entry_id
        views.append(_stage(rh))
        if not out.done():
            live = _live(runner)
            assert len(live) == 1, live
            assert live[0][0].pending == set(rh.metadata.last_ensemble)
            assert not rh.is_closed
        if closed_at is not None and not was_done and rh.is_closed:
            assert out.done()
    if out.done():
        assert not _live(runner), "a poll left running after the caller got its answer"
        if closed_at is not None and not answered_first:
            assert out.result() >= closed_at, "closed, yet the caller was not told its end"
    if rh.is_closed:
        assert rh.last_add_confirmed == rh.metadata.last_entry_id
        assert not store.watchers  # a closed ledger is watched no more
    assert views == sorted(views), "the handle's view went back"
    rh.close()
    assert not store.watchers  # close ends the watch


def test_a_handle_dropped_without_close_cancels_its_watch():
    import gc
    store = Store(meta())
    runner = Runner()
    rh = LedgerHandle(LID, to_info(LID, store.record), DigestManager(LID, "crc32c", b"pw"),
                      b"key", runner, store, 1 << 20, last_add_confirmed=AFTER)
    out = rh._long_poll(AFTER, 10.0)
    assert len(store.watchers) == 1
    runner.polls[-1][1].set_result(AFTER + 1)
    assert out.result(0) == AFTER + 1
    del rh, out
    runner.polls.clear()  # (the real runner drops an operation once it is over)
    gc.collect()
    assert not store.watchers  # no watch (and no store poll for it) outlives its handle
