"""The metrics table and the local accumulators the hot paths use (bookie.workers.metrics)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bookie.workers import metrics

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "metrics.md")


def _samples(metric) -> dict:
    """{(sample name, le): value} of the exposition, sums rounded (floats add in another order)."""
    registry = CollectorRegistry()
    registry.register(metric)
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.endswith("_created"):
                out[(s.name, s.labels.get("le"))] = round(s.value, 6)
    return out


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=200),
       st.integers(min_value=1, max_value=4))
def test_a_flushed_local_histogram_equals_observing_each_value(values, flushes):
    direct = Histogram("h_seconds", "h", buckets=metrics.LATENCY_BUCKETS_S, registry=None)
    batched = Histogram("h_seconds", "h", buckets=metrics.LATENCY_BUCKETS_S, registry=None)
    local = metrics.LocalHistogram(batched)
    for i, v in enumerate(values):
        direct.observe(v)
        local.observe(v)
        if i % flushes == 0:
            local.flush()
    local.flush()
    assert _samples(direct) == _samples(batched)


def test_a_local_counter_flushes_by_label_values():
    c = Counter("requests_total", "r", ["op", "status"], registry=None)
    local = metrics.LocalCounter(c)
    for _ in range(3):
        local.inc("ADD", "OK")
    local.inc("READ", "NO_LEDGER", n=2)
    local.flush()
    local.flush()  # nothing new: nothing added
    assert c.labels("ADD", "OK")._value.get() == 3
    assert c.labels("READ", "NO_LEDGER")._value.get() == 2


def test_publish_adds_counter_differences_and_sets_gauges():
    m = metrics.Metrics()
    assert m.publish({"add_entries_total": 5, "add_pending": 3, "rejected_no_ledger_total": 1}) == []
    assert m.publish({"add_entries_total": 8, "add_pending": 0, "no_such_stat": 1}) == ["no_such_stat"]
    assert m.metric("bookie_add_entries_total")._value.get() == 8
    assert m.metric("bookie_add_pending")._value.get() == 0


def test_the_table_is_consistent_and_maps_only_to_known_metrics():
    names = [s.name for s in metrics.SPECS]
    assert len(names) == len(set(names))
    for s in metrics.SPECS:
        assert s.name.startswith("bookie_") and s.name == s.name.lower()
        assert s.kind in ("counter", "gauge", "histogram") and s.meaning.endswith(".")
        assert (s.kind == "counter") == s.name.endswith("_total")
        if s.kind == "histogram":
            assert s.name.endswith(("_seconds", "_bytes"))
    assert set(metrics.STAT_METRICS.values()) <= set(names)


def test_docs_metrics_md_is_current():
    with open(DOCS, encoding="utf-8") as f:
        assert metrics.metrics_markdown() in f.read(), "regenerate the table: metrics_markdown()"
