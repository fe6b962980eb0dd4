"""A fence answered NO_LEDGER is no fence (client/protocol/lac.py): a bookie the metadata names
fences a ledger it holds nothing of and answers LAC -1, so NO_LEDGER means a bookie that did not
fence (the metadata does not name it: another bookie on the address). Pure protocol logic."""

from bookie.client.errors import LedgerRecoveryError
from bookie.client.protocol import actions as A
from bookie.client.protocol.lac import LacQuorumOp
from bookie.client.protocol.ledger import LedgerInfo
from bookie.wire import Status

ENSEMBLE = ("b0:1", "b1:1", "b2:1")


def _op(fence: bool) -> LacQuorumOp:
    info = LedgerInfo(7, 3, 3, 2, fragments=((0, ENSEMBLE),))  # E3 Qw3 Qa2: fence quorum 2
    op = LacQuorumOp(info, fence=fence)
    op.start()
    return op


def _answer(op, bookie, status, lac=-1):
    return op.handle(A.LacResponse(A.SendReadLac(bookie, fence=op.fence), status, lac, lac))


def test_fence_no_ledger_does_not_count_towards_the_fence_quorum():
    op = _op(fence=True)
    assert _answer(op, "b0:1", Status.OK, 4) == []
    assert _answer(op, "b1:1", Status.NO_LEDGER) == []  # b1 did not fence: not covered yet
    (done,) = _answer(op, "b2:1", Status.OK, 3)
    assert done.error is None and done.result == 4


def test_fence_refused_no_ledger_by_too_many_fails_the_recovery():
    op = _op(fence=True)
    _answer(op, "b0:1", Status.OK, 4)
    _answer(op, "b1:1", Status.NO_LEDGER)
    (done,) = _answer(op, "b2:1", Status.NO_LEDGER)
    assert isinstance(done.error, LedgerRecoveryError) and "NO_LEDGER" in str(done.error)


def test_a_fenced_empty_bookie_still_counts_as_lac_minus_one():
    op = _op(fence=True)
    _answer(op, "b0:1", Status.OK, -1)  # a named bookie with nothing: fenced, LAC -1
    (done,) = _answer(op, "b1:1", Status.NO_ENTRY)
    assert done.error is None and done.result == -1


def test_a_plain_lac_read_still_takes_no_ledger_as_nothing_there():
    op = _op(fence=False)
    _answer(op, "b0:1", Status.NO_LEDGER)
    (done,) = _answer(op, "b1:1", Status.NO_LEDGER)
    assert done.error is None and done.result == -1
