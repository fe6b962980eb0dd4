"""The writer's LAC notice (client/protocol/writer.py ``_notice``), pure: when the LAC moves
while adds are still outstanding the writer tells its bookies at once (a WRITE_LAC marked
``notice``), at most once per interval, arming a Tick for the notice that is not due yet; with
nothing outstanding it leaves the LAC to the next add and the explicit LAC."""

from __future__ import annotations

from bookie.client.digest import DigestManager
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.writer import LedgerWriter

BOOKIES = ("b0:1", "b1:1", "b2:1")


def writer(interval_s=0.001, explicit_s=0.0, deferred=False):
    info = LedgerInfo(ledger_id=7, ensemble_size=3, write_quorum=3, ack_quorum=2,
                      fragments=((0, BOOKIES),))
    dm = DigestManager(7, "crc32c", b"pw")
    w = LedgerWriter(info, 0, dm.encode, encode_many=dm.encode_many,
                     explicit_lac_interval_s=explicit_s, lac_notice_interval_s=interval_s,
                     deferred_sync=deferred)
    return w


def ack(w, bookie, entry_ids, now):
    req = A.SendAdd(bookie, list(entry_ids), [w.pending.data(e) for e in entry_ids])
    return w.handle(A.AddResponse(req, 0), now)


def notices(actions):
    return [(a.bookie, a.lac) for a in actions if isinstance(a, A.SendWriteLac) and a.notice]


def test_a_lac_that_moves_with_adds_outstanding_is_told_to_every_bookie_at_once():
    w = writer()
    w.add([b"x"] * 10, now=0.0)
    assert ack(w, "b0:1", range(3), 0.001) == []  # one ack of Qa=2: the LAC did not move
    out = ack(w, "b1:1", range(3), 0.002)
    assert A.Confirm(0, 2) in out
    assert notices(out) == [(b, 2) for b in BOOKIES]


def test_notices_are_rate_limited_and_the_late_one_is_armed_then_sent():
    w = writer(interval_s=0.001)
    w.add([b"x"] * 10, now=0.0)
    ack(w, "b0:1", range(5), 0.0)
    assert notices(ack(w, "b1:1", range(2), 0.010)) == [(b, 1) for b in BOOKIES]
    out = ack(w, "b1:1", range(2, 4), 0.0104)  # 0.4 ms later: not due
    assert notices(out) == []
    (arm,) = [a for a in out if isinstance(a, A.TickAfter)]
    assert abs(arm.delay_s - 0.0006) < 1e-9
    assert [a for a in ack(w, "b1:1", [4], 0.0105) if isinstance(a, A.TickAfter)] == []  # armed once
    assert notices(w.handle(A.Tick(), 0.011)) == [(b, 4) for b in BOOKIES]
    assert notices(w.handle(A.Tick(), 0.020)) == []  # nothing new to tell


def test_no_notice_when_nothing_is_outstanding_the_next_add_carries_the_lac():
    w = writer()
    w.add([b"x"] * 2, now=0.0)
    ack(w, "b0:1", range(2), 0.0)
    out = ack(w, "b1:1", range(2), 0.005)
    assert A.Confirm(0, 1) in out and notices(out) == []


def test_off_at_zero_and_the_explicit_lac_is_unchanged_by_notices():
    w = writer(interval_s=0.0)
    w.add([b"x"] * 4, now=0.0)
    ack(w, "b0:1", range(2), 0.0)
    assert notices(ack(w, "b1:1", range(2), 0.001)) == []
    w = writer(interval_s=0.001, explicit_s=0.01)
    w.add([b"x"] * 4, now=0.0)
    ack(w, "b0:1", range(4), 0.0)
    assert notices(ack(w, "b1:1", range(2), 0.001)) != []
    ack(w, "b1:1", range(2, 4), 0.002)  # the rest confirmed: nothing outstanding
    # a notice is best effort (the I/O thread may drop it): the explicit LAC still goes
    explicit = [a for a in w.tick(0.02) if isinstance(a, A.SendWriteLac)]
    assert [(a.lac, a.notice) for a in explicit] == [(3, False)] * 3


def test_deferred_sync_notices_only_the_forced_lac():
    w = writer(deferred=True)
    w.add([b"x"] * 6, now=0.0)
    ack(w, "b0:1", range(3), 0.0)
    assert notices(ack(w, "b1:1", range(3), 0.002)) == []  # confirmed, but not forced: LAC -1


def test_the_io_thread_sends_one_bookie_at_most_its_notice_budget():
    """Notices past NOTICES_PER_BOOKIE_PER_S (a burst of a tenth of a second) are dropped, per
    bookie: a client writing many ledgers must not flood a bookie with WRITE_LACs."""
    from bookie.client.io import NOTICES_PER_BOOKIE_PER_S, IOThread
    io = IOThread(add_timeout_s=1, read_timeout_s=1, batch_max_entries=10, batch_max_bytes=1000,
                  list_bookies=list, write_metadata=None)
    try:
        burst = int(NOTICES_PER_BOOKIE_PER_S / 10)
        allowed = sum(io._notice_allowed("b0:1") for _ in range(burst * 3))
        assert burst <= allowed < burst + 20  # the loop takes far less than 10 ms
        assert io._notice_allowed("b1:1")  # another bookie has its own budget
    finally:
        io.close()


def ticks(actions):
    return [round(a.delay_s, 9) for a in actions if isinstance(a, A.TickAfter)]


def test_acks_within_the_interval_with_adds_flowing_send_no_notice():
    """Shallow queues: the entry that moved the LAC waited less than the interval, and the
    next add carries the LAC to the bookies as soon as a notice would: none is sent, only a
    tick armed for the case that no add follows."""
    w = writer(interval_s=0.010)
    w.add([b"x"] * 4, now=0.0)
    ack(w, "b0:1", range(2), 0.001)
    out = ack(w, "b1:1", range(2), 0.002)  # waited 2 ms < 10 ms
    assert A.Confirm(0, 1) in out and notices(out) == []
    assert ticks(out) == [0.010]
    w.add([b"y"], now=0.005)  # carries LAC 1
    assert notices(w.handle(A.Tick(), 0.012)) == []
    for t in (0.02, 0.5):
        assert notices(w.handle(A.Tick(), t)) == []


def test_a_lac_left_uncarried_for_the_interval_is_told_though_acks_were_quick():
    """Adds stuck behind a slow bookie, none sent since the LAC moved: after one interval the
    notice goes (the old path would leave the bookies at the old LAC until adds resume)."""
    w = writer(interval_s=0.010)
    w.add([b"x"] * 4, now=0.0)
    ack(w, "b0:1", range(2), 0.0005)
    out = ack(w, "b1:1", range(2), 0.001)
    assert notices(out) == [] and ticks(out) == [0.010]
    out = w.handle(A.Tick(), 0.006)  # a tick before the LAC was uncarried for the interval
    assert notices(out) == [] and ticks(out) == [0.005]
    assert notices(w.handle(A.Tick(), 0.011)) == [(b, 1) for b in BOOKIES]


def test_acks_that_waited_the_interval_send_the_notice_at_once():
    """Deep queues: an entry that waited at least the interval says the next add would reach
    the bookies as late; the notice goes with the ack, then at most one per interval."""
    w = writer(interval_s=0.010)
    w.add([b"x"] * 2, now=0.0)
    w.add([b"x"] * 8, now=0.004)
    ack(w, "b0:1", range(10), 0.005)
    assert notices(ack(w, "b1:1", range(2), 0.012)) == [(b, 1) for b in BOOKIES]  # waited 12 ms
    out = ack(w, "b1:1", range(2, 4), 0.015)  # waited 11 ms, but 3 ms after the last notice
    assert notices(out) == [] and ticks(out) == [0.007]
    assert notices(w.handle(A.Tick(), 0.022)) == [(b, 3) for b in BOOKIES]
