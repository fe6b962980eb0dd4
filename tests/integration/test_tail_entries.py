"""A tailer whose long polls carry the entries (issue 42 item 1, wire.py WITH_ENTRIES) gets
every entry once, in order and byte for byte: with a slow writer (and then from the polls
alone, no READ), across a bookie restart, across an ensemble change, and across a SIGKILL of
the read worker while its poll is parked.  The tailer is the loop docs/client.md shows, with
``read_new_entries_async``; whatever a poll could not bring is read as before."""

from __future__ import annotations

import threading
import time

from bookie.client import BookKeeper
from bookie.client.errors import BookKeeperError
from bookie.testing import LocalBookies

from bookie_logs import dumped, metric

PW = b"tail-entries"
FAST_LAC = {"explicitLacInterval": 20}  # the writer tells the bookies its LAC soon after a pause


class Tailer:
    """``read_new_entries_async`` in a loop on its own thread, until it holds ``count`` entries
    or ``stop`` is set; a poll that fails (a bookie down) is tried again."""

    def __init__(self, rh, count: int, poll_s: float = 1.0):
        self.rh, self.count, self.poll_s = rh, count, poll_s
        self.got: list = []  # (entry_id, data)
        self.errors: list = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while len(self.got) < self.count and not self.stop.is_set():
            after = len(self.got) - 1
            try:
                entries = self.rh.read_new_entries_async(after, timeout_s=self.poll_s,
                                                         max_entries=64).result(60)
            except BookKeeperError as e:
                self.errors.append(repr(e))
                time.sleep(0.1)
                continue
            self.got.extend((e.entry_id, e.data) for e in entries)

    def join(self, timeout_s: float = 120) -> None:
        self.thread.join(timeout_s)
        self.stop.set()
        assert not self.thread.is_alive(), f"tailer stuck at {len(self.got)} of {self.count}"


def payload(i: int) -> bytes:
    return b"entry %05d " % i + bytes([i % 251]) * (i % 300)


def check(tailer: Tailer, count: int) -> None:
    assert [e for e, _ in tailer.got] == list(range(count)), "not every entry once, in order"
    assert [d for _, d in tailer.got] == [payload(i) for i in range(count)]


def write(lh, ids, pause_s: float = 0.0) -> None:
    for i in ids:
        lh.add_entry(payload(i))
        if pause_s:
            time.sleep(pause_s)


def test_a_slow_writers_entries_all_ride_on_the_polls():
    with dumped(LocalBookies(1, admin_http=True)) as ens:
        with BookKeeper(ens.metadata_uri, FAST_LAC) as wbk, BookKeeper(ens.metadata_uri) as rbk:
            lh = wbk.create_ledger(1, 1, 1, password=PW)
            rh = rbk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            reads = 'bookie_requests_total{op="READ",status="OK"}'
            before = metric(ens, 0, reads)
            tailer = Tailer(rh, 40)
            write(lh, range(40), pause_s=0.03)
            tailer.join()
            check(tailer, 40)
            time.sleep(1.5)  # the read worker publishes its figures once a second
            # every entry came with a poll's answer: the tailer sent no READ
            assert metric(ens, 0, reads) == before
            assert metric(ens, 0, 'bookie_requests_total{op="READ_LAC",status="OK"}') > 0  # (the name matches)
            lh.close()


def test_a_tailer_gets_every_entry_across_a_bookie_restart():
    with dumped(LocalBookies(1)) as ens:
        with BookKeeper(ens.metadata_uri, FAST_LAC) as wbk, BookKeeper(ens.metadata_uri) as rbk:
            lh = wbk.create_ledger(1, 1, 1, password=PW)
            rh = rbk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            tailer = Tailer(rh, 120, poll_s=0.5)
            write(lh, range(60), pause_s=0.005)
            time.sleep(0.5)  # the tailer parked on the last entry
            ens.stop(0)
            time.sleep(0.5)
            ens.start(0)
            write(lh, range(60, 120), pause_s=0.005)
            tailer.join()
            check(tailer, 120)
            lh.close()


def test_a_tailer_gets_every_entry_across_an_ensemble_change():
    with dumped(LocalBookies(3)) as ens:
        with BookKeeper(ens.metadata_uri, FAST_LAC) as wbk, BookKeeper(ens.metadata_uri) as rbk:
            lh = wbk.create_ledger(2, 2, 2, password=PW)
            rh = rbk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            tailer = Tailer(rh, 150, poll_s=0.5)
            write(lh, range(50), pause_s=0.005)
            victim = ens.bookies.index(lh.metadata.last_ensemble[0])
            ens.kill(victim)
            write(lh, range(50, 150), pause_s=0.005)  # the writer replaces the bookie
            assert len(lh.metadata.fragments) >= 2
            tailer.join()
            check(tailer, 150)
            lh.close()


def test_a_tailer_gets_every_entry_across_a_read_worker_sigkill_while_parked():
    with dumped(LocalBookies(1)) as ens:
        with BookKeeper(ens.metadata_uri, FAST_LAC) as wbk, BookKeeper(ens.metadata_uri) as rbk:
            lh = wbk.create_ledger(1, 1, 1, password=PW)
            rh = rbk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            tailer = Tailer(rh, 100, poll_s=5.0)  # parked for long: the kill finds it there
            write(lh, range(50))
            deadline = time.monotonic() + 30
            while len(tailer.got) < 50 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # parked on entry 49
            old = ens.kill_worker(0, "read")
            ens.wait_worker_restarted(0, "read", old)
            write(lh, range(50, 100), pause_s=0.002)
            tailer.join()
            check(tailer, 100)
            lh.close()
