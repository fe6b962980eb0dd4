"""The rules of several journals (storage/journal_set.py) and each journal's own LastLogMark."""

from hypothesis import given, strategies as st

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
