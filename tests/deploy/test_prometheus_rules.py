"""The shipped Prometheus rules for the dashboard's own health: valid, tested, and querying
only series /metrics serves (a renamed family would leave an alert that can never fire)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest
import yaml
from django.test import Client

from tests.conftest import REPO_ROOT, skip_or_fail
from tests.deploy.metrics_body import PROMETHEUS_SERIES, metric_names, served_metric_names

RULES_DIR = REPO_ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "lease-dashboard.rules.yml"
RULE_TESTS = RULES_DIR / "lease-dashboard.rules.test.yml"

# What the issue asks the rules to watch, by the alert that does it.
REQUIRED_ALERTS = {
    "LeaseDashboardWatchDataOld",  # watcher data age, per cluster
    "LeaseDashboardNksPollOld",  # NKS poll age
    "LeaseDashboardEvaluatorLagging",  # evaluator lag
    "LeaseDashboardOutboxBacklog",  # undelivered notifications
    "LeaseDashboardDeliveryFailed",  # failed deliveries
    "LeaseDashboardMetricsDown",  # the /metrics target down
    "LeaseDashboardMetricsAbsent",  # every target down
}


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        skip_or_fail(
            "needs promtool (apt-get install -y prometheus; only its promtool is used)",
            required_by="REQUIRE_TOOLS",
        )
    return str(path)


def _rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_rules_fire_as_their_unit_tests_say(promtool: str) -> None:
    """Evaluator lag, watcher data age (a forbidden Node watch excepted), a given-up
    message, an unreadable database, every target down, silent worker queues and an old
    NKS poll, over series as web replicas serve them."""
    result = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=RULES_DIR,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_issue_item_has_an_alert_with_severity_and_text() -> None:
    rules = _rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)), "alert names are unique"
    assert set(names) >= REQUIRED_ALERTS
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.django_db
def test_rules_query_only_series_that_metrics_serves(client: Client, settings: Any) -> None:
    # The dead-man's series are served only while the switch is on.
    settings.DEADMAN_SECRET_URL = "https://hc-ping.example/ping/key"
    served = served_metric_names(client) | PROMETHEUS_SERIES
    for rule in _rules():
        queried = metric_names(rule["expr"])
        assert queried, f"{rule['alert']}: no metric name found in its expression"
        missing = queried - served
        assert not missing, f"{rule['alert']} queries series /metrics does not serve: {missing}"


def test_metric_names_reads_promql_as_the_rules_write_it() -> None:
    expr = (
        'max by (cluster, resource) (a_age{resource="x",y=~"$c"}) > 60 unless on (cluster) '
        "label_replace(sum without (pod) (rate(b_total[5m] offset 1h)) == 1, "
        '"resource", "nodes", "", "") or absent(up{job="d"} == 1) or c > 1e3'
    )
    assert metric_names(expr) == {"a_age", "b_total", "up", "c"}
