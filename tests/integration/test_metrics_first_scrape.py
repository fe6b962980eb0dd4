"""Every documented metric family from a bookie's first scrape, and alert rules over them.

A bookie as ``bookie run`` starts it (autorecovery on) is scraped once, right after it says it
serves: every family of the metrics table has at least one sample (zero where nothing happened
yet), labelled ones with their documented label values; and every metric that
docs/prometheus/alerts.yml names exists in that scrape (Prometheus's own ``up`` and
``scrape_*`` aside), so no alert waits for a series that appears only after its first event."""

import os
import re
import shutil
import subprocess
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bookie.testing import LocalBookies
from bookie.workers.ports import free_port_pair
from bookie.workers.metrics import DOCUMENTED_LABELS, SPECS, family_name

ALERTS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "prometheus", "alerts.yml")
PROMQL_WORDS = {"sum", "by", "rate", "increase", "histogram_quantile", "le", "instance", "job",
                "max", "min", "avg", "without", "on", "and", "or", "unless"}


@pytest.fixture(scope="module")
def first_scrape(tmp_path_factory) -> str:
    """The text of the first scrape of a bookie that has just said it serves."""
    port = free_port_pair("127.0.0.1")
    conf = {"prometheusStatsHttpPort": port, "autoRecoveryDaemonEnabled": "true"}
    with LocalBookies(1, base_dir=str(tmp_path_factory.mktemp("e")), conf=conf):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
            return r.read().decode()


def test_every_documented_family_and_label_value_is_in_the_first_scrape(first_scrape):
    text = first_scrape
    families = {f.name: f for f in text_string_to_metric_families(text)}
    missing = [s.name for s in SPECS
               if family_name(s) not in families or not families[family_name(s)].samples]
    assert missing == [], f"absent from the first scrape: {missing}"
    for name, label_sets in DOCUMENTED_LABELS.items():
        spec = next(s for s in SPECS if s.name == name)
        present = {tuple(s.labels[k] for k in spec.labels)
                   for s in families[family_name(spec)].samples}
        assert set(label_sets) <= present, (name, set(label_sets) - present)
    errors = [s for s in families["bookie_internal_errors"].samples if s.name.endswith("_total")]
    assert [s.value for s in errors] == [0.0]
    roles = {s.labels["role"] for s in families["bookie_worker_up"].samples}
    assert "autorecovery" in roles


def alert_rules() -> list[dict]:
    with open(ALERTS) as f:
        doc = yaml.safe_load(f)
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]


def test_the_alert_rules_name_only_metrics_a_live_bookie_exports(first_scrape):
    rules = alert_rules()
    assert len(rules) >= 8
    for wanted in ("BookieDown", "BookieReadOnly", "BookieDiskNearFull", "BookieJournalFsyncSlow",
                   "BookieUnderReplicatedLedgers", "BookieLostLedgers", "BookieWorkerRestarts",
                   "BookieInternalErrors"):
        assert wanted in {r["alert"] for r in rules}
    text = first_scrape
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    for rule in rules:
        expr = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]', " ", rule["expr"])  # selectors, ranges
        names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)) - PROMQL_WORDS
        for name in names:
            if name == "up" or name.startswith("scrape_"):
                continue
            assert name in samples, f"{rule['alert']}: {name} is not exported"
    if shutil.which("promtool"):  # Debian's prometheus package; the rules' syntax as Prometheus reads it
        proc = subprocess.run(["promtool", "check", "rules", ALERTS], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in proc.stdout, \
            proc.stdout + proc.stderr
