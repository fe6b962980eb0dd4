"""GC of over-replicated copies (issue 24 item 9, ``gcOverreplicatedLedgerWaitTime``) on real
bookies: a bookie drops its copies of a closed ledger whose metadata names it in no fragment,
after the wait, and keeps those of a ledger that names it in any fragment and of an open one
(rule: bookie.core.naming)."""

from __future__ import annotations

import time

from bookie.metadata import LedgerMetadata, open_metadata
from bookie.metadata.ledger import LedgerState
from bookie.testing import LocalBookies
from bookie.testing.rawclient import RawBookieClient, make_entry
from bookie.wire import Status
from bookie_logs import metric
import waiting

KEY = b"gc-overreplicated-key"
WAIT_MS = 2000
CONF = {"gcWaitTime": "300", "gcOverreplicatedLedgerWaitTime": str(WAIT_MS),
        "flushInterval": "50"}


def _ledger(store, fragments, last=None) -> int:
    """A ledger of ensemble size 1 over ``fragments``; closed at ``last`` when given."""
    meta = LedgerMetadata(1, 1, 1, fragments=fragments)
    ledger_id, version = store.create_ledger(meta)
    if last is not None:
        meta.state, meta.last_entry_id = LedgerState.CLOSED, last
        store.write_ledger(ledger_id, meta, version)
    return ledger_id


def _put(bookie: str, ledger_id: int, entries, copy: bool = False) -> None:
    """Adds to ``bookie``; ``copy``: as recovery adds (what a copy to a bookie the metadata does
    not name yet, or any more, must be: a normal add there is refused)."""
    with RawBookieClient(bookie, timeout_s=30) as c:
        for e in entries:
            assert c.add(ledger_id, [make_entry(ledger_id, e, b"e%d" % e)], KEY,
                         recovery=copy) == Status.OK


def _status(bookie: str, ledger_id: int, entry_id: int) -> Status:
    with RawBookieClient(bookie, timeout_s=30) as c:
        return Status(c.read(ledger_id, entry_id)[0])


def test_a_bookie_drops_copies_no_fragment_names_it_for_after_the_wait(tmp_path):
    with LocalBookies(2, base_dir=str(tmp_path / "b"), conf=CONF, admin_http=True) as lb:
        a, b = lb.bookies
        with open_metadata(lb.metadata_uri) as store:
            # B came back after it was healed around: the metadata names only A
            over = _ledger(store, [(0, [a])], last=4)
            # B holds the tail the writer moved to it: named in the second fragment
            tail = _ledger(store, [(0, [a]), (3, [b])], last=4)
            # an open ledger on A: its writer may still change its ensemble
            open_ = _ledger(store, [(0, [a])])
        _put(a, over, range(5))
        _put(b, over, range(5), copy=True)
        _put(a, tail, range(3))
        _put(b, tail, range(5))
        _put(b, open_, range(2), copy=True)
        seen = time.monotonic()
        assert _status(b, over, 0) == Status.OK  # not before the wait
        assert waiting.poll(lambda: _status(b, over, 0) == Status.NO_ENTRY, 90), \
            "B still holds the over-replicated ledger"
        assert time.monotonic() - seen >= WAIT_MS / 1000.0
        assert all(_status(b, over, e) == Status.NO_ENTRY for e in range(5))  # its record stays
        assert all(_status(a, over, e) == Status.OK for e in range(5))  # A is named: kept
        assert all(_status(b, tail, e) == Status.OK for e in range(5))  # named in a fragment
        assert all(_status(b, open_, e) == Status.OK for e in range(2))  # not closed
        assert metric(lb, 1, "bookie_gc_overreplicated_ledgers_total") == 1.0
        assert metric(lb, 0, "bookie_gc_overreplicated_ledgers_total") == 0.0
        # no tombstone: the ledger is not deleted, B may be given a copy again
        _put(b, over, [0], copy=True)
        assert _status(b, over, 0) == Status.OK
