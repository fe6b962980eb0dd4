"""BookKeeper's client API calls (issue 24.4) on real bookies: create_ledger_adv with explicit
entry ids out of order, read_unconfirmed_entries, try_read_last_add_confirmed, last_add_pushed,
in their synchronous and asyncio forms."""

from __future__ import annotations

import asyncio
import time

import pytest

from bookie.client import (AsyncBookKeeper, InvalidArgumentError, LedgerClosedError,
                           LedgerHandleAdv)
from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401

BOOKKEEPER_OPTIONS = {"bookies": 3, "client_config": {"throttle": 100}}
PW = b"pw"


def test_adv_takes_ids_out_of_order_and_returns_each_once_acknowledged(bookkeeper):
    lh = bookkeeper.create_ledger_adv(3, 2, 2, password=PW)
    assert isinstance(lh, LedgerHandleAdv)
    futures = {i: lh.add_entry_async(i, b"entry-%d" % i) for i in (3, 1, 4, 0, 2)}
    assert {i: f.result(timeout=30) for i, f in futures.items()} == {i: i for i in range(5)}
    assert lh.last_add_confirmed == 4 and lh.last_add_pushed == 4
    assert lh.add_entry(5, b"entry-5") == 5
    lh.close()
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW)
    assert [e.data for e in rh.read_entries(0, 5)] == [b"entry-%d" % i for i in range(6)]


def test_adv_lac_advances_over_the_contiguous_prefix_only(bookkeeper):
    lh = bookkeeper.create_ledger_adv(3, 2, 2, password=PW)
    assert lh.add_entry(0, b"a") == 0
    later = [lh.add_entry_async(2, b"c"), lh.add_entry_async(3, b"d")]
    time.sleep(0.5)  # ample time for them to be acknowledged, were they sent
    assert lh.last_add_confirmed == 0 and lh.last_add_pushed == 0
    assert not any(f.done() for f in later)
    assert lh.add_entry(1, b"b") == 1
    assert [f.result(timeout=30) for f in later] == [2, 3]
    assert lh.last_add_confirmed == 3


def test_adv_refuses_repeated_ids_ids_past_the_window_and_ids_missing(bookkeeper):
    lh = bookkeeper.create_ledger_adv(3, 2, 2, password=PW)
    assert lh.add_entry(0, b"a") == 0
    with pytest.raises(InvalidArgumentError, match="entry 0 was added already"):
        lh.add_entry(0, b"again")
    with pytest.raises(InvalidArgumentError, match="window of 100"):
        lh.add_entry(101, b"far")
    with pytest.raises(InvalidArgumentError, match="add_entry\\(entry_id, data\\)"):
        lh.add_entry(b"no id")
    with pytest.raises(InvalidArgumentError, match="needs its id"):
        lh.add_range_async([b"x"])
    held = lh.add_entry_async(5, b"behind a gap")
    lh.close()
    with pytest.raises(LedgerClosedError, match="waited for entry 1"):
        held.result(timeout=10)
    assert bookkeeper.ledger_metadata(lh.ledger_id).last_entry_id == 0


def test_read_unconfirmed_entries_reads_past_the_readers_lac(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW, recovery=False)
    assert rh.last_add_confirmed == -1 and rh.last_add_pushed == -1
    assert list(lh.add_range_async([b"x0", b"x1", b"x2"]).result(timeout=30)) == [0, 1, 2]
    assert lh.last_add_pushed == 2
    with pytest.raises(InvalidArgumentError, match="last add confirmed is -1"):
        list(rh.read_entries(0, 2))
    assert [e.data for e in rh.read_unconfirmed_entries(0, 2)] == [b"x0", b"x1", b"x2"]
    got = rh.read_unconfirmed_entries_async(1, 2).result(timeout=30)
    assert [(e.entry_id, e.data) for e in got] == [(1, b"x1"), (2, b"x2")]
    assert rh.last_add_confirmed == -1  # reading unconfirmed entries confirms nothing


def test_try_read_last_add_confirmed_updates_the_reader(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW)
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW, recovery=False)
    assert rh.try_read_last_add_confirmed() == -1
    for i in range(4):
        lh.add_entry(b"y%d" % i)
    deadline = time.monotonic() + 20  # the writer tells an idle LAC after explicitLacInterval
    while rh.try_read_last_add_confirmed() < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rh.last_add_confirmed == 3 and rh.last_add_pushed == 3
    assert [e.data for e in rh.read_entries(0, 3)] == [b"y%d" % i for i in range(4)]
    assert lh.try_read_last_add_confirmed() == 3  # the writer's own


def test_the_asyncio_forms(bookkeeper_ensemble):
    async def run():
        async with AsyncBookKeeper(bookkeeper_ensemble.metadata_uri) as bk:
            lh = await bk.create_ledger_adv(3, 2, 2, password=PW)
            ids = await asyncio.gather(*(lh.add_entry(i, b"z%d" % i) for i in (2, 0, 1)))
            assert sorted(ids) == [0, 1, 2] and lh.last_add_pushed == 2
            rh = await bk.open_ledger(lh.ledger_id, password=PW, recovery=False)
            assert [e.data for e in await rh.read_unconfirmed_entries(0, 2)] == \
                [b"z0", b"z1", b"z2"]
            deadline = time.monotonic() + 20  # the idle writer's explicit LAC reaches them
            while await rh.try_read_last_add_confirmed() < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert rh.last_add_confirmed == 2
            await lh.close()
    asyncio.run(run())


def test_deferred_sync_keeps_the_lac_until_force(bookkeeper):
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW, write_flags=["deferred_sync"])
    assert [lh.add_entry(b"d%d" % i) for i in range(3)] == [0, 1, 2]  # acknowledged
    assert lh.last_add_confirmed == -1 and lh.last_add_pushed == 2
    rh = bookkeeper.open_ledger(lh.ledger_id, password=PW, recovery=False)
    time.sleep(0.5)  # several explicit LAC intervals: an idle writer would have told its LAC
    assert rh.try_read_last_add_confirmed() == -1 and rh.read_last_add_confirmed() == -1
    assert lh.force() == 2 and lh.last_add_confirmed == 2
    deadline = time.monotonic() + 20  # force sends the bookies the new LAC at once
    while rh.try_read_last_add_confirmed() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert rh.last_add_confirmed == 2
    assert [e.data for e in rh.read_entries(0, 2)] == [b"d0", b"d1", b"d2"]
    lh.add_entry(b"d3")
    lh.close()
    assert bookkeeper.ledger_metadata(lh.ledger_id).last_entry_id == 3


def test_write_flags_are_checked(bookkeeper):
    with pytest.raises(InvalidArgumentError, match="unknown write flag"):
        bookkeeper.create_ledger(3, 2, 2, password=PW, write_flags=["deferred_synk"])
    lh = bookkeeper.create_ledger(3, 2, 2, password=PW, write_flags=["DEFERRED_SYNC"])
    assert lh.add_entry(b"x") == 0 and lh.last_add_confirmed == -1
    lh.close()


def test_deferred_sync_asyncio(bookkeeper_ensemble):
    async def run():
        async with AsyncBookKeeper(bookkeeper_ensemble.metadata_uri) as bk:
            lh = await bk.create_ledger(3, 2, 2, password=PW, write_flags=["deferred_sync"])
            assert await lh.add_many([b"a", b"b"]) == [0, 1]
            assert lh.last_add_confirmed == -1
            assert await lh.force() == 1 and lh.last_add_confirmed == 1
            await lh.close()
    asyncio.run(run())
