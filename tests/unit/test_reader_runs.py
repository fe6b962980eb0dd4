"""A READ answer decoded and taken as one run (DigestManager.decode_many -> EntryRun ->
ReadOp._take_run): the same outcome as entry by entry, bad copies included.

The scripted replicas of test_protocol_reader_corrupt answer here as the I/O thread hands answers
over (``RawEntries``: a lengths frame and the entries back to back), so the one-pass decode and
the whole-answer take run against every kind of bad copy there."""

from __future__ import annotations

import random

import numpy as np
import pytest

from bookie.client.errors import DigestMismatchError
from bookie.client.digest import RUN_MIN_ENTRIES, EntryRun, LedgerEntry
from bookie.client.protocol import actions as A
from bookie.client.protocol.reader import ReadOp
from bookie.wire import Status

from test_protocol_reader_corrupt import (CORRUPTIONS, DIGEST, LEDGER, Replicas, intact, ledger,
                                          payload, replicas_of, run)


def frames(copies: list[bytes]) -> A.RawEntries:
    return A.RawEntries(np.array([len(c) for c in copies], dtype="<u4").tobytes(),
                        b"".join(copies))


class FramedReplicas(Replicas):
    def answer(self, a: A.SendRead) -> A.ReadResponse:
        r = super().answer(a)
        return A.ReadResponse(a, r.status, frames(r.entries)) if r.entries else r


def test_an_intact_answer_is_one_run_with_its_ids():
    out = DIGEST.decode_many(frames([intact(e) for e in range(5, 5 + RUN_MIN_ENTRIES)]))
    assert isinstance(out, EntryRun) and out.intact
    assert out.entry_ids == list(range(5, 5 + RUN_MIN_ENTRIES))
    assert out[2] == LedgerEntry(LEDGER, 7, payload(7), 6, 80)


def test_a_short_answer_is_decoded_entry_by_entry_to_the_same_entries():
    copies = [intact(e) for e in range(RUN_MIN_ENTRIES - 1)]
    out = DIGEST.decode_many(frames(copies))
    assert not isinstance(out, EntryRun)  # no fixed numpy cost for a tailer's few entries
    assert out == DIGEST.decode_many(frames(copies + [intact(RUN_MIN_ENTRIES - 1)]))[:-1]


@pytest.mark.parametrize("kind", sorted(set(CORRUPTIONS) - {"truncated"}))
def test_a_bad_copy_in_a_run_is_the_same_error_as_alone(kind):
    copies = [intact(e) for e in range(4)] + [CORRUPTIONS[kind](4)] + \
        [intact(e) for e in range(5, 30)]
    out = DIGEST.decode_many(frames(copies))
    alone = DIGEST.decode_many(copies)  # entry by entry
    if kind == "another_entry":  # a good copy: it decodes; the reader sees its wrong place
        assert out.intact and out[4].entry_id == 54
    else:
        assert not out.intact and isinstance(out[4], DigestMismatchError)
        assert str(out[4]) == str(alone[4])
    assert [x for i, x in enumerate(out) if i != 4] == [x for i, x in enumerate(alone) if i != 4]


N = 100


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@pytest.mark.parametrize("max_count", [1, 64])
@pytest.mark.parametrize("e_size", [1, 3])
def test_framed_answers_read_around_bad_copies(kind, max_count, e_size):
    info, names = ledger(e_size, min(e_size, 3) if e_size > 1 else 1)
    if e_size == 1:  # one replica: a bad copy fails the read, naming the entry
        held = {names[0]: {e: intact(e) for e in range(N)}}
        held[names[0]][50] = CORRUPTIONS[kind](50)
    else:
        held = {b: {e: intact(e) for e in range(N)} for b in names}
        for e in (0, 4, 5, 11, 50, 99):
            held[replicas_of(info, e)[0]][e] = CORRUPTIONS[kind](e)
    op = ReadOp(info, 0, N - 1, DIGEST.decode, max_count=max_count,
                decode_many=DIGEST.decode_many)
    finished, delivered, _ = run(op, FramedReplicas(held), random.Random(3))
    if e_size == 1:
        assert finished.error is not None and "entry 50" in str(finished.error)
    else:
        assert finished.error is None, finished.error
        assert [x.data for x in delivered] == [payload(e) for e in range(N)]
        assert [x.entry_id for x in delivered] == list(range(N))


def test_a_run_skipping_entries_takes_what_it_brought_and_moves_the_rest():
    info, names = ledger(1, 1)
    op = ReadOp(info, 0, 40, DIGEST.decode, max_count=64, decode_many=DIGEST.decode_many)
    (read,) = op.start()
    # entries 0, 1 then 3..40: 2 is missing there, so the answer is not one run of its places
    brought = [intact(0), intact(1)] + [intact(e) for e in range(3, 41)]
    out = op.handle(A.ReadResponse(read, Status.OK, frames(brought)))
    finished = [a for a in out if isinstance(a, A.Finished)]
    assert finished and "entry 2" in str(finished[0].error)  # its only replica lacks it
