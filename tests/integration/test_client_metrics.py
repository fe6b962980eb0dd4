"""Client metrics (issue 24.7) on real bookies: with enableClientMetrics the bookkeeper_client_*
families exist from the first scrape, count adds, reads, ensemble changes and speculative reads,
and several clients of one process add up in the same families without colliding; a client
with metrics off counts nothing."""

from __future__ import annotations

import os
import signal

import pytest
from prometheus_client import REGISTRY, generate_latest

from bookie.client import BookKeeper
from bookie.client.metrics import NAMES
from bookie.testing import LocalBookies

PW = b"pw"
ON = {"enableClientMetrics": "true", "addEntryTimeout": 2.0, "readTimeout": 2.0}


@pytest.fixture(scope="module")
def lb():
    with LocalBookies(4) as bookies:
        yield bookies


def value(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def snapshot() -> dict:
    return {"adds": value("bookkeeper_client_add_entry_total"),
            "latency": value("bookkeeper_client_add_entry_latency_seconds_count"),
            "reads": value("bookkeeper_client_read_entry_total"),
            "changes": value("bookkeeper_client_ensemble_changes_total"),
            "speculative": value("bookkeeper_client_speculative_reads_total")}


def delta(before: dict) -> dict:
    now = snapshot()
    return {k: now[k] - before[k] for k in now}


def test_every_family_exists_from_the_first_scrape(lb):
    with BookKeeper(lb.metadata_uri, ON):
        text = generate_latest(REGISTRY).decode()
    for name in NAMES:
        assert f"\n{name}" in text or text.startswith(name), name


def test_several_clients_add_up_and_a_client_without_metrics_counts_nothing(lb):
    before = snapshot()
    with BookKeeper(lb.metadata_uri, ON) as a, BookKeeper(lb.metadata_uri, ON) as b, \
            BookKeeper(lb.metadata_uri) as off:
        for bk, n in ((a, 5), (b, 7), (off, 11)):
            lh = bk.create_ledger(3, 2, 2, password=PW)
            lh.add_range_async([b"p%d" % i for i in range(n)]).result(30)
            lh.add_entry(b"one more")
            lh.close()
            assert len(list(bk.open_ledger(lh.ledger_id, password=PW).read_entries(0, n))) == n + 1
    assert delta(before) == {"adds": 5 + 1 + 7 + 1, "latency": 14, "reads": 6 + 8,
                             "changes": 0, "speculative": 0}


def test_an_ensemble_change_is_counted(lb):
    before = snapshot()
    with BookKeeper(lb.metadata_uri, ON) as bk:
        lh = bk.create_ledger(3, 3, 3, password=PW)  # an add waits for the change
        assert lh.add_entry(b"before") == 0
        victim = lb.bookies.index(lh.metadata.last_ensemble[0])
        lb.kill(victim)
        try:
            for i in range(5):
                lh.add_entry(b"after %d" % i)
            assert len(lh.metadata.fragments) == 2
        finally:
            lb.start(victim)
        lh.close()
    assert delta(before)["changes"] == 1


def test_speculative_reads_are_counted(lb):
    with BookKeeper(lb.metadata_uri, allowEmptyPassword=True) as writer:
        lh = writer.create_ledger(3, 2, 2, password=PW)
        lh.add_range_async([b"s%d" % i for i in range(300)]).result(30)
        lh.close()
    before = snapshot()
    stopped = lb.bookies.index(lh.metadata.last_ensemble[0])
    with BookKeeper(lb.metadata_uri, ON, speculativeReadTimeout=100, readTimeout=60) as bk:
        rh = bk.open_ledger(lh.ledger_id, password=PW)
        os.killpg(lb.procs[stopped].pid, signal.SIGSTOP)
        try:
            assert len(list(rh.read_entries(0, 299))) == 300
        finally:
            os.killpg(lb.procs[stopped].pid, signal.SIGCONT)
    got = delta(before)
    assert got["reads"] == 300 and got["speculative"] >= 1, got
