"""A log writer whose append failed appends no more: a later append acknowledged in the next
ledger would leave a gap in the log (found by the fault harness's 30-minute soak: an append
failed with NotEnoughBookiesError in one ledger while the next append was acknowledged as entry
0 of the ledger the writer had rolled to).  The ledger handle here is scripted: the rule under
test is the writer's ordering logic alone."""

from concurrent.futures import Future

import pytest

from bookie.client import LogWriterFailedError, NotEnoughBookiesError
from bookie.client.log import LogWriter


class ScriptedLedger:
    ledger_id = 7

    def __init__(self):
        self.futures = []

    def add_entry_async(self, data):
        f = Future()
        self.futures.append(f)
        return f


def writer():
    lh = ScriptedLedger()
    return LogWriter(None, "events", lh, [lh.ledger_id], 0, 1, (3, 2, 2, "crc32c", b"pw"),
                     None, None), lh


def test_an_append_after_a_failed_one_is_refused():
    w, lh = writer()
    first = w.append_async(b"a")
    lh.futures[0].set_exception(NotEnoughBookiesError("no spare bookie", ledger_id=7))
    with pytest.raises(NotEnoughBookiesError):
        first.result(1)
    with pytest.raises(LogWriterFailedError, match="can append no more"):
        w.append_async(b"b")
    assert len(lh.futures) == 1  # nothing more reached the ledger


def test_appends_before_the_failure_still_complete_in_order():
    w, lh = writer()
    futures = [w.append_async(b"%d" % i) for i in range(3)]
    lh.futures[0].set_result(0)
    lh.futures[1].set_exception(NotEnoughBookiesError("no spare bookie", ledger_id=7))
    lh.futures[2].set_exception(NotEnoughBookiesError("no spare bookie", ledger_id=7))
    assert futures[0].result(1).entry_id == 0
    for f in futures[1:]:
        with pytest.raises(NotEnoughBookiesError):
            f.result(1)
    assert w.roll_due is False
    with pytest.raises(LogWriterFailedError):
        w.roll()
