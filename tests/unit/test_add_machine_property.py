"""The add worker's machine (bookie.core.adds) over any interleaving of requests, owner lookups
answered, journals stalling and coming back (ring full / room again), durability per journal,
no room on the ledger disks, the bookie turning read-only, and restarts (everything waiting is
gone with the worker; what was placed is in the journal and replayed, never decided again).

The driver below is the add worker's loop reduced to what it does with the machine
(``workers/add_worker.py``): one ``take`` per message, the ``resume`` and ``retry`` generators
when the owner resolver answers or a ring may have room, the ``Durable`` event, and the actions
carried out (a ``PlaceAdd`` advances its journal and binds its ledger in the real rule book, as
the worker's ``table.apply`` does).  The view is a plain object: ring room per journal, the
owner resolver's answers (a ledger is known once its owner step ran), read-only.  The step
order is the machine's own: nothing here copies it.

Checked after every step: per ledger, records are placed in arrival order (invariant 1); a
journal with ring room has nothing stalled, whatever other journals do, and the loop stops
reading only when every journal is stalled (invariant 2, issue 31's defect 2); what waits stays
bounded (3); adds are refused READ_ONLY only while read-only or out of room, and the no-room
state changes alternate (5); each journal's answers leave in placement order, only once
durable, each once, and at the end every request neither refused nor lost with a restart is
answered (6).
"""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from bookie import wire
from bookie.core.adds import (AddMachine, AnswerAt, Durable, NoRoom, OwnerDone, PlaceAdd, ReadOnly,
                              Refuse, Request, RoomAgain, Stall)
from bookie.core.answers import JournalAnswers, Pending
from bookie.core.ledgers import LedgerTable, Owner, Rejected
from bookie.storage import records
from bookie.testing.rawclient import make_entry
from bookie.wire import Op, Status
from add_views import PlainView

JOURNALS = 2
LEDGERS = st.integers(0, 3)  # ledger l's records go to journal l % 2
JOURNAL = st.integers(0, JOURNALS - 1)
MAX_WAITING = 6
KEY = b"writer-key"

step = st.one_of(
    st.tuples(st.just("request"), LEDGERS),
    st.tuples(st.just("request"), LEDGERS),
    st.tuples(st.just("owner"), LEDGERS),
    st.tuples(st.just("stall"), JOURNAL),
    st.tuples(st.just("room"), JOURNAL),
    st.tuples(st.just("durable"), JOURNAL, st.integers(1, 4)),
    st.tuples(st.just("no_room"),),
    st.tuples(st.just("room_again"),),
    st.tuples(st.just("readonly"), st.booleans()),
    st.tuples(st.just("restart"),),
)


class View(PlainView):
    """What the loop knows (core/adds.py ``View``), as plain state."""

    def __init__(self, loop: Loop):
        self.loop = loop
        self.known: set[int] = set()  # ledgers whose owner the resolver has answered
        self.asked: set[int] = set()
        self.ro = False

    def readonly(self):
        return self.ro

    def owner_ready(self, ledger_id, key, credential, lane):
        if ledger_id in self.known:
            return True
        self.asked.add(ledger_id)
        return False

    def owner(self, ledger_id):
        return Owner.NO_CHECK if ledger_id in self.known else None

    def write_position(self, journal):
        return self.loop.position[journal]

    def safe_to(self, journal):
        return self.loop.position[journal]

    def ring_free(self, journal):
        return 1 << 20 if self.loop.room[journal] else 0

    def ring_capacity(self, journal):
        return 1 << 20


class Loop:
    """The add worker's loop, reduced to carrying out the real machine's actions."""

    def __init__(self):
        self.room = [True] * JOURNALS  # ring room per journal
        self.table = LedgerTable()  # the rule book: what was placed binds (replayed at a restart)
        self.view = View(self)
        self.placed: list[int] = []  # every request placed (its seq), in order
        self.ledger_of: dict[int, int] = {}
        self.position = [0] * JOURNALS  # each journal's logical end
        self.durable = [0] * JOURNALS
        self.answered: list[int] = []
        self.answered_by_journal: list[list[int]] = [[] for _ in range(JOURNALS)]
        self.placed_by_journal: list[list[int]] = [[] for _ in range(JOURNALS)]
        self.refused: list[int] = []
        self.lost: list[int] = []  # waiting, or placed and unanswered, at a restart
        self.read_only_changes: list[bool] = []
        self.rung: list[int] = []
        self.seq = 0
        self.now = 0.0
        self._new_machine()

    def _new_machine(self) -> None:
        self.machine = AddMachine(self.table, JOURNALS, MAX_WAITING, 1 << 20)
        self.machine.answers = JournalAnswers(JOURNALS, 1000, lambda frame, ident: b"p")

    # -- the loop's paths --------------------------------------------------------------------------
    def execute(self, actions) -> None:
        for a in actions:
            kind = type(a)
            if kind is PlaceAdd:
                r = a.request
                j = a.journal
                assert j == r.ledger_id % JOURNALS and self.room[j]
                self.position[j] += 1
                self.placed.append(r.token)
                self.placed_by_journal[j].append(r.token)
                self.table.apply(records.Record(records.ADD_BATCH, a.flags, r.ledger_id, a.key, -1,
                                                a.lengths, 0, 0))
                self.machine.answers.append(Pending(self.position[j], [None, r.token], r.ledger_id,
                                                    journal=j), None)
            elif kind is Refuse:
                assert a.status in (Status.TOO_MANY_REQUESTS, Status.READ_ONLY), a
                if a.status == Status.READ_ONLY:
                    assert self.view.ro or self.machine.full
                self.refused.append(a.request.token)
            elif kind is Stall:
                assert not self.room[a.journal]
                self.rung.append(a.journal)
            else:
                assert kind is OwnerDone or kind is AnswerAt, a  # no duplicates here
                assert kind is OwnerDone

    def request(self, ledger_id: int) -> None:
        if self.machine.all_stalled():
            return  # the loop does not read: the request stays in ZeroMQ's queue (not sent here)
        self.seq += 1
        self.ledger_of[self.seq] = ledger_id
        lengths, data = wire.pack_batch([make_entry(ledger_id, self.seq, b"x")])
        r = Request(int(Op.ADD), ledger_id, ledger_id % JOURNALS, 0, KEY, (lengths, data), False,
                    self.seq)
        self.execute(self.machine.take(r, self.view, self.now))

    def owner(self, ledger_id: int) -> None:
        self.view.known.add(ledger_id)
        for actions in self.machine.resume([ledger_id], self.view, self.now):
            self.execute(actions)

    def ring_room(self, journal: int) -> None:
        self.room[journal] = True
        for actions in self.machine.retry(self.view, self.now):
            self.execute(actions)

    def make_durable(self, journal: int, k: int) -> None:
        self.durable[journal] = min(self.position[journal], self.durable[journal] + k)
        for a in self.machine.handle(Durable(tuple(self.durable)), self.now):
            seq = a.pending.reply[1]
            self.answered.append(seq)
            self.answered_by_journal[self.ledger_of[seq] % JOURNALS].append(seq)
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
            self.lost.extend(r.token for r in q)
        for q in m.parked.values():
            self.lost.extend(r.token for r in q)
        self.lost.extend(p.reply[1] for p in m.answers)
        self.durable = list(self.position)
        if m.full:
            self.read_only_changes.append(False)  # the next worker starts writable
        self._new_machine()

    # -- checks ------------------------------------------------------------------------------------
    def check(self) -> None:
        m = self.machine
        # 1: per ledger, placed in arrival order; never twice
        assert len(self.placed) == len(set(self.placed)), "a request placed twice"
        for lid in range(4):
            seqs = [s for s in self.placed if self.ledger_of[s] == lid]
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
            assert len(got) == len(set(got))
            order = {s: i for i, s in enumerate(self.placed_by_journal[j])}
            assert [order[s] for s in got] == sorted(order[s] for s in got)

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
        elif kind == "readonly":
            loop.view.ro = s[1]
        else:
            loop.restart()
        loop.check()
    loop.drain()
    loop.check()
    m = loop.machine
    assert m.waiting() == 0 and not m.answers
    done = set(loop.answered) | set(loop.refused) | set(loop.lost)
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
    assert loop.placed == [3]
    assert loop.rung == [1]  # the stalled request rang its journal: room comes as it writes
    assert not loop.machine.all_stalled()
    loop.ring_room(1)
    assert loop.placed == [3, 1, 2]
    loop.check()


def test_a_request_parked_for_its_owner_keeps_the_later_ones_of_its_ledger_behind_it_across_a_stall():
    loop = Loop()
    loop.request(1)  # owner unknown: parked
    assert loop.view.asked == {1}
    loop.room[1] = False
    loop.owner(3)
    loop.request(3)  # journal 1 full: stalled
    loop.request(1)  # behind the parked one of its ledger
    loop.owner(1)  # the first of ledger 1 finds journal 1 stalled: queued behind r2
    loop.check()
    loop.ring_room(1)
    assert loop.placed == [2, 1, 3]
    loop.check()


def test_a_bound_ledger_asks_the_owner_resolver_nothing():
    loop = Loop()
    loop.owner(0)
    loop.request(0)
    loop.view.known.clear()  # the resolver forgot it: a bound ledger does not need it
    loop.request(0)
    assert loop.placed == [1, 2] and not loop.view.asked


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
