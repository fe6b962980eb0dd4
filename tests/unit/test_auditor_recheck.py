"""The auditor repeats its full pass while healing after a loss (issue 32, item 1).

A full pass marks the ledgers it lists when it runs.  A ledger that comes to name a lost bookie
after that pass (created by a client whose list of bookies was stale, listed a moment late) was
marked only at the next change of membership; in the nemesis that never came, and 120 s after a
bookie was lost for good a ledger still kept one copy of entries.  Real LMDB store, a clock of
the test's own.
"""

from __future__ import annotations

import pytest
import waiting

from bookie.autorecovery.auditor import LOST_RECHECK_S, LOST_WINDOW_S, Auditor
from bookie.metadata import LedgerMetadata, LedgerState, open_metadata
from bookie.metadata.underreplication import UnderReplication

A, B, C = "bk-a", "bk-b", "bk-c"


@pytest.fixture
def store(tmp_path):
    with open_metadata(f"lmdb://{tmp_path}/md", create=True, lease_ms=1000,
                       watch_poll_s=0.05) as s:
        yield s


def closed_ledger(store, ensemble) -> int:
    meta = LedgerMetadata(ensemble_size=2, write_quorum=2, ack_quorum=2,
                          state=LedgerState.CLOSED, last_entry_id=9, length=90,
                          fragments=[(0, list(ensemble))])
    return store.create_ledger(meta)[0]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_ledger_naming_a_lost_bookie_after_the_pass_is_marked_at_the_next_recheck(store):
    regs = {b: store.register_bookie(b) for b in (A, B, C)}
    clock = Clock()
    auditor = Auditor(store, delay_s=0, clock=clock)
    try:
        assert auditor.tick()  # the first pass: nothing lost
        regs.pop(C).close()
        waiting.wait_for(lambda: C not in store.registered_bookies(), 10, "C unregistered")
        clock.now = 1.0
        assert auditor.tick()  # C lost: a pass, nothing names it yet
        late = closed_ledger(store, [A, C])  # names C after that pass
        clock.now = 1.0 + LOST_RECHECK_S / 2
        assert not auditor.tick()  # not yet: at most one pass per LOST_RECHECK_S
        clock.now = 1.0 + LOST_RECHECK_S
        assert auditor.tick()
        assert UnderReplication(store).marks() == {late: [C]}
        # long after the loss, with nothing newly marked: no more repeats
        clock.now = 1.0 + LOST_WINDOW_S + 2 * LOST_RECHECK_S
        assert auditor.tick()  # the last pass marked a ledger: one more
        clock.now += LOST_RECHECK_S
        assert not auditor.tick()
    finally:
        for reg in regs.values():
            reg.close()
