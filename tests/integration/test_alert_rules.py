"""docs/prometheus/alerts_test.yml: a ``promtool test rules`` file that shows every alert of
alerts.yml firing on a series that should fire it (and some quiet).  Run by promtool where
Debian's prometheus package provides it (tests/setup.sh installs it); else its structure is
checked: it loads alerts.yml and tests every alert there."""

from __future__ import annotations

import os
import shutil
import subprocess

import yaml

HERE = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "prometheus")
RULES, TESTS = os.path.join(HERE, "alerts.yml"), os.path.join(HERE, "alerts_test.yml")


def _alerts() -> set[str]:
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    return {r["alert"] for g in doc["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_has_a_firing_case():
    with open(TESTS) as f:
        doc = yaml.safe_load(f)
    assert doc["rule_files"] == ["alerts.yml"]
    firing = {case["alertname"] for t in doc["tests"] for case in t["alert_rule_test"]
              if case.get("exp_alerts")}
    assert firing == _alerts(), _alerts() ^ firing
    for t in doc["tests"]:
        assert t["input_series"] and all("series" in s and "values" in s
                                         for s in t["input_series"])


def test_promtool_passes_the_alert_rule_tests():
    promtool = shutil.which("promtool")
    if promtool is None:  # structure checked above; tests/setup.sh installs prometheus
        return
    proc = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=HERE,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
