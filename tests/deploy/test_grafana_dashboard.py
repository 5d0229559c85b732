"""The shipped Grafana dashboard: a dashboard Grafana imports, whose every query asks for
series /metrics serves."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from tests.conftest import REPO_ROOT
from tests.deploy.metrics_body import PROMETHEUS_SERIES, metric_names, served_metric_names

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "lease-dashboard.json"
LABEL_VALUES = re.compile(r"^label_values\((?P<metric>[A-Za-z_:][A-Za-z0-9_:]*),\s*\w+\)$")


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def test_it_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    panels = _panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "cluster"} <= variables
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in {"row", "stat", "timeseries"}, panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, f"{panel['title']} is wider than the grid"
        cells = {
            (grid["x"] + column, grid["y"] + line)
            for column in range(grid["w"])
            for line in range(grid["h"])
        }
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells
        if panel["type"] == "row":
            continue
        # The operator picks the Prometheus at import: no datasource uid of ours inside.
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and panel["description"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


@pytest.mark.django_db
def test_every_query_asks_for_series_that_metrics_serves(client: Client, settings: Any) -> None:
    settings.DEADMAN_SECRET_URL = "https://hc-ping.example/ping/key"
    served = served_metric_names(client) | PROMETHEUS_SERIES
    dashboard = _dashboard()
    checked = 0
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            queried = metric_names(target["expr"])
            assert queried, f"{panel['title']}: no metric name in {target['expr']!r}"
            missing = queried - served
            assert not missing, f"{panel['title']} queries what /metrics lacks: {missing}"
            checked += 1
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = LABEL_VALUES.match(variable["query"]["query"])
        assert match, variable["query"]
        assert match["metric"] in served, variable["name"]
    assert checked >= 20
