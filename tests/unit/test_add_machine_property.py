"""The add worker's machine (bookie.core.adds) over any interleaving of requests, owner lookups
answered, journals stalling and coming back (ring full / room again), durability per journal,
no room on the ledger disks, and restarts (everything waiting is gone with the worker; what was
placed is in the journal and replayed, never decided again).

The driver below is the add worker's loop reduced to its decisions (``workers/add_worker.py``:
``take`` / ``handle`` / ``resume`` / ``retry_stalled`` / ``answer_durable``): a request goes
through ``arrive``; deciding it parks it when its ledger's owner is not known yet, stalls it when
its journal's ring is full, else places it.  The machine is the real one.

Checked after every step: per ledger, records are placed in arrival order (invariant 1); a
journal with ring room has nothing stalled, whatever other journals do, and the loop stops
reading only when every journal is stalled (invariant 2, issue 31's defect 2); what waits stays
bounded (3); adds are refused READ_ONLY exactly while there is no room (5); each journal's answers
leave in placement order, only once durable, each once, and at the end every request neither
refused nor lost with a restart is answered (6).
"""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from bookie.core.adds import (GO, AddMachine, Decide, Durable, NoRoom, OwnersAnswered, ReadOnly,
                              RingRoom, RoomAgain)
from bookie.core.answers import JournalAnswers, Pending
from bookie.core.ledgers import Rejected
from bookie.wire import Status

JOURNALS = 2
LEDGERS = st.integers(0, 3)  # ledger l's records go to journal l % 2
JOURNAL = st.integers(0, JOURNALS - 1)
MAX_WAITING = 6

step = st.one_of(
    st.tuples(st.just("request"), LEDGERS),
    st.tuples(st.just("request"), LEDGERS),
    st.tuples(st.just("owner"), LEDGERS),
    st.tuples(st.just("stall"), JOURNAL),
    st.tuples(st.just("room"), JOURNAL),
    st.tuples(st.just("durable"), JOURNAL, st.integers(1, 4)),
    st.tuples(st.just("no_room"),),
    st.tuples(st.just("room_again"),),
    st.tuples(st.just("restart"),),
)


class Request:
    __slots__ = ("seq", "ledger_id")

    def __init__(self, seq: int, ledger_id: int):
        self.seq = seq
        self.ledger_id = ledger_id

    def __repr__(self) -> str:
        return f"r{self.seq}@{self.ledger_id}"


class Loop:
    """The add worker's loop, reduced to its decisions, over the real machine."""

    def __init__(self):
        self.room = [True] * JOURNALS  # ring room per journal
        self.known: set[int] = set()  # ledgers whose owner the resolver has answered
        self.placed: list[Request] = []  # every record placed, in order (the journals)
        self.position = [0] * JOURNALS  # each journal's logical end
        self.durable = [0] * JOURNALS
        self.answered: list[Request] = []
        self.answered_by_journal: list[list[Request]] = [[] for _ in range(JOURNALS)]
        self.placed_by_journal: list[list[Request]] = [[] for _ in range(JOURNALS)]
        self.refused: list[Request] = []
        self.lost: list[Request] = []  # waiting, or placed and unanswered, at a restart
        self.read_only_changes: list[bool] = []
        self.seq = 0
        self.now = 0.0
        self._new_machine()

    def _new_machine(self) -> None:
        self.machine = AddMachine(None, JOURNALS, MAX_WAITING, 1 << 20)
        self.machine.answers = JournalAnswers(JOURNALS, 1000, lambda frame, ident: b"p")

    # -- the loop's paths --------------------------------------------------------------------------
    def decide(self, r: Request, first_stalled: bool = False) -> None:
        m = self.machine
        journal = r.ledger_id % JOURNALS
        try:
            if m.arrive(r.ledger_id, journal, r, first_stalled) != GO:
                return
            if r.ledger_id not in self.known:
                m.park(r.ledger_id, r)  # the owner resolver is asked
                return
        except Rejected as e:
            assert e.status == Status.TOO_MANY_REQUESTS
            self.refused.append(r)
            return
        if not self.room[journal]:
            m.stall(journal, r, again=first_stalled)
            return
        self.position[journal] += 1
        self.placed.append(r)
        self.placed_by_journal[journal].append(r)
        m.answers.append(Pending(self.position[journal], [None, r], r.ledger_id, journal=journal))

    def request(self, ledger_id: int) -> None:
        if self.machine.all_stalled():
            return  # the loop does not read: the request stays in ZeroMQ's queue (not sent here)
        self.seq += 1
        self.decide(Request(self.seq, ledger_id))

    def owner(self, ledger_id: int) -> None:
        self.known.add(ledger_id)
        for a in self.machine.handle(OwnersAnswered(frozenset({ledger_id})), self.now):
            assert type(a) is Decide
            self.decide(a.request, a.first_stalled)

    def ring_room(self, journal: int) -> None:
        self.room[journal] = True
        while True:
            actions = self.machine.handle(RingRoom(journal), self.now)
            if not actions:
                return
            (a,) = actions
            self.decide(a.request, a.first_stalled)

    def make_durable(self, journal: int, k: int) -> None:
        self.durable[journal] = min(self.position[journal], self.durable[journal] + k)
        for a in self.machine.handle(Durable(tuple(self.durable)), self.now):
            r = a.pending.reply[1]
            self.answered.append(r)
            self.answered_by_journal[r.ledger_id % JOURNALS].append(r)
            assert a.pending.end <= self.durable[journal]  # only once durable (invariant 6)

    def no_room(self, on: bool) -> None:
        for a in self.machine.handle(NoRoom() if on else RoomAgain(), self.now):
            assert type(a) is ReadOnly
            self.read_only_changes.append(a.on)

    def restart(self) -> None:
        """The worker dies: what waited is gone (its clients time out); placed records are in
        the journal, made durable and replayed by the next worker; their answers are gone."""
        m = self.machine
        for q in m.stalled:
            self.lost.extend(q)
        for q in m.parked.values():
            self.lost.extend(q)
        self.lost.extend(p.reply[1] for p in m.answers)
        self.durable = list(self.position)
        if m.full:
            self.read_only_changes.append(False)  # the next worker starts writable
        self._new_machine()

    # -- checks ------------------------------------------------------------------------------------
    def check(self) -> None:
        m = self.machine
        # 1: per ledger, placed in arrival order; never twice
        seen = [r.seq for r in self.placed]
        assert len(seen) == len(set(seen)), "a request placed twice"
        for lid in range(4):
            seqs = [r.seq for r in self.placed if r.ledger_id == lid]
            assert seqs == sorted(seqs), f"ledger {lid} placed out of order: {seqs}"
        # 2: a journal with room holds nothing stalled, whatever the others do
        for j in range(JOURNALS):
            if self.room[j]:
                assert not m.stalled[j], f"journal {j} has room but holds {list(m.stalled[j])}"
        assert m.all_stalled() == (not any(self.room) and all(m.stalled))
        # 3: bounded (one request per journal whose record found the ring full is kept over it)
        assert m.waiting() <= MAX_WAITING + JOURNALS
        assert m.waiting() == sum(map(len, m.stalled)) + sum(map(len, m.parked.values()))
        # 5: read-only exactly while full; the state changes alternate
        assert (m.refusal(False) == Status.READ_ONLY) == m.full
        assert all(a != b for a, b in zip(self.read_only_changes, self.read_only_changes[1:]))
        # 6: each journal's answers in placement order, each once
        for j in range(JOURNALS):
            got = self.answered_by_journal[j]
            assert len(got) == len({r.seq for r in got})
            order = {r.seq: i for i, r in enumerate(self.placed_by_journal[j])}
            assert [order[r.seq] for r in got] == sorted(order[r.seq] for r in got)

    def drain(self) -> None:
        """Every owner answered, every ring with room, every record durable."""
        for lid in range(4):
            self.owner(lid)
        for j in range(JOURNALS):
            self.ring_room(j)
        for lid in range(4):
            self.owner(lid)  # requests re-parked behind a stall, now with their owner known
        for j in range(JOURNALS):
            self.make_durable(j, 1 << 30)


def run(steps) -> Loop:
    loop = Loop()
    for s in steps:
        loop.now += 0.1
        kind = s[0]
        if kind == "request":
            loop.request(s[1])
        elif kind == "owner":
            loop.owner(s[1])
        elif kind == "stall":
            loop.room[s[1]] = False  # the next record for it finds the ring full
        elif kind == "room":
            loop.ring_room(s[1])
        elif kind == "durable":
            loop.make_durable(s[1], s[2])
        elif kind == "no_room":
            loop.no_room(True)
        elif kind == "room_again":
            loop.no_room(False)
        else:
            loop.restart()
        loop.check()
    loop.drain()
    loop.check()
    m = loop.machine
    assert m.waiting() == 0 and not m.answers
    done = {r.seq for r in loop.answered} | {r.seq for r in loop.refused} | {r.seq for r in loop.lost}
    assert done == set(range(1, loop.seq + 1)), "a request neither answered, refused nor lost"
    return loop


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=60))
# issue 31, defect 2: journal 1's ring full; ledger 0 (journal 0) must still be placed
@example(steps=[("owner", 0), ("owner", 1), ("stall", 1), ("request", 1), ("request", 0)])
def test_the_add_machine_over_any_interleaving(steps):
    run(steps)


def test_a_full_ring_holds_back_only_its_own_journal():
    """Issue 31, defect 2, as the machine's decision: with journal 1's ring full, ledger 2's
    request (journal 0) is placed at once, and ledger 3's wait behind journal 1's first."""
    loop = Loop()
    for lid in (2, 3):
        loop.owner(lid)
    loop.room[1] = False
    loop.request(3)
    loop.request(3)
    loop.request(2)
    assert [r.ledger_id for r in loop.placed] == [2]
    assert not loop.machine.all_stalled()
    loop.ring_room(1)
    assert [r.seq for r in loop.placed] == [3, 1, 2]
    loop.check()


def test_a_request_parked_for_its_owner_keeps_the_later_ones_of_its_ledger_behind_it_across_a_stall():
    loop = Loop()
    loop.request(1)  # owner unknown: parked
    loop.room[1] = False
    loop.owner(3)
    loop.request(3)  # journal 1 full: stalled
    loop.request(1)  # behind the parked one of its ledger
    loop.owner(1)  # the first of ledger 1 finds journal 1 stalled: queued behind r2
    loop.check()
    loop.ring_room(1)
    assert [r.seq for r in loop.placed] == [2, 1, 3]
    loop.check()


@given(st.booleans(), st.booleans(), st.booleans(), st.integers(0, 100), st.integers(0, 100),
       st.booleans())
def test_a_recovery_re_add_of_held_entries_is_answered_while_read_only(readonly, full, recovery,
                                                                      write, safe_to, uncommitted):
    """Invariant 5's re-add (issue 39 item 7): while read-only a normal add is refused READ_ONLY
    at once; a recovery add's READ_ONLY is only returned (raised once it would store anything);
    an all-duplicate add's answer waits behind what is stored while full, and never past
    ``write``, so ``durable_refusing`` never turns it into READ_ONLY."""
    m = AddMachine(None, 1, 4, 1 << 20)
    m.full = full
    try:
        status = m.check_writable(readonly, 0, recovery)
    except Rejected as e:
        assert e.status == Status.READ_ONLY and (readonly or full) and not recovery
    else:
        assert status == (Status.READ_ONLY if readonly or full else None)
    safe_to = min(safe_to, write)  # what is stored never passes what is placed
    end = m.duplicate_answer(write, safe_to, uncommitted)
    assert end <= write
    if full and not uncommitted:
        assert end <= safe_to
