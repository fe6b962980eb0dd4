"""The add machine's answers while read-only for want of space (core/adds.py invariant 5,
issue 32 item 4): each leaves once its journal made it durable, in order; an add or a LAC whose
record is not stored is refused READ_ONLY, never acknowledged; a fence is answered OK."""

from bookie import wire
from bookie.core.adds import AddMachine, NoRoom, RoomAgain
from bookie.core.answers import JournalAnswers, Pending
from bookie.core.ledgers import LedgerTable
from bookie.wire import Op, Status


def machine(journals=1):
    m = AddMachine(LedgerTable(), journals, max_waiting=100, max_entry_bytes=1 << 20)
    m.answers = JournalAnswers(journals, 100, lambda frame, ident: ident)
    return m


def add(m, end, ledger_id, journal=0, op=Op.ADD):
    m.answers.admit(journal, b"", b"client", op)
    p = Pending(end, [b"client", wire.pack_header(op, Status.OK, end, ledger_id)], ledger_id, op,
                journal=journal)
    m.answers.append(p)
    return p


def fence(m, end, ledger_id, journal=0):
    p = Pending(end, [None, b"read", b"F", b"t%d" % end, wire.STATUS.pack(Status.OK)], ledger_id, -1,
                journal=journal)
    m.answers.append(p)
    return p


def test_while_full_answers_leave_when_durable_and_the_unstored_adds_are_refused():
    m = machine()
    stored = add(m, 10, 1)           # in the entry log and the index: OK once durable
    held = add(m, 20, 1)             # met the full disk: not stored
    f = fence(m, 30, 1)              # a recovery's fence of the same ledger
    lac = add(m, 40, 2, op=Op.WRITE_LAC)
    m.handle(NoRoom(), 0.0)
    assert list(m.due([5], [10])) == []                     # nothing durable yet
    assert list(m.due([35], [10])) == [stored, held, f]      # in order, no wait for room
    assert [stored.status, held.status, f.status] == [Status.OK, Status.READ_ONLY, Status.OK]
    assert f.reply[-1] == wire.STATUS.pack(Status.OK)
    assert wire.HEADER.unpack(held.reply[1])[2] == Op.ADD
    assert list(m.due([40], [10])) == [lac] and lac.status == Status.READ_ONLY
    assert len(m.answers) == 0


def test_while_writable_an_answer_waits_for_its_record_to_be_stored():
    m = machine()
    a = add(m, 10, 1)
    f = fence(m, 20, 1)
    assert list(m.due([30], [10])) == [a]        # the fence's record is not stored yet: waits
    assert list(m.due([30], [20])) == [f] and f.status == Status.OK


def test_room_again_restores_the_rule_and_journals_stay_apart():
    m = machine(journals=2)
    m.handle(NoRoom(), 0.0)
    a0 = add(m, 10, 0, journal=0)
    a1 = add(m, 10, 1, journal=1)
    assert list(m.due([10, 0], [0, 0])) == [a0] and a0.status == Status.READ_ONLY
    m.handle(RoomAgain(), 1.0)
    assert list(m.due([10, 10], [0, 0])) == []   # writable: waits for stored again
    assert list(m.due([10, 10], [0, 10])) == [a1] and a1.status == Status.OK


def test_the_durable_event_follows_the_same_rule():
    from bookie.core.adds import Answer, Durable
    m = machine()
    a, b = add(m, 10, 1), add(m, 20, 1)
    m.handle(NoRoom(), 0.0)
    assert m.handle(Durable((20,), (10,)), 0.0) == [Answer(a), Answer(b)]
    assert (a.status, b.status) == (Status.OK, Status.READ_ONLY)
