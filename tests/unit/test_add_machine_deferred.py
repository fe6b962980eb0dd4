"""core/adds.py invariant 6 with DEFERRED_SYNC and FORCE_LEDGER, over any interleaving of
requests, index commits (``safe_to``: stored) and journal syncs (DURABLE), with the bookie
read-only or not: a deferred add's answer leaves once its record is stored, durable or not;
every other answer (normal add, fence, LAC, force) only once stored and durable; a force only
once every record of its ledger placed before it is durable; each journal's answers in order,
each once, all of them in the end.  The machine and the answer queues are the real ones."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from bookie.core.adds import AddMachine, Durable, NoRoom, RoomAgain
from bookie.core.answers import JournalAnswers, Pending
from bookie.wire import Op, Status, pack_header

JOURNALS = 2
KINDS = ("add", "deferred", "fence", "lac", "force")

step = st.one_of(
    st.tuples(st.just("request"), st.sampled_from(KINDS), st.integers(0, 3)),
    st.tuples(st.just("request"), st.sampled_from(KINDS[:2]), st.integers(0, 3)),
    st.tuples(st.just("commit"),),  # the index commit: everything placed is stored
    st.tuples(st.just("sync"), st.integers(0, JOURNALS - 1), st.integers(1, 3)),
    st.tuples(st.just("full"), st.booleans()),
)


class Loop:
    def __init__(self):
        self.m = AddMachine(None, JOURNALS, 100, 1 << 20)
        self.m.answers = JournalAnswers(JOURNALS, 1000, lambda frame, ident: b"p")
        self.position = [0] * JOURNALS  # each journal's end (WRITE)
        self.stored = [0] * JOURNALS  # safe_to
        self.durable = [0] * JOURNALS
        self.records: list[list[tuple[int, int]]] = [[] for _ in range(JOURNALS)]  # (end, ledger)
        self.sent: list = []
        self.answered: list = []
        self.seq = 0

    def request(self, kind: str, ledger_id: int) -> None:
        j = ledger_id % JOURNALS
        self.seq += 1
        if kind == "force":  # places nothing: its "record" ends where the journal ends now
            end, op = self.position[j], Op.FORCE_LEDGER
        else:
            self.position[j] += 1
            end = self.position[j]
            self.records[j].append((end, ledger_id))
            op = {"add": Op.ADD, "deferred": Op.ADD, "lac": Op.WRITE_LAC, "fence": -1}[kind]
        reply = ([None, b"r", b"F", b"t", b"s"] if kind == "fence"
                 else [b"c", pack_header(op, Status.OK, self.seq, ledger_id)])
        p = Pending(end, reply, ledger_id, op, journal=j, deferred=kind == "deferred")
        p.taken_at = float(self.seq)
        self.m.answers.append(p)
        self.sent.append((kind, p))

    def answer(self) -> None:
        for a in self.m.handle(Durable(tuple(self.durable), tuple(self.stored)), 0.0):
            p = a.pending
            j = p.journal
            kind = next(k for k, q in self.sent if q is p)
            assert p.end <= self.durable[j] or (p.end <= self.stored[j] and kind == "deferred"
                                                and not self.m.full), "answered too early"
            if p.status == Status.OK and kind != "fence" and kind != "force":
                assert p.end <= self.stored[j], "an OK add or LAC not stored (read-after-ack)"
            if kind == "force":  # every record of its ledger before it is durable
                assert all(end <= self.durable[j] for end, lid in self.records[j]
                           if end <= p.end and lid == p.ledger_id)
                assert p.status == Status.OK
            self.answered.append(p)

    def check(self) -> None:
        for j in range(JOURNALS):
            got = [p.taken_at for p in self.answered if p.journal == j]
            assert got == sorted(got) and len(got) == len(set(got))


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
def test_deferred_answers_leave_once_stored_the_rest_once_durable(steps):
    loop = Loop()
    for s in steps:
        if s[0] == "request":
            loop.request(s[1], s[2])
        elif s[0] == "commit":
            loop.stored = list(loop.position)
        elif s[0] == "sync":
            j = s[1]
            loop.durable[j] = min(loop.position[j], loop.durable[j] + s[2])
        else:
            loop.m.handle(NoRoom() if s[1] else RoomAgain(), 0.0)
        loop.answer()
        loop.check()
    loop.stored, loop.durable = list(loop.position), list(loop.position)
    loop.answer()
    loop.check()
    assert len(loop.answered) == len(loop.sent)


def test_a_deferred_add_leaves_before_its_journal_syncs_a_normal_one_does_not():
    loop = Loop()
    loop.request("deferred", 0)
    loop.request("add", 2)  # the same journal
    loop.stored = list(loop.position)
    loop.answer()
    assert [p.end for p in loop.answered] == [1]  # the deferred add, stored, not synced
    loop.request("force", 0)
    loop.answer()
    assert len(loop.answered) == 1  # the normal add and the force wait for the sync
    loop.durable = list(loop.position)
    loop.answer()
    assert len(loop.answered) == 3


def test_while_read_only_a_deferred_add_waits_for_durable_too():
    loop = Loop()
    loop.m.handle(NoRoom(), 0.0)
    loop.request("deferred", 0)
    loop.stored = list(loop.position)
    loop.answer()
    assert not loop.answered
    loop.durable = list(loop.position)
    loop.answer()
    assert len(loop.answered) == 1
