"""A tailing reader learns that its ledger ended as soon as the metadata says so.

The bookies never learn that a ledger ended: its last entry is confirmed by no later add, and a
close is a metadata write.  A reader's long poll waits on the bookies, so it watches the
ledger's metadata while it waits (``LedgerHandle._long_poll``): a close ends the poll with the
last entry confirmed.  Before, a tailer with the default 10 s poll got the ledger's last entry,
and learned of the close, 10 s late.  On both metadata stores (the embedded one polls its
watches every 0.1 s; ZooKeeper pushes them), with the documented tailing loop and with
``wait_for_last_add_confirmed``.
"""

from __future__ import annotations

import threading
import time

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies

PW = b"tail-end"
# Each poll here lasts POLL_S, far beyond any wait on a loaded machine: an answer before it is
# the close's (or the LAC's) doing, not the poll's timeout.  No speed is asserted.
POLL_S = 120
PROMPT_S = POLL_S
# the writer's client: no explicit LAC once adds pause, so a ledger's last entry is confirmed
# only by its close (the explicit LAC, 100 ms by default, would tell the bookies too)
QUIET_WRITER = {"explicitLacInterval": 0}


@pytest.fixture(scope="module", params=["embedded", "zookeeper"])
def ensemble(request, tmp_path_factory):
    if request.param == "embedded":
        ens = LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("tail-end")))
    else:
        zk = request.getfixturevalue("zookeeper_server")
        ens = LocalBookies(1, metadata_uri=zk.uri(zk.chroot("/tail-end")),
                           base_dir=str(tmp_path_factory.mktemp("tail-end-zk")))
    with ens:
        yield ens


def _writer_and_reader(ens, writer_bk, reader_bk):
    lh = writer_bk.create_ledger(1, 1, 1, password=PW)
    lh.add_entry(b"e0")
    rh = reader_bk.open_ledger(lh.ledger_id, password=PW, recovery=False)
    return lh, rh


def test_the_tailing_loop_gets_the_last_entry_and_the_close_at_once(ensemble):
    with BookKeeper(ensemble.metadata_uri, QUIET_WRITER) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        lh, rh = _writer_and_reader(ensemble, wbk, rbk)
        seen: list = []
        ended: dict = {}

        def tail() -> None:  # the loop of docs/client.md, with a POLL_S poll
            next_id = 0
            while True:
                entries = rh.read_new_entries_async(next_id - 1, timeout_s=POLL_S).result(POLL_S + 60)
                seen.extend((e.data, time.monotonic()) for e in entries)
                next_id += len(entries)
                if not entries and rh.is_closed and next_id > rh.last_add_confirmed:
                    ended["at"] = time.monotonic()
                    return
        tailer = threading.Thread(target=tail)
        tailer.start()
        for i in range(1, 6):
            lh.add_entry(b"e%d" % i)
            time.sleep(0.05)
        time.sleep(0.3)  # the tailer is parked on entry 5, which no later add confirms
        closed_at = time.monotonic()
        lh.close()
        tailer.join(POLL_S + 60)
        assert not tailer.is_alive()
        assert [d for d, _ in seen] == [b"e%d" % i for i in range(6)]
        assert seen[-1][1] - closed_at < PROMPT_S
        assert ended["at"] - closed_at < PROMPT_S
        assert rh.is_closed and rh.last_add_confirmed == 5


def test_wait_for_lac_returns_the_last_entry_once_the_ledger_is_closed(ensemble):
    with BookKeeper(ensemble.metadata_uri, QUIET_WRITER) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        lh, rh = _writer_and_reader(ensemble, wbk, rbk)
        lh.add_entry(b"e1")
        got: dict = {}

        def wait() -> None:
            start = time.monotonic()
            got["lac"] = rh.wait_for_last_add_confirmed(0, timeout_s=POLL_S)
            got["seconds"] = time.monotonic() - start
        waiter = threading.Thread(target=wait)
        waiter.start()
        time.sleep(0.5)  # parked: the bookie knows LAC 0 (entry 1 confirmed by no later add)
        assert waiter.is_alive(), got
        lh.add_entry(b"e2")  # carries LAC 1: the bookie answers the poll at once
        waiter.join(POLL_S + 60)
        assert got["lac"] >= 1 and got["seconds"] < PROMPT_S
        got.clear()
        waiter = threading.Thread(target=lambda: got.update(
            lac=rh.wait_for_last_add_confirmed(1, timeout_s=POLL_S)))
        waiter.start()  # parked again: the bookie knows LAC 1, entry 2 is confirmed by nothing
        time.sleep(0.5)
        assert waiter.is_alive(), got
        start = time.monotonic()
        lh.close()
        waiter.join(POLL_S + 60)
        assert got["lac"] == 2 and time.monotonic() - start < PROMPT_S
        assert rh.is_closed


def test_a_poll_parked_when_the_ledger_closes_ends_with_its_last_entry(ensemble):
    with BookKeeper(ensemble.metadata_uri, QUIET_WRITER) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        lh, rh = _writer_and_reader(ensemble, wbk, rbk)
        lh.add_entry(b"e1")
        parked = rh.read_new_entries_async(0, timeout_s=POLL_S)  # LAC 0 here and on the bookie
        time.sleep(0.5)
        assert not parked.done()
        start = time.monotonic()
        lh.close()
        entries = parked.result(POLL_S + 60)
        assert time.monotonic() - start < PROMPT_S
        assert [e.data for e in entries] == [b"e1"]
        assert rh.is_closed and rh.last_add_confirmed == 1


def test_a_close_between_two_polls_is_seen_by_the_next_one(ensemble):
    """The watch on: a caught-up reader whose last poll found entries does not re-read the
    metadata before its next poll; a close that lands between the two still ends that poll
    at once (the watch delivers it, now or after the poll parked)."""
    with BookKeeper(ensemble.metadata_uri, QUIET_WRITER) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        lh, rh = _writer_and_reader(ensemble, wbk, rbk)
        parked = rh.read_new_entries_async(-1, timeout_s=POLL_S)
        time.sleep(0.3)  # the poll parks (the bookie knows LAC -1) and the watch starts
        lh.add_entry(b"e1")  # carries LAC 0: the poll is answered with entry 0
        assert [e.data for e in parked.result(10)] == [b"e0"]
        start = time.monotonic()
        lh.close()  # between polls: no poll is parked now
        entries = rh.read_new_entries_async(0, timeout_s=POLL_S).result(POLL_S + 60)
        assert [e.data for e in entries] == [b"e1"]
        assert time.monotonic() - start < PROMPT_S
        assert rh.is_closed and rh.last_add_confirmed == 1


def test_a_caught_up_tailer_reads_the_metadata_once_not_every_round(ensemble, monkeypatch):
    from bookie.client.metadata import ClientStore
    reads = []
    read_info = ClientStore.read_info
    monkeypatch.setattr(ClientStore, "read_info",
                        lambda self, lid: (reads.append(lid), read_info(self, lid))[1])
    # a quiet writer: with the explicit LAC on, a slow round lets it confirm entry i before the
    # poll, and the reader rightly reads one entry further than the piggybacked LAC says
    with BookKeeper(ensemble.metadata_uri, QUIET_WRITER) as wbk, \
            BookKeeper(ensemble.metadata_uri) as rbk:
        lh, rh = _writer_and_reader(ensemble, wbk, rbk)
        del reads[:]
        rounds, upto = 0, -1
        for i in range(1, 101):
            lh.add_entry(b"e%d" % i)  # carries LAC i - 1: a poll after i - 2 is answered at once
            entries = rh.read_new_entries_async(upto, timeout_s=10).result(30)
            rounds += 1
            upto = entries[-1].entry_id if entries else upto
        assert upto == 99 and rounds == 100
        assert len(reads) <= 5, f"{len(reads)} metadata reads in {rounds} rounds"
        lh.close()
