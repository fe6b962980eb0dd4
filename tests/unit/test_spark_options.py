"""The Spark format's pure parts: options, splitting into partitions, admission control and
offsets that never move backwards (no Spark, no bookie)."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from bookie.spark.options import OptionError, ReadOptions, SinkOptions, parse_ledger_list
from bookie.spark.plan import Span, admit, split

URI = {"metadataServiceUri": "lmdb:///tmp/m"}


def test_ledger_lists_take_ids_and_ranges():
    assert parse_ledger_list("12,15, 20-23") == [12, 15, 20, 21, 22, 23]
    with pytest.raises(OptionError, match="option ledgers"):
        parse_ledger_list("3-1")


def test_verify_is_on_unless_turned_off():
    assert ReadOptions.parse({**URI, "ledgers": "1"}, stream=False).verify is True
    assert ReadOptions.parse({**URI, "ledgers": "1", "Verify": "false"}, stream=False).verify is False


def test_options_are_case_insensitive_and_client_keys_typed():
    ro = ReadOptions.parse({"metadataserviceuri": "lmdb:///m", "LOG": "a,b",
                            "bookkeeper.readtimeout": "2.5", "bookkeeper.zkTimeout": "100"},
                           stream=True)
    assert ro.logs == ("a", "b") and ro.starting == "latest"
    assert dict(ro.conn.config) == {"readTimeout": 2.5, "zkTimeout": 100}


@pytest.mark.parametrize("options, named", [
    ({"ledgers": "1"}, "metadataServiceUri"),
    ({**URI, "ledgers": "1", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({**URI, "ledgers": "1", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({**URI, "ledgers": "1", "verify": "sometimes"}, "verify"),
    ({**URI, "logPattern": "("}, "logPattern"),
    ({**URI, "ledgers": "1", "endingOffsets": "earliest"}, "endingOffsets"),
    ({**URI, "ledgers": "1", "startingOffsets": '{"ledgers": {"1": "x"}}'}, "startingOffsets"),
])
def test_each_bad_read_option_is_named(options, named):
    with pytest.raises(OptionError, match=named):
        ReadOptions.parse(options, stream=False)


def test_sink_options_check_quorums_and_the_log():
    with pytest.raises(OptionError, match="option log"):
        SinkOptions.parse(URI)
    with pytest.raises(OptionError, match="ensembleSize"):
        SinkOptions.parse({**URI, "log": "x", "writeQuorumSize": "4"})
    so = SinkOptions.parse({**URI, "log": "x", "sinkId": "job-1"})
    assert so.quorums == (3, 2, 2) and so.sink_id == "job-1" and so.create_log


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300)), min_size=1, max_size=5),
       st.integers(1, 100), st.integers(1, 20))
def test_split_covers_every_entry_once_in_order(raw, max_entries, min_partitions):
    spans = [Span(None, i, first, first + n - 1) for i, (first, n) in enumerate(raw) if n]
    parts = split(spans, max_entries, min_partitions)
    covered = [(p.ledger_id, e) for p in parts for e in range(p.first, p.last + 1)]
    assert covered == [(s.ledger_id, e) for s in spans for e in range(s.first, s.last + 1)]
    assert all(p.count <= max_entries for p in parts)
    assert len(parts) >= min(min_partitions, len(covered))


@given(st.lists(st.integers(0, 500), min_size=1, max_size=6), st.integers(1, 1000))
def test_admission_keeps_to_the_budget_and_a_prefix_of_each_source(backlogs, budget):
    found = {("ledger", str(i)): ([Span(None, i, 10, 10 + n - 1)] if n else [], 10 + n)
             for i, n in enumerate(backlogs)}
    admitted = admit(found, budget)
    total = sum(s.count for spans, _ in admitted.values() for s in spans)
    assert total == min(budget, sum(backlogs))
    for key, (spans, end) in admitted.items():
        assert end == 10 + sum(s.count for s in spans)  # the next entry after what is read
