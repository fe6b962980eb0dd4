"""DEFERRED_SYNC that pays, on real bookies (issue 34): a deferred-sync add is acknowledged once
the bookie stored it, before its journal synced it; ``force()`` answers only once the journals
of the whole ensemble synced; ``close()`` forces first.

"Before the journal synced" is shown with a journal worker that cannot sync at all: it is stopped
(SIGSTOP), so nothing new becomes durable until it runs again.  A normal add waits for it; a
deferred-sync add does not, and it is readable at once (read-after-ack).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import pytest

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Flag, Op, Status
from bookie import wire

PW = b"pw"


@pytest.mark.parametrize("spin_us", [0, 2000])
def test_deferred_adds_are_acknowledged_while_the_journal_cannot_sync_and_force_waits_for_it(spin_us):
    """Also with the add worker spinning while answers wait (``idleSpinMicros``): it looks at
    DURABLE more often, never answers a normal add before it."""
    with LocalBookies(1, conf={"idleSpinMicros": str(spin_us)}) as ens, BookKeeper(ens.metadata_uri) as bk:
        deferred = bk.create_ledger(1, 1, 1, password=PW, write_flags=["deferred_sync"])
        normal = bk.create_ledger(1, 1, 1, password=PW)
        assert deferred.add_entry(b"warm") == 0 and normal.add_entry(b"warm") == 0
        journal = ens.kill_worker(0, "journal", signal.SIGSTOP)
        pool = concurrent.futures.ThreadPoolExecutor(2)
        try:
            # acknowledged with the journal stopped (unlike `slow_add` below, which waits for it)
            assert [deferred.add_entry(b"d%d" % i) for i in range(1, 6)] == [1, 2, 3, 4, 5]
            reader = bk.open_ledger(deferred.ledger_id, password=PW, recovery=False)
            assert [e.data for e in reader.read_unconfirmed_entries(1, 5)] == [
                b"d1", b"d2", b"d3", b"d4", b"d5"]  # stored: readable at once
            slow_add = pool.submit(normal.add_entry, b"n1")
            force = pool.submit(deferred.force, 30.0)
            time.sleep(1.0)
            assert not slow_add.done()  # a normal add still waits for its fdatasync
            assert not force.done() and deferred.last_add_confirmed == -1  # so does the force
        finally:
            os.kill(journal, signal.SIGCONT)
        assert force.result(timeout=30) == 5 and deferred.last_add_confirmed == 5
        assert slow_add.result(timeout=30) == 1
        pool.shutdown()
        deferred.add_entry(b"d6")
        deferred.close()  # forces first
        assert bk.ledger_metadata(deferred.ledger_id).last_entry_id == 6


def test_close_forces_first_and_waits_for_the_journal():
    with LocalBookies(1) as ens, BookKeeper(ens.metadata_uri) as bk:
        lh = bk.create_ledger(1, 1, 1, password=PW, write_flags=["deferred_sync"])
        assert lh.add_entry(b"a") == 0
        journal = ens.kill_worker(0, "journal", signal.SIGSTOP)
        pool = concurrent.futures.ThreadPoolExecutor(1)
        try:
            assert lh.add_entry(b"b") == 1
            closing = pool.submit(lh.close)
            time.sleep(1.0)
            assert not closing.done()  # the close waits for its force
            assert bk.ledger_metadata(lh.ledger_id).last_entry_id == -1  # not closed yet
        finally:
            os.kill(journal, signal.SIGCONT)
        closing.result(timeout=30)
        pool.shutdown()
        assert bk.ledger_metadata(lh.ledger_id).last_entry_id == 1


def test_force_ledger_on_the_wire():
    with LocalBookies(1, conf={"metadataServiceUri": ""}) as ens:
        with RawBookieClient(ens.bookies[0], timeout_s=10) as c:
            def add(entry_id: int, flags: int) -> int:
                lengths, data = wire.pack_batch([make_entry(5, entry_id, b"x")])
                return c.request(c.add_sock, Op.ADD, 5, flags, [b"k", lengths, data])[0]

            def force(ledger_id: int, flags: int = 0, body=()) -> int:
                return c.request(c.add_sock, Op.FORCE_LEDGER, ledger_id, flags, body)[0]

            assert add(0, Flag.DEFERRED_SYNC) == Status.OK
            assert force(5) == Status.OK
            assert force(77) == Status.OK  # a ledger it holds nothing of: nothing to sync
            assert force(5, body=[b"body"]) == Status.BAD_REQUEST
            assert force(5, flags=Flag.FENCE) == Status.BAD_REQUEST
            assert add(1, Flag.DEFERRED_SYNC | Flag.RECOVERY_ADD) == Status.BAD_REQUEST
            assert add(1, 0x40) == Status.BAD_REQUEST


def test_sigkill_after_force_loses_nothing_forced():
    with LocalBookies(2) as ens, BookKeeper(ens.metadata_uri, {"addEntryTimeout": 5.0}) as bk:
        lh = bk.create_ledger(2, 2, 2, password=PW, write_flags=["deferred_sync"])
        for i in range(200):
            lh.add_entry_async(b"e%d" % i)
        assert lh.force(30.0) == 199 and lh.last_add_confirmed == 199
        ens.kill(0)
        ens.kill(1)
        ens.start(0)
        ens.start(1)
        reader = bk.open_ledger(lh.ledger_id, password=PW)  # recovery: fences and closes
        assert reader.last_add_confirmed >= 199
        assert [e.data for e in reader.read_entries(0, 199)] == [b"e%d" % i for i in range(200)]
