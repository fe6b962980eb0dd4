"""A bookie learns a writer's LAC while the writer still has thousands of adds queued there
(client ``lacNoticeInterval``, docs/client.md "`LedgerHandle`").

Before the LAC notice a bookie learnt that entry e was confirmed only from the LAC a later add
carried, and that add reached the bookie behind every add the writer had outstanding: a tailing
reader's lag was about an add's whole latency.  The notice is an explicit LAC (WRITE_LAC) sent on
a connection of its own as soon as the LAC moves (at most once per interval), so the bookie's
ROUTER takes it between the queued adds; the add worker then ends its iteration, so the polls
are answered at once.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time

import pytest

from bookie import wire
from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, create_ledgers, make_entry
from bookie.wire import Flag, Op, Status

WINDOW = 12000  # adds the writer keeps outstanding (its client's throttle)
BATCH = 100
WRITE_S = 1.5
PAYLOAD = b"x" * 1024
WRITER = {"throttle": WINDOW, "explicitLacInterval": 0, "lacNoticeInterval": 1.0}
OLD_PATH = {**WRITER, "lacNoticeInterval": 0}  # the LAC travels only with later adds


def _write_and_tail(ensemble, writer_config: dict) -> list[float]:
    """Write one ledger with a deep window for WRITE_S while another client tails its LAC with
    long polls.  Returns the lags in seconds, of the steady middle of the run: lag of a
    confirmed range = from its ack at the writer to the reader's first LAC at or past its last
    entry."""
    acks: list[tuple[int, float]] = []  # (last entry id, acked at)
    seen: list[tuple[float, int]] = []  # (when, LAC) of each long poll answer
    failures: list = []
    with BookKeeper(ensemble.metadata_uri, writer_config) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        wh = wbk.create_ledger(1, 1, 1, password=b"pw")
        rh = rbk.open_ledger(wh.ledger_id, password=b"pw", recovery=False)
        done = threading.Event()

        def tail() -> None:
            after = -1
            try:
                while not (done.is_set() and after >= wh.last_add_confirmed):
                    lac = rh.wait_for_last_add_confirmed(after, 1.0)
                    if lac > after:
                        seen.append((time.monotonic(), lac))
                        after = lac
            except BaseException as e:  # noqa: BLE001 - reported by the test
                failures.append(e)

        reader = threading.Thread(target=tail, daemon=True)
        reader.start()

        def confirmed(first, last, error):
            if error is not None:
                failures.append(error)
            else:
                acks.append((last, time.monotonic()))
        end = time.monotonic() + WRITE_S
        while time.monotonic() < end:
            wh.add_entries_callback([PAYLOAD] * BATCH, confirmed)
        wh.close()
        done.set()
        reader.join(30)
        assert not failures, failures
        assert not reader.is_alive(), "the tailing reader did not reach the end"
    lags = []
    i = 0
    for last, acked in sorted(acks):
        while i < len(seen) and seen[i][1] < last:
            i += 1
        assert i < len(seen), f"the reader never saw entry {last} confirmed"
        lags.append(max(0.0, seen[i][0] - acked))
    cut = len(lags) // 5  # no ramp-up, and no draining tail (its LAC comes with the close)
    return lags[cut:-cut]


@pytest.mark.soak  # a measurement in alternating pairs: timing-sensitive on a loaded machine
@pytest.mark.bookkeeper(bookies=1)
def test_a_tailer_sees_entries_sooner_with_thousands_queued(bookkeeper_ensemble):
    """Two alternating pairs, the path without notices against the one with, in the same
    minutes (a loaded machine slows both): the notice must take the lag well below the old
    path's.  Without it the LAC waits behind the queued adds (measured: p50 73-268 ms against
    19-105 ms with it, ratios 0.07-0.45, at load 16-22)."""
    old, new = [], []
    for _ in range(2):
        old.append(statistics.median(_write_and_tail(bookkeeper_ensemble, OLD_PATH)))
        new.append(statistics.median(_write_and_tail(bookkeeper_ensemble, WRITER)))
    assert sum(new) < 0.7 * sum(old), (
        f"tail lag p50 with LAC notices {[round(x * 1e3, 1) for x in new]} ms against "
        f"{[round(x * 1e3, 1) for x in old]} ms without")


@pytest.mark.soak  # an ordering of queued messages: timing-sensitive on a loaded machine
@pytest.mark.bookkeeper(bookies=1)
def test_a_write_lac_wakes_long_polls_before_the_adds_queued_beside_it(bookkeeper_ensemble):
    """The add worker ends its loop iteration after a WRITE_LAC: the LAC is committed and the
    parked polls are answered then, not after the rest of up to 512 queued ADD messages (which
    is where a LAC notice would otherwise wait, having overtaken them on the socket)."""
    key, ledger = b"k" * 20, 77
    bookie = bookkeeper_ensemble.bookies[0]
    create_ledgers(bookkeeper_ensemble.metadata_uri, [ledger], key)
    n_messages, per_message = 300, 50
    with RawBookieClient(bookie, timeout_s=60) as writer, RawBookieClient(bookie) as lacer, \
            RawBookieClient(bookie, timeout_s=60) as poller:
        assert writer.add(ledger, [make_entry(ledger, 0, b"e0", lac=-1)], key) == Status.OK
        poll = next(poller._ids)
        poller.read_sock.send_multipart([wire.pack_header(Op.READ_LAC, Flag.LONG_POLL, poll, ledger),
                                         wire.LONG_POLL_BODY.pack(0, 60_000)])
        time.sleep(0.2)  # parked
        payload = b"p" * 300
        rids = [writer.send_add(ledger, [make_entry(ledger, 1 + m * per_message + i, payload, lac=0)
                                         for i in range(per_message)], key)
                for m in range(n_messages)]
        time.sleep(0.05)  # the adds are queued at the bookie
        lacer.add_sock.send_multipart([wire.pack_header(Op.WRITE_LAC, 0, 1, ledger), key,
                                       wire.WRITE_LAC_BODY.pack(1)])
        status, frames = poller.wait(poller.read_sock, poll)
        last = n_messages * per_message
        taken_all = poller.read(ledger, last)[0] == Status.OK
        assert status == Status.OK and wire.LAC_BODY.unpack(frames[0])[0] == 1
        assert not taken_all, "the poll was answered only after every queued add was taken"
        for rid in rids:
            assert writer.wait(writer.add_sock, rid)[0] == Status.OK
        assert lacer.wait(lacer.add_sock, 1)[0] == Status.OK


def _bookie_lac_while_a_write_set_is_stuck(notice_ms: float) -> int | None:
    """E3/Qw2/Qa2 with the bookie at position 2 stopped (SIGSTOP): entry 0 (positions 0, 1) is
    confirmed, entry 1 (positions 1, 2) never is, so adds stay outstanding with the LAC at 0.
    Entries 0..5 go out in one batch, each carrying LAC -1, and the explicit LAC is off: the
    bookie at position 0 can learn LAC 0 only from a LAC notice.  Returns the LAC it answers
    within 10 s (None: no answer)."""
    with LocalBookies(3) as ens, BookKeeper(ens.metadata_uri, {
            "explicitLacInterval": 0, "lacNoticeInterval": notice_ms, "addEntryTimeout": 120}) as bk:
        wh = bk.create_ledger(3, 2, 2, password=b"pw")
        ensemble = wh.metadata.fragments[0][1]
        stopped = ens.bookies.index(ensemble[2])
        os.killpg(ens.procs[stopped].pid, signal.SIGSTOP)
        try:
            wh.add_entries_callback([b"e%d" % i for i in range(6)], lambda first, last, error: None)
            deadline = time.monotonic() + 30
            while wh.last_add_confirmed < 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert wh.last_add_confirmed == 0
            lac = None
            with RawBookieClient(ensemble[0]) as c:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    status, lac, _ = c.read_lac(wh.ledger_id)
                    assert status == Status.OK
                    if lac == 0:
                        break
                    time.sleep(0.05)
            return lac
        finally:
            os.killpg(ens.procs[stopped].pid, signal.SIGCONT)


def test_a_bookie_learns_the_lac_while_adds_are_stuck_behind_it():
    """The notice in the default suite, timing-free: with adds outstanding and none that can
    carry the new LAC, the bookie is told it (without notices it still says -1: checked with
    ``lacNoticeInterval=0``, the old path)."""
    assert _bookie_lac_while_a_write_set_is_stuck(1.0) == 0
