"""A tailing reader learns that entry e is confirmed soon after the writer does, even while the
writer keeps thousands of adds queued at its bookie (client ``lacNoticeInterval``,
docs/client.md "Tailing").

Before the LAC notice a bookie learnt that e was confirmed only from the LAC a later add carried,
and that add reached the bookie behind every add the writer had outstanding: the reader's lag was
about an add's whole latency.  The notice is an explicit LAC (WRITE_LAC) sent on a connection of
its own as soon as the LAC moves (at most once per interval), so the bookie's ROUTER takes it
between the queued adds.  The test compares the reader's lag with the writer's add latency of the
same run (both grow on a loaded machine), so it depends on no absolute speed.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from bookie.client import BookKeeper

WINDOW = 12000  # adds the writer keeps outstanding (its client's throttle)
BATCH = 100
WRITE_S = 2.0
PAYLOAD = b"x" * 1024
WRITER = {"throttle": WINDOW, "explicitLacInterval": 0, "lacNoticeInterval": 1.0}


def _write_and_tail(ensemble, writer_config: dict) -> tuple[list[float], list[float]]:
    """Write one ledger with a deep window for WRITE_S while another client tails it with long
    polls.  Returns (lags, add latencies) in seconds: lag of a confirmed range = from its ack at
    the writer to the reader's first LAC at or past its last entry."""
    acks: list[tuple[int, float, float]] = []  # (last entry id, issued at, acked at)
    seen: list[tuple[float, int]] = []  # (when, LAC) of each long poll answer
    with BookKeeper(ensemble.metadata_uri, writer_config) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        wh = wbk.create_ledger(1, 1, 1, password=b"pw")
        rh = rbk.open_ledger(wh.ledger_id, password=b"pw", recovery=False)
        done = threading.Event()
        failures: list = []

        def tail() -> None:
            after = -1
            try:
                while not (done.is_set() and after >= wh.last_add_confirmed):
                    lac = rh.wait_for_last_add_confirmed(after, 1.0)
                    now = time.monotonic()
                    if lac > after:
                        seen.append((now, lac))
                        after = lac
            except BaseException as e:  # noqa: BLE001 - reported by the test
                failures.append(e)

        reader = threading.Thread(target=tail, daemon=True)
        reader.start()
        end = time.monotonic() + WRITE_S
        while time.monotonic() < end:
            issued = time.monotonic()

            def confirmed(first, last, error, issued=issued):
                if error is not None:
                    failures.append(error)
                else:
                    acks.append((last, issued, time.monotonic()))
            wh.add_entries_callback([PAYLOAD] * BATCH, confirmed)
        wh.close()
        done.set()
        reader.join(30)
        assert not failures, failures
        assert not reader.is_alive(), "the tailing reader did not reach the end"
    lags, latencies = [], []
    i = 0
    for last, issued, acked in sorted(acks):
        while i < len(seen) and seen[i][1] < last:
            i += 1
        assert i < len(seen), f"the reader never saw entry {last} confirmed"
        lags.append(max(0.0, seen[i][0] - acked))
        latencies.append(acked - issued)
    # the steady middle of the run: no ramp-up, and no draining tail (its LAC comes with close)
    cut = len(acks) // 5
    return lags[cut:-cut], latencies[cut:-cut]


@pytest.mark.bookkeeper(bookies=1)
def test_tailer_sees_an_entry_soon_after_its_ack_with_thousands_queued(bookkeeper_ensemble):
    lags, latencies = _write_and_tail(bookkeeper_ensemble, WRITER)
    lag, latency = statistics.median(lags), statistics.median(latencies)
    assert latency > 0.01, f"the writer's queue was not deep (add latency {latency * 1e3:.1f} ms)"
    # Without the notice the lag is about the add latency (the LAC waits behind the queue).
    assert lag < latency / 4, (f"tail lag p50 {lag * 1e3:.1f} ms against add latency p50 "
                               f"{latency * 1e3:.1f} ms: the LAC waited behind the queued adds")

