"""The rules of several journals (storage/journal_set.py) and each journal's own LastLogMark."""

import pytest
from hypothesis import given, strategies as st

from bookie.wire import ProtocolError

from bookie.storage import journal_set
from bookie.storage.journal import lastmark_of, read_lastmark, write_lastmark


@given(st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=1, max_value=16))
def test_a_ledger_always_goes_to_one_journal_in_range(ledger_id, n):
    j = journal_set.journal_of(ledger_id, n)
    assert 0 <= j < n and j == journal_set.journal_of(ledger_id, n)
    assert journal_set.journal_of(ledger_id, 1) == 0


def test_consecutive_ledgers_spread_over_every_journal():
    assert sorted({journal_set.journal_of(lid, 3) for lid in range(100, 106)}) == [0, 1, 2]


@given(st.integers(min_value=0, max_value=1000))
def test_roles_name_their_journal_and_nothing_else_does(i):
    assert journal_set.index_of_role(journal_set.role(i)) == i
    assert journal_set.role(0) == "journal"


def test_names_that_are_no_journal_role():
    for name in ("add", "journal-0", "journal-01", "journal-", "journal-x", "journals", "journal-1a"):
        assert journal_set.index_of_role(name) is None, name


def test_each_journal_keeps_its_own_lastmark(tmp_path):
    d = str(tmp_path)
    write_lastmark(d, 100)
    write_lastmark(d, 7, journal=1)
    assert read_lastmark(d) == 100 and read_lastmark(d, 1) == 7 and read_lastmark(d, 2) == 0
    assert (tmp_path / "lastMark").exists() and (tmp_path / "lastMark.1").exists()
    other = tmp_path / "other"
    other.mkdir()
    write_lastmark(str(other), 50, journal=1)
    assert lastmark_of([d, str(other)], 1) == 7 and lastmark_of([d, str(other)], 0) == 0


def test_answers_of_each_journal_leave_in_order_as_soon_as_their_journal_is_durable():
    from bookie.core.answers import JournalAnswers, Pending
    from bookie.wire import Op

    answers = JournalAnswers(2, max_pending=16, principal=lambda frame, ident: "p")
    for end, journal in [(10, 0), (5, 1), (20, 0), (9, 1)]:
        answers.append(Pending(end, [None, b"fence"], ledger_id=journal, journal=journal))
    assert len(answers) == 4
    # journal 0 is behind: journal 1's answers go anyway, each journal in its own order
    assert [(p.journal, p.end) for p in answers.durable([0, 9])] == [(1, 5), (1, 9)]
    assert [(p.journal, p.end) for p in answers.durable([15, 9])] == [(0, 10)]
    assert len(answers) == 1 and [p.end for p in answers] == [20]
    # the places of a principal are counted over both journals: a quarter of 16 is 4
    for journal in (0, 1, 0, 1):
        answers.admit(journal, None, b"c", int(Op.ADD))
        answers.append(Pending(99, [b"c", b"h"], ledger_id=journal, journal=journal))
    assert answers.queues[0].held is answers.queues[1].held
    assert answers.queues[0].held.counts == {"p": 4}
    with pytest.raises(ProtocolError, match="share"):
        answers.admit(1, None, b"c", int(Op.ADD))
