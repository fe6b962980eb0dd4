"""Faults inside the client stay with the operation they concern (real bookies).

Deleting a ledger that the same client is writing fails that handle's adds with a clear error
(it used to kill the client's I/O thread, and every other ledger then failed with "client
closed").  An operation whose code raises unexpectedly fails alone and is logged on the
``bookie.client`` logger; the I/O thread goes on with everything else.
"""

from __future__ import annotations

import logging

import pytest

from bookie.client import BookKeeperError, NoSuchLedgerError
from bookie.client.digest import master_key
from bookie.client.drivers import OpRunner, Throttle
from bookie.client.io import IOThread
from bookie.client.protocol import actions as A
from bookie.client.protocol.lac import LacQuorumOp
from bookie.testing.client_fixtures import bookkeeper, bookkeeper_ensemble  # noqa: F401

PW = b"pw"
BOOKKEEPER_OPTIONS = {"bookies": 3}


def test_deleting_a_ledger_this_client_writes_fails_only_that_handles_adds(bookkeeper):
    bk = bookkeeper
    doomed = bk.create_ledger(3, 2, 2, password=PW)
    other = bk.create_ledger(3, 2, 2, password=PW)
    assert doomed.add_entry(b"a", timeout_s=10) == 0
    assert other.add_entry(b"a", timeout_s=10) == 0
    in_flight = [doomed.add_entry_async(b"p%d" % i) for i in range(50)]
    bk.delete_ledger(doomed.ledger_id)
    for f in in_flight:  # each completes: added before the delete, or failed by it
        try:
            assert f.result(10) >= 1
        except NoSuchLedgerError:
            pass
    with pytest.raises(NoSuchLedgerError, match="deleted"):
        doomed.add_entry(b"late", timeout_s=10)
    with pytest.raises(NoSuchLedgerError, match="deleted"):
        doomed.add_range_async([b"x", b"y"]).result(10)
    with pytest.raises(NoSuchLedgerError):
        doomed.close(timeout_s=10)
    # everything else of the client goes on
    assert other.add_entry(b"b", timeout_s=10) == 1
    fresh = bk.create_ledger(3, 2, 2, password=PW)
    assert fresh.add_entry(b"c", timeout_s=10) == 0
    fresh.close(timeout_s=10)
    other.close(timeout_s=10)
    rh = bk.open_ledger(other.ledger_id, password=PW)
    assert [e.data for e in rh.read_entries(0, 1)] == [b"a", b"b"]


class RaisesOnAnswer:
    """An operation with a bug: asks a bookie for a LAC, then raises on the answer."""

    def __init__(self, bookie: str):
        self.bookie = bookie

    def start(self) -> list:
        return [A.SendReadLac(self.bookie)]

    def handle(self, event, now: float = 0.0) -> list:
        raise RuntimeError("a bug in an operation")


class RaisesAtStart:
    def start(self) -> list:
        raise RuntimeError("a bug in an operation's start")


def test_an_operation_that_raises_fails_alone_and_is_logged(bookkeeper, bookkeeper_ensemble,
                                                            caplog):
    lh = bookkeeper.create_ledger(3, 3, 2, password=PW)
    for i in range(3):
        lh.add_entry(b"e%d" % i, timeout_s=10)
    io = IOThread(add_timeout_s=2.0, read_timeout_s=2.0, batch_max_entries=64,
                  batch_max_bytes=1 << 20, list_bookies=list, write_metadata=None)
    io.resolver = bookkeeper._resolver  # the bookies' addresses and keys, as the client's own
    runner = OpRunner(io, Throttle(100), operation_timeout_s=10.0)
    key = master_key(PW)
    try:
        with caplog.at_level(logging.ERROR, logger="bookie.client"):
            for op in (RaisesOnAnswer(bookkeeper_ensemble.bookies[0]), RaisesAtStart()):
                with pytest.raises(BookKeeperError, match="failed unexpectedly"):
                    runner.wait(runner.run(op, lh.ledger_id, key))
        logged = [r for r in caplog.records if r.name == "bookie.client" and r.exc_info]
        assert len(logged) == 2
        assert "a bug in an operation" in logged[0].exc_text
        # the I/O thread lives on: a real operation on it completes
        lac = runner.wait(runner.run(LacQuorumOp(lh.metadata, fence=False), lh.ledger_id, key))
        assert 1 <= lac <= 2
    finally:
        io.close()
    lh.close(timeout_s=10)
