"""Linking ledgers written elsewhere into a log (the calls bulk writers such as the Spark sink
use): ledger custom metadata, finding ledgers by tag, and one CAS per link."""

import pytest

from bookie.client import BadVersionError, InvalidArgumentError, NoSuchLedgerError


def closed_ledger(bk, payloads, custom=None):
    lh = bk.create_ledger(3, 2, 2, password=b"pw", custom=custom)
    for p in payloads:
        lh.add_entry(p)
    lh.close()
    return lh.ledger_id


def test_ledger_metadata_carries_the_custom_fields_and_find_ledgers_matches_them(bookkeeper):
    a = closed_ledger(bookkeeper, [b"x"], {"job": "j1", "part": "0"})
    b = closed_ledger(bookkeeper, [], {"job": "j1", "part": "1"})
    closed_ledger(bookkeeper, [], {"job": "j2"})
    meta = bookkeeper.ledger_metadata(a)
    assert meta.custom == {"job": "j1", "part": "0"} and str(meta.state) == "CLOSED"
    assert meta.last_entry_id == 0 and meta.ctime_ms > 0
    assert bookkeeper.find_ledgers({"job": "j1"}) == [a, b]
    assert bookkeeper.find_ledgers({"job": "j1", "part": "1"}) == [b]
    with pytest.raises(NoSuchLedgerError):
        bookkeeper.ledger_metadata(10**9)


def test_link_ledgers_appends_closed_ledgers_with_one_cas(bookkeeper):
    assert bookkeeper.create_log("linked") is True
    assert bookkeeper.create_log("linked") is False
    ledgers, version = bookkeeper.log_ledgers("linked")
    assert ledgers == []
    first = closed_ledger(bookkeeper, [b"a", b"b"])
    second = closed_ledger(bookkeeper, [b"c"])
    new_version = bookkeeper.link_ledgers("linked", [first, second], version)
    assert bookkeeper.log_ledgers("linked") == ([first, second], new_version)
    assert [r.data for r in bookkeeper.read_log("linked", password=b"pw")] == [b"a", b"b", b"c"]
    third = closed_ledger(bookkeeper, [b"d"])
    with pytest.raises(BadVersionError):  # a stale version links nothing
        bookkeeper.link_ledgers("linked", [third], version)
    with pytest.raises(InvalidArgumentError):  # already in the log
        bookkeeper.link_ledgers("linked", [first], new_version)
    still_open = bookkeeper.create_ledger(3, 2, 2, password=b"pw")
    with pytest.raises(InvalidArgumentError, match="not closed"):
        bookkeeper.link_ledgers("linked", [still_open.ledger_id], new_version)
    assert bookkeeper.log_ledgers("linked")[0] == [first, second]
    still_open.close()
    bookkeeper.delete_log("linked")
