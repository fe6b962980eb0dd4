"""A tailer told LAC = n reads n, even when n lies in a fragment its metadata does not know yet
(issue 21, defect 1).

Five bookies; a writer on (3, 2, 2) over A, B, C writes entries 0..9; a reader opened without
recovery catches up.  Then the add workers of B and C stop (SIGSTOP: their read workers still
answer, saying NO_ENTRY for what they never got); the writer replaces both from entry 10 and
entries 10..19 are acknowledged.  The reader learns LAC 19 from A, and must then read 10..19
from the new fragment: its handle re-reads the metadata when every replica of its old view
answers that it lacks an entry the LAC covers, and reads again on the new ensemble.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

from bookie.client import BookKeeper
from bookie.testing.client_fixtures import TEST_CONFIG, bookkeeper, bookkeeper_ensemble  # noqa: F401

PW = b"tail-pw"
BOOKKEEPER_OPTIONS = {"bookies": 5}


@contextlib.contextmanager
def _add_paths_stopped(ens, bookies):
    """SIGSTOP the add workers of ``bookies`` (their read workers go on answering)."""
    pids = [ens.worker_pid(ens.bookies.index(b), "add") for b in bookies]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _writer_and_reader(bk, ens):
    lh = bk.create_ledger(3, 2, 2, password=PW)
    for i in range(10):
        lh.add_entry(b"e%d" % i, timeout_s=20)
    reader_bk = BookKeeper(ens.metadata_uri, TEST_CONFIG)
    rh = reader_bk.open_ledger(lh.ledger_id, password=PW, recovery=False)
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 9 and time.monotonic() < deadline:  # LAC 8 at least: entry 9 carries it
        got += rh.read_new_entries_async(len(got) - 1, timeout_s=2).result(30)
    assert [e.data for e in got] == [b"e%d" % i for i in range(len(got))]
    return lh, reader_bk, rh, len(got)


def _replace_b_and_c(lh, ens):
    """Stop the add paths of the ensemble's 2nd and 3rd bookies and write 10..19 past them."""
    old = lh.metadata.fragments[0][1]
    stack = contextlib.ExitStack()
    stack.enter_context(_add_paths_stopped(ens, old[1:]))
    for i in range(10, 20):
        lh.add_entry(b"e%d" % i, timeout_s=30)
    assert len(lh.metadata.fragments) > 1, "the writer did not change its ensemble"
    assert not set(old[1:]) & set(lh.metadata.fragments[-1][1])
    return stack


def test_a_parked_tail_read_reads_the_entries_of_a_new_fragment(bookkeeper, bookkeeper_ensemble):
    lh, reader_bk, rh, have = _writer_and_reader(bookkeeper, bookkeeper_ensemble)
    with reader_bk:
        parked = rh.read_new_entries_async(have - 1, timeout_s=30)
        with _replace_b_and_c(lh, bookkeeper_ensemble):
            got = parked.result(60)
            assert got and [e.entry_id for e in got] == list(range(have, have + len(got)))
            assert [e.data for e in got] == [b"e%d" % e.entry_id for e in got]


def test_wait_for_lac_then_read_entries_reads_a_new_fragment(bookkeeper, bookkeeper_ensemble):
    lh, reader_bk, rh, have = _writer_and_reader(bookkeeper, bookkeeper_ensemble)
    with reader_bk, ThreadPoolExecutor(1) as pool:
        polled = pool.submit(rh.wait_for_last_add_confirmed, 9, 30)  # parked before the change
        time.sleep(0.5)
        with _replace_b_and_c(lh, bookkeeper_ensemble):
            lac = polled.result(60)
            assert lac >= 10
            got = list(rh.read_entries(0, lac))
            assert [e.data for e in got] == [b"e%d" % i for i in range(lac + 1)]


def _tail(rh) -> list:
    """The tailing loop of docs/client.md; the payloads it read."""
    next_id, seen = 0, []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        entries = rh.read_new_entries_async(next_id - 1, timeout_s=5).result(60)
        seen += [e.data for e in entries]
        next_id += len(entries)
        if not entries and rh.is_closed and next_id > rh.last_add_confirmed:
            break
    return seen


def test_the_documented_tailing_loop_follows_a_writer_across_an_ensemble_change(
        bookkeeper, bookkeeper_ensemble):
    lh, reader_bk, rh, have = _writer_and_reader(bookkeeper, bookkeeper_ensemble)
    with reader_bk, ThreadPoolExecutor(1) as pool:
        tail = pool.submit(_tail, rh)
        time.sleep(0.5)
        with _replace_b_and_c(lh, bookkeeper_ensemble):
            lh.close(timeout_s=30)
            assert tail.result(120) == [b"e%d" % i for i in range(20)]
