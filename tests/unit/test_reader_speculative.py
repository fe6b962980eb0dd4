"""Speculative reads in the pure ReadOp: a replica that stops answering costs one speculative
timeout, not a read timeout.

The op is driven as the I/O thread drives it: requests out, answers and Ticks in, with the time.
Scripted bookies answer as bookies do (the entries of the run asked for, from its first one);
a "stalled" bookie answers nothing until the test lets it (a late answer) or times it out.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from bookie.client.digest import DigestManager
from bookie.client.errors import BKTimeoutError
from bookie.client.protocol import actions as A
from bookie.client.protocol.ledger import LedgerInfo
from bookie.client.protocol.quorum import write_set
from bookie.client.protocol.reader import Deliver, ReadOp
from bookie.wire import Status

LEDGER = 7
DIGEST = DigestManager(LEDGER, "crc32c", b"pw")
SPEC_S = 0.5


def raw(entry_id: int) -> bytes:
    return DIGEST.encode(entry_id, entry_id - 1, 10 * (entry_id + 1), b"v%d" % entry_id)


def info(e: int, w: int) -> tuple[LedgerInfo, tuple[str, ...]]:
    names = tuple(f"b{i}:1" for i in range(e))
    return LedgerInfo(LEDGER, e, w, 1, fragments=((0, names),)), names


def answer(req: A.SendRead) -> A.ReadResponse:
    """A healthy replica's answer: every entry of the run it holds (it holds all it was sent)."""
    ids = range(req.first_entry_id, req.first_entry_id + req.max_count * req.stride, req.stride)
    return A.ReadResponse(req, Status.OK, [raw(e) for e in ids if e <= LAST[0]])


LAST = [0]  # the ledger's last entry, for answer()


def make(e: int, w: int, last: int, spec_s: float = SPEC_S, avoid=frozenset()):
    LAST[0] = last
    inf, names = info(e, w)
    return ReadOp(inf, 0, last, DIGEST.decode, speculative_timeout_s=spec_s, avoid=avoid), names


class Run:
    """Collects what the op hands out: the entries delivered, Finished, Suspects, sends."""

    def __init__(self, op: ReadOp):
        self.op, self.entries, self.finished, self.suspects = op, [], [], []
        self.pending: list[A.SendRead] = []

    def take(self, actions) -> None:
        for a in actions:
            if isinstance(a, A.SendRead):
                self.pending.append(a)
            elif isinstance(a, Deliver):
                self.entries.extend(a.entries)
            elif isinstance(a, A.Finished):
                self.finished.append(a)
            elif isinstance(a, A.Suspect):
                self.suspects.append(a.bookie)

    def answer_all_but(self, stalled: set, now: float) -> list[A.SendRead]:
        """Answer every pending READ except those to ``stalled`` (returned, still pending)."""
        held = []
        while self.pending:
            req = self.pending.pop(0)
            if req.bookie in stalled:
                held.append(req)
            else:
                self.take(self.op.handle(answer(req), now))
        self.pending = held
        return held


def test_an_unanswered_read_moves_to_the_next_replica_at_the_first_tick_past_the_timeout():
    op, names = make(3, 2, 29)
    run = Run(op)
    run.take(op.start(now=100.0))
    run.answer_all_but({names[1]}, 100.1)
    assert not run.finished
    run.take(op.handle(A.Tick(), 100.0 + SPEC_S / 2))  # not yet
    assert run.suspects == [] and all(r.bookie == names[1] for r in run.pending)
    run.take(op.handle(A.Tick(), 100.0 + SPEC_S))
    assert run.suspects == [names[1]]
    # entries 1, 4, 7, ... (write set b1, b2) go to b2
    moved = [r for r in run.pending if r.bookie != names[1]]
    assert [(r.bookie, r.first_entry_id, r.stride) for r in moved] == [(names[2], 1, 3)]
    run.answer_all_but({names[1]}, 100.7)
    assert [x.entry_id for x in run.entries] == list(range(30))
    assert run.finished and run.finished[0].error is None
    # the stalled READ answering late changes nothing
    assert op.handle(answer(run.pending[0]), 101.0) == []


def test_a_late_answer_from_the_stalled_replica_still_counts():
    op, names = make(3, 2, 29)
    run = Run(op)
    run.take(op.start(now=0.0))
    run.answer_all_but({names[1]}, 0.1)
    stalled = list(run.pending)
    run.take(op.handle(A.Tick(), SPEC_S))
    # now b2 stalls too; b1's late answer brings the entries it held
    for req in stalled:
        run.take(op.handle(answer(req), 0.8))
    assert [x.entry_id for x in run.entries] == list(range(30))
    assert run.finished[0].error is None


def test_an_entry_left_waiting_on_a_late_replica_fails_only_once_that_one_fails_too():
    op, names = make(3, 2, 8)
    run = Run(op)
    run.take(op.start(now=0.0))
    run.answer_all_but({names[1]}, 0.1)
    stalled = list(run.pending)
    run.take(op.handle(A.Tick(), SPEC_S))
    spec = [r for r in run.pending if r.bookie == names[2]]
    # the speculative READ fails (the replica times out): the late one may still answer
    run.take(op.handle(A.ReadResponse(spec[0], A.TIMEOUT), 1.0))
    assert not run.finished
    for req in stalled:
        run.take(op.handle(A.ReadResponse(req, A.TIMEOUT), 5.0))
    assert len(run.finished) == 1 and isinstance(run.finished[0].error, BKTimeoutError)


def test_no_speculation_without_a_timeout_or_with_every_replica_asked():
    op, names = make(3, 2, 29, spec_s=0.0)
    run = Run(op)
    run.take(op.start(now=0.0))
    run.answer_all_but({names[1]}, 0.1)
    assert op.handle(A.Tick(), 100.0) == []
    op, names = make(1, 1, 9)  # one replica: nothing else to ask, wait for it
    run = Run(op)
    run.take(op.start(now=0.0))
    run.answer_all_but({names[0]}, 0.1)
    assert op.handle(A.Tick(), 100.0) == [A.Suspect(names[0])]
    assert op.handle(A.Tick(), 200.0) == []


@settings(max_examples=150, deadline=None)
@given(shape=st.integers(1, 5).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e))),
       last=st.integers(0, 40), data=st.data())
def test_a_read_completes_exactly_when_every_entry_has_a_replica_that_answers(shape, last, data):
    e, w = shape
    op, names = make(e, w, last)
    stalled = set(data.draw(st.sets(st.sampled_from(names))))
    seed = data.draw(st.integers(0, 2**16))
    rng = random.Random(seed)
    run = Run(op)
    now = 0.0
    run.take(op.start(now))
    for _ in range(200):  # answers in random order, time passing in Ticks
        if run.finished:
            break
        live = [r for r in run.pending if r.bookie not in stalled]
        if live and rng.random() < 0.8:
            req = rng.choice(live)
            run.pending.remove(req)
            run.take(op.handle(answer(req), now))
        else:
            now += SPEC_S / 4
            run.take(op.handle(A.Tick(), now))
    if not run.finished:  # what is left waits on stalled replicas: they time out
        for req in list(run.pending):
            run.pending.remove(req)
            run.take(op.handle(A.ReadResponse(req, A.TIMEOUT), now + 10))
    readable = all(any(names[p] not in stalled for p in write_set(x, e, w))
                   for x in range(last + 1))
    assert len(run.finished) == 1
    if readable:
        assert run.finished[0].error is None
        assert [x.entry_id for x in run.entries] == list(range(last + 1))
        assert [x.data for x in run.entries] == [b"v%d" % x for x in range(last + 1)]
    else:
        assert isinstance(run.finished[0].error, BKTimeoutError)
    # (a healthy replica that answers later than the timeout is a suspect too: never another)
    assert set(run.suspects) <= set(names)
