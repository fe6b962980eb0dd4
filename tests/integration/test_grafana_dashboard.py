"""docs/grafana/bookie.json (issue 24.8): a valid Grafana dashboard of at least 12 panels with
queries, whose every query names only metrics that a live bookie and a client with metrics on
export from their first scrape (so no panel starts empty for want of a family)."""

from __future__ import annotations

import json
import os
import re
import urllib.request

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bookie.client import BookKeeper
from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "grafana", "bookie.json")
METRIC = re.compile(r"\b(?:bookie|bookkeeper)_[a-z0-9_]+\b")
TOPICS = ("add", "read", "journal", "entry log", "garbage collection", "disk", "read-only",
          "autorecovery", "connections refused", "client add latency")


@pytest.fixture(scope="module")
def dashboard() -> dict:
    with open(DASHBOARD, encoding="utf-8") as f:
        return json.load(f)


def queries(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_valid_with_at_least_12_panels_with_queries(dashboard):
    assert dashboard["title"] and dashboard["uid"] and isinstance(dashboard["schemaVersion"], int)
    panels = dashboard["panels"]
    assert len(panels) >= 12
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        assert p["title"] and p["type"] in ("timeseries", "stat", "gauge")
        assert p["targets"] and all(t["expr"].strip() and t["refId"] for t in p["targets"])
        assert {"h", "w", "x", "y"} <= set(p["gridPos"])
    titles = " / ".join(p["title"].lower() + " " + p.get("description", "").lower()
                        for p in panels)
    for topic in TOPICS:
        assert topic in titles, topic


def exported_names(text: str) -> set[str]:
    """Every sample name of an exposition (histograms: _bucket, _sum, _count; counters: _total)."""
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def test_every_metric_a_query_names_exists_from_the_first_scrape(dashboard):
    port = free_port_pair("127.0.0.1")
    # no GC pass before the scrape: families a first pass would bring are not "from the first"
    with LocalBookies(1, conf={"prometheusStatsHttpPort": port, "gcWaitTime": 600_000}) as lb:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            bookie_text = r.read().decode()
        with BookKeeper(lb.metadata_uri, enableClientMetrics=True):
            client_text = generate_latest(REGISTRY).decode()
    exported = exported_names(bookie_text) | exported_names(client_text)
    named = {m for q in queries(dashboard) for m in METRIC.findall(q)}
    assert named, "no metric found in the queries"
    missing = sorted(named - exported)
    assert not missing, f"queried but not exported from the first scrape: {missing}"


@pytest.mark.parametrize("title,families", [
    ("request errors by status", ("bookie_requests_total",)),
    ("garbage collection", ("bookie_gc_runs_total", "bookie_gc_deleted_ledgers_total")),
    ("compaction", ("bookie_compaction_minor_runs_total", "bookie_compaction_major_runs_total")),
    ("entry logs", ("bookie_entry_logs",)),
    ("autorecovery", ("bookie_autorecovery_marked_ledgers_total",
                      "bookie_autorecovery_lost_ledgers_total",
                      "bookie_autorecovery_rereplicated_ledgers_total")),
])
def test_a_top_level_panel_per_topic_operators_look_for(dashboard, title, families):
    """Issue 35: request errors by status, GC, compaction, entry logs and autorecovery each have
    a panel of their own at the top level (no row to unfold), over those families."""
    panels = [p for p in dashboard["panels"] if p["title"].lower().startswith(title)]
    assert panels, f"no top-level panel titled {title!r}"
    named = {m for p in panels for t in p["targets"] for m in METRIC.findall(t["expr"])}
    assert set(families) <= named, (title, named)
    if title == "request errors by status":
        assert any('status!="OK"' in t["expr"] and "status" in t["legendFormat"]
                   for p in panels for t in p["targets"])
