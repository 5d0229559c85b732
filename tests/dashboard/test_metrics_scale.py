"""/metrics stays small and flat: series grow with clusters and election leases, never with
node heartbeats, and a scrape is the same number of queries at any size (issue 22)."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from dashboard.metrics import GaugeLines, label_text
from leases import metrics as lease_metrics
from leases.metrics import fair_quotas
from leases.models import KubeCluster, LeaseHolderSpan, WatchCoverage
from tests.leases.factories import NOW, make_cluster, make_lease, make_many_leases

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def scrape(client: Client) -> tuple[str, int]:
    """The body and the number of queries it cost."""
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    return response.content.decode(), len(queries)


def series(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def value(text: str, line_start: str) -> float:
    (line,) = [line for line in series(text) if line.startswith(line_start + " ")]
    return float(line.rsplit(" ", 1)[1])


def fleet(nodes: int, elections: int) -> KubeCluster:
    cluster = make_cluster("prod")
    make_many_leases(cluster, nodes)
    for index in range(elections):
        make_lease(cluster, f"op-{index:03d}-leader", namespace="ops", renewed_ago=2, duration=15)
    make_lease(cluster, "kube-scheduler", renewed_ago=2, duration=15)
    return cluster


def grow(cluster: KubeCluster, nodes: int, elections: int) -> None:
    for index in range(nodes):
        make_lease(cluster, f"extra-{index:04d}", namespace="kube-node-lease", duration=40)
    for index in range(elections):
        make_lease(cluster, f"more-{index:03d}-leader", namespace="ops", duration=15)


def test_node_heartbeats_add_no_series_nor_queries(client: Client) -> None:
    cluster = fleet(nodes=20, elections=3)
    small, small_queries = scrape(client)

    grow(cluster, nodes=380, elections=0)
    large, large_queries = scrape(client)

    assert len(series(large)) == len(series(small))
    assert large_queries == small_queries
    assert (
        value(large, 'lease_dashboard_leases{class="node_heartbeat",cluster="prod",state="held"}')
        == 400
    )
    assert "extra-0001" not in large


def test_election_leases_add_series_but_no_queries(client: Client) -> None:
    cluster = fleet(nodes=5, elections=2)
    small, small_queries = scrape(client)

    grow(cluster, nodes=0, elections=20)
    large, large_queries = scrape(client)

    assert large_queries == small_queries
    # Each election lease: expiry and transitions (no ratio and no longest gap: no holder
    # span was recorded for these, so no election time was observed).
    per_lease = 2
    assert len(series(large)) - len(series(small)) == 20 * per_lease
    assert 'name="more-019-leader"' in large


def test_renewal_ages_are_a_histogram_per_cluster(client: Client) -> None:
    cluster = make_cluster("prod")
    for name, ago in (("a", 1), ("b", 4), ("c", 9), ("d", 12), ("e", 55), ("f", 700)):
        make_lease(cluster, name, namespace="kube-node-lease", renewed_ago=ago, duration=40)
    # Nobody holds it: no renewal to age.
    make_lease(cluster, "g", namespace="kube-node-lease", holder="", renewed_ago=3000)
    # Not a heartbeat.
    make_lease(cluster, "kube-scheduler", renewed_ago=900)

    text, _ = scrape(client)

    # Ages are judged at the data's as-of moment, one second before now (the factory's).
    name = "lease_dashboard_node_heartbeat_renewal_age_seconds"
    buckets = {
        match[1]: float(match[2])
        for match in re.finditer(rf'{name}_bucket{{cluster="prod",le="([^"]+)"}} (\S+)', text)
    }
    assert buckets == {
        "5.0": 2,
        "10.0": 3,
        "15.0": 4,
        "20.0": 4,
        "30.0": 4,
        "40.0": 4,
        "60.0": 5,
        "120.0": 5,
        "300.0": 5,
        "600.0": 5,
        "+Inf": 6,
    }
    assert value(text, f'{name}_count{{cluster="prod"}}') == 6
    assert value(text, f'{name}_sum{{cluster="prod"}}') == pytest.approx(
        (1 + 4 + 9 + 12 + 55 + 700) - 6 * 1
    )
    max_name = "lease_dashboard_node_heartbeat_max_renewal_age_seconds"
    assert value(text, f'{max_name}{{cluster="prod"}}') == 699


def test_a_stale_cluster_has_no_renewal_ages(client: Client) -> None:
    make_lease(make_cluster("prod"), "a", namespace="kube-node-lease", renewed_ago=3)
    make_lease(make_cluster("old", fresh=False), "a", namespace="kube-node-lease", renewed_ago=3)

    text, _ = scrape(client)

    assert 'renewal_age_seconds_count{cluster="prod"} 1.0' in text
    # Its data says nothing of now: the states are unknown and the ages are left out.
    assert 'cluster="old"' not in "\n".join(line for line in series(text) if "renewal_age" in line)
    assert (
        value(text, 'lease_dashboard_leases{class="node_heartbeat",cluster="old",state="unknown"}')
        == 1
    )


def test_budget_is_shared_fairly_and_the_rest_is_counted(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_MAX_ELECTION_LEASES = 6
    noisy = make_cluster("noisy")
    quiet = make_cluster("quiet")
    for index in range(10):
        make_lease(noisy, f"aaa-{index}", namespace="a")
    make_lease(noisy, "kube-scheduler")
    make_lease(quiet, "kube-scheduler")
    make_lease(quiet, "op-leader", namespace="ops")

    text, _ = scrape(client)

    listed = re.findall(r'lease_seconds_until_expiry\{cluster="(\w+)",name="([\w-]+)"', text)
    # The quiet cluster keeps both of its leases; the noisy one gets the rest of the budget,
    # its control-plane lease first (a hostile API server's leases cannot push it out).
    assert sorted(listed) == [
        ("noisy", "aaa-0"),
        ("noisy", "aaa-1"),
        ("noisy", "aaa-2"),
        ("noisy", "kube-scheduler"),
        ("quiet", "kube-scheduler"),
        ("quiet", "op-leader"),
    ]
    assert value(text, 'lease_dashboard_lease_series_omitted{cluster="noisy"}') == 7
    assert value(text, 'lease_dashboard_lease_series_omitted{cluster="quiet"}') == 0


def test_a_hostile_api_server_cannot_make_a_scrape_grow(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_MAX_ELECTION_LEASES = 10
    cluster = fleet(nodes=0, elections=10)
    small, small_queries = scrape(client)

    grow(cluster, nodes=0, elections=200)
    large, large_queries = scrape(client)

    assert len(series(large)) == len(series(small))
    assert large_queries == small_queries


@pytest.mark.parametrize(
    ("counts", "budget", "quotas"),
    [
        ({1: 3, 2: 4}, 100, {1: 3, 2: 4}),
        ({1: 100, 2: 1, 3: 2}, 10, {1: 7, 2: 1, 3: 2}),
        ({1: 100, 2: 100}, 11, {1: 5, 2: 6}),
        ({1: 5}, 0, {1: 0}),
        ({}, 10, {}),
    ],
)
def test_fair_quotas(counts: dict[int, int], budget: int, quotas: dict[int, int]) -> None:
    assert fair_quotas(counts, budget) == quotas
    assert sum(quotas.values()) <= budget


def test_other_modules_add_their_families_to_the_lease_collector(client: Client) -> None:
    make_cluster("prod")

    def watcher_families(now: datetime) -> Iterator[Metric]:
        family = GaugeMetricFamily("lease_dashboard_test_family", "A test family.", labels=["at"])
        family.add_metric([now.isoformat()], 1)
        yield family

    lease_metrics.add_family_source(watcher_families)
    try:
        text, _ = scrape(client)
    finally:
        lease_metrics._family_sources.remove(watcher_families)

    assert f'lease_dashboard_test_family{{at="{NOW.isoformat()}"}} 1.0' in text


def test_seconds_until_expiry_is_rounded_to_milliseconds(client: Client) -> None:
    make_lease(make_cluster("prod"), "kube-scheduler", renewed_ago=0.0004, duration=15)

    text, _ = scrape(client)

    assert (
        value(
            text,
            'lease_dashboard_lease_seconds_until_expiry{cluster="prod",name="kube-scheduler",namespace="kube-system"}',
        )
        == 15.0
    )


def test_a_scrape_is_gzipped_for_a_client_that_asks(client: Client) -> None:
    fleet(nodes=5, elections=2)

    plain = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    packed = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_ACCEPT_ENCODING="gzip")
    refused = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_ACCEPT_ENCODING="gzip;q=0")

    assert "Content-Encoding" not in plain and "Content-Encoding" not in refused
    assert packed["Content-Encoding"] == "gzip"
    assert packed["Vary"] == "Accept-Encoding"
    unpacked = gzip.decompress(packed.content).decode()
    assert len(series(unpacked)) == len(series(plain.content.decode()))
    assert 'lease_dashboard_lease_transitions{cluster="prod",name="kube-scheduler"' in unpacked


def test_a_longest_gap_is_written_only_for_a_window_with_a_gap(client: Client) -> None:
    cluster = make_cluster("prod")
    WatchCoverage.objects.create(
        cluster=cluster, started_at=NOW - timedelta(days=8), last_seen_at=NOW
    )
    lease = make_lease(cluster, "op-leader", namespace="ops", created_at=NOW - timedelta(days=8))
    # Held for a week but for ten leaderless minutes three hours ago.
    LeaseHolderSpan.objects.create(
        lease=lease,
        holder="a",
        started_at=NOW - timedelta(days=7),
        ended_at=NOW - timedelta(hours=3, minutes=10),
    )
    LeaseHolderSpan.objects.create(
        lease=lease, holder="holder-a", started_at=NOW - timedelta(hours=3)
    )

    text, _ = scrape(client)

    labels = 'cluster="prod",name="op-leader",namespace="ops"'
    gap = "lease_dashboard_lease_longest_gap_seconds"
    ratio = "lease_dashboard_lease_availability_ratio"
    assert value(text, f'{ratio}{{{labels},window="1h"}}') == 1.0
    assert not [line for line in series(text) if line.startswith(f'{gap}{{{labels},window="1h"}}')]
    assert value(text, f'{gap}{{{labels},window="24h"}}') == 600.0
    assert value(text, f'{gap}{{{labels},window="7d"}}') == 600.0
    assert value(text, f'{ratio}{{{labels},window="24h"}}') < 1


def test_label_values_a_cluster_writes_are_escaped(client: Client) -> None:
    cluster = make_cluster("prod")
    odd = 'op"\\leader\nx'
    make_lease(cluster, odd, namespace="ops")

    text, _ = scrape(client)

    (family,) = [
        family
        for family in text_string_to_metric_families(text)
        if family.name == "lease_dashboard_lease_transitions"
    ]
    assert [sample.labels for sample in family.samples] == [
        {"cluster": "prod", "namespace": "ops", "name": odd}
    ]


def test_gauge_lines_write_what_prometheus_client_writes() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.registry import CollectorRegistry

    values = [
        ({"b": 'x"y', "a": "1\\2\n"}, 1.5),
        ({"a": "é", "b": ""}, -3),
        ({"a": "z", "b": "w"}, 1e7),
    ]
    lines = GaugeLines("test_lines", "Help with a \\ and a\nnewline.")
    family = GaugeMetricFamily("test_lines", "Help with a \\ and a\nnewline.", labels=["b", "a"])
    for labels, number in values:
        lines.add_line(label_text(labels), number)
        family.add_metric([labels["b"], labels["a"]], number)

    class Families:
        def collect(self) -> list[Metric]:
            return [family]

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    assert lines.exposition() == generate_latest(registry)
    assert [(s.name, s.labels, s.value) for s in lines.samples] == [
        (s.name, s.labels, s.value) for s in family.samples
    ]
