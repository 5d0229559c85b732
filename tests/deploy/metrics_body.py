"""A real /metrics body with every family filled, and the metric names PromQL text uses.

The shipped Prometheus rules and the Grafana dashboard are only worth something if the names
they query are the names /metrics serves: a renamed family would leave an alert that never
fires. The tests fetch /metrics from the test client over rows of every kind (a watched
cluster with leases, an NKS account, a notification, a watch worker, a dead-man's ping) and
compare.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from alerts import deadman
from alerts.models import DeliveryState, Notification, NotificationKind
from leases.models import WatchWorker
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup
from tests.leases.factories import make_cluster, make_lease

# Series Prometheus makes itself for every target; /metrics cannot serve them.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})


def fill_rows() -> None:
    """One of everything /metrics reports on."""
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-controller-manager")
    make_lease(cluster, "node-a", namespace="kube-node-lease", holder="node-a")
    account = make_account("kr1")
    make_nodegroup(make_nks_cluster(account, "prod"))
    now = timezone.now()
    Notification.objects.create(
        kind=NotificationKind.OPENED,
        subject="s",
        body_text="t",
        body_html="h",
        state=DeliveryState.FAILED,
        attempts=3,
        created_at=now - timedelta(minutes=30),
        next_attempt_at=now - timedelta(minutes=5),
    )
    WatchWorker.objects.create(
        name="pod-a:11",
        queue="watch.pod-a:11",
        concurrency=10,
        clusters=1,
        capacity=9,
        started_at=now,
        heartbeat_at=now,
    )
    deadman.record(deadman.LastPing(time.time(), deadman.Kind.SUCCESS, True, "HTTP 200 OK"))


def served_metric_names(client: Client) -> set[str]:
    """The sample names of a real scrape (counters with `_total`, histograms with `_bucket`)."""
    fill_rows()
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200, response.content[:200]
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.update(sample.name for sample in family.samples)
    return names


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
# by (...), without (...), on (...), ignoring (...), group_left (...): label names inside.
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels, keywords left out).

    Enough PromQL for the shipped files: strings, label matchers, ranges and grouping lists
    are removed first; an identifier followed by `(` is a function; numbers and durations
    do not start with a letter.
    """
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LISTS.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group()
        following = text[match.end() :].lstrip()
        if following.startswith("(") or name.lower() in _KEYWORDS:
            continue
        # A number's exponent or a duration's unit (1e3, 5m) follows a digit.
        if match.start() > 0 and text[match.start() - 1].isdigit():
            continue
        names.add(name)
    return names
