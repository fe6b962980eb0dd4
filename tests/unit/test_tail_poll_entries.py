"""A tailer's long poll that asks for entries (issue 42 item 1), as pure logic: which bookie
``LongPollLacOp`` asks for them, what it keeps of the answer that finishes it, its fall back for
a bookie that refuses the flag; and ``LedgerHandle._carried_entries``, which takes of them only
what a read would (digest, ledger id, ids in order from the one asked, no gap, none past the
LAC)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from bookie import wire
from bookie.client.digest import DigestManager
from bookie.client.handle import LedgerHandle
from bookie.client.metadata import LedgerMetadata, to_info
from bookie.client.protocol import actions as A
from bookie.client.protocol.lac import LongPollLacOp
from bookie.client.protocol.ledger import LedgerInfo
from bookie.wire import Status

LID = 9
ENS = ("a:1", "b:1", "c:1")


def raw(entries) -> A.RawEntries:
    lengths = np.array([len(e) for e in entries], dtype=wire.LENGTHS_DTYPE).tobytes()
    return A.RawEntries.checked(lengths, b"".join(entries))


def test_one_bookie_is_asked_for_the_entries_the_next_entrys_first_replica():
    info = LedgerInfo(LID, 3, 2, 2, fragments=((0, ENS),))
    op = LongPollLacOp(info, 4, 1.0, max_entries=100, max_bytes=1 << 20)
    sends = op.start()
    assert [s.bookie for s in sends] == list(ENS)
    assert [s.max_entries for s in sends] == [0, 0, 100]  # entry 5 starts at 5 % 3 = 2
    assert all(s.long_poll_after == 4 for s in sends)
    assert [s.max_entries for s in LongPollLacOp(info, 4, 1.0).start()] == [0, 0, 0]
    plain = LongPollLacOp(info, 4, 1.0, max_entries=100, plain={"c:1"})
    assert [s.max_entries for s in plain.start()] == [0, 0, 0]


def test_the_answer_that_finishes_the_op_leaves_its_entries():
    info = LedgerInfo(LID, 1, 1, 1, fragments=((0, ("a:1",)),))
    op = LongPollLacOp(info, 4, 1.0, max_entries=10, max_bytes=1 << 20)
    (send,) = op.start()
    entries = raw([b"x" * 40])
    out = op.handle(A.LacResponse(send, Status.OK, 6, 6, entries))
    assert out == [A.Finished(result=6)] and op.entries is entries and not op.refused


def test_an_answer_not_past_the_entry_leaves_none():
    info = LedgerInfo(LID, 1, 1, 1, fragments=((0, ("a:1",)),))
    op = LongPollLacOp(info, 4, 1.0, max_entries=10)
    (send,) = op.start()
    assert op.handle(A.LacResponse(send, Status.OK, 4, 4, raw([]))) == [A.Finished(result=4)]
    assert op.entries is None


def test_a_bookie_refusing_the_flag_is_polled_plain_and_named():
    info = LedgerInfo(LID, 3, 3, 2, fragments=((0, ENS),))
    op = LongPollLacOp(info, 2, 1.0, max_entries=10)  # entry 3: position 0
    sends = op.start()
    assert sends[0].max_entries == 10
    again = op.handle(A.LacResponse(sends[0], Status.BAD_REQUEST))
    assert again == [A.SendReadLac("a:1", long_poll_after=2, timeout_s=1.0)]
    assert op.refused == {"a:1"} and not op.done and "a:1" in op.pending
    # the plain poll refused too: a failure like any other, not polled again
    assert op.handle(A.LacResponse(again[0], Status.BAD_REQUEST)) == []
    assert op.handle(A.LacResponse(sends[1], Status.OK, 3, 3)) == [A.Finished(result=3)]
    assert op.entries is None  # the answer that finished it carried none


# -- the handle's check of what a poll carried ---------------------------------------------------

class _NoRunner:
    pass


def _handle():
    record = LedgerMetadata(1, 1, 1, fragments=[(0, ["a:1"])])
    dm = DigestManager(LID, "crc32c", b"pw")
    return LedgerHandle(LID, to_info(LID, record), dm, b"key", _NoRunner(), None, 1 << 20,
                        last_add_confirmed=-1), dm


@settings(max_examples=200, deadline=None)
@given(after=st.integers(-1, 50), n=st.integers(0, 40), want=st.integers(1, 60),
       bad=st.one_of(st.none(), st.integers(0, 39)),
       kind=st.sampled_from(["digest", "ledger", "id", "gap"]))
def test_carried_entries_are_taken_only_as_a_read_would(after, n, want, bad, kind):
    rh, dm = _handle()
    other = DigestManager(LID + 1, "crc32c", b"pw")
    ids = list(range(after + 1, after + 1 + n))
    entries = [dm.encode(e, e - 1, 0, b"payload %d" % e) for e in ids]
    if bad is not None and bad < n:
        e = ids[bad]
        if kind == "digest":
            entries[bad] = entries[bad][:-1] + bytes([entries[bad][-1] ^ 1])
        elif kind == "ledger":
            entries[bad] = other.encode(e, e - 1, 0, b"payload %d" % e)
        elif kind == "id":
            entries[bad] = dm.encode(e + 100, e - 1, 0, b"payload %d" % e)
        else:
            del entries[bad]
    last = after + want
    got = rh._carried_entries(raw(entries), after, last)
    good = n if bad is None or bad >= n else bad
    expect = ids[:min(good, want)]
    assert [g.entry_id for g in got] == expect
    assert [g.data for g in got] == [b"payload %d" % e for e in expect]
    assert all(g.ledger_id == LID for g in got)


def test_nothing_carried_is_nothing_taken():
    rh, _ = _handle()
    assert rh._carried_entries(None, 4, 10) == [] and rh._carried_entries(raw([]), 4, 10) == []


@pytest.mark.parametrize("count", [1, 40, 300])  # entry by entry, and decoded in one pass
def test_a_whole_run_is_taken(count):
    rh, dm = _handle()
    entries = [dm.encode(e, e - 1, 0, b"p" * 100) for e in range(count)]
    got = rh._carried_entries(raw(entries), -1, count - 1)
    assert [g.entry_id for g in got] == list(range(count))
