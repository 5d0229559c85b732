"""Prometheus series for Lease watching, read from the database at scrape time.

Watchers run in Celery workers; their counters live on KubeCluster rows, so any web replica
exports the same numbers. Each scrape costs a handful of aggregate queries, never a row per
node lease: per-lease series exist only for leader-election and control-plane leases.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dashboard.metrics import DatabaseCollector
from leases.availability import ELECTION_CLASSES, WINDOWS, availability_for_leases
from leases.lease_states import held_count, state_counts
from leases.models import KubeCluster, Lease, LeaseClass, LeaseState, ResourceWatchState

PREFIX = "lease_dashboard"
# Per-lease series only for classes with a handful of leases per cluster: node heartbeats
# would add one series per node.
PER_LEASE_METRIC_CLASSES = (LeaseClass.LEADER_ELECTION, LeaseClass.CONTROL_PLANE)


@dataclass(slots=True)
class WatchMetrics:
    cluster: str
    events_total: int
    reconnects_total: int
    relists_total: int
    lag_seconds: float
    connected: bool
    stale: bool
    last_event_age_seconds: float | None
    # How old each resource's data is (now minus its as-of moment); None: never known.
    leases_age_seconds: float | None
    nodes_age_seconds: float | None
    # The Node watch of the same cluster.
    nodes_watch: str
    nodes_events_total: int
    nodes_reconnects_total: int
    nodes_relists_total: int
    nodes_lag_seconds: float


def watch_metrics(now: datetime) -> list[WatchMetrics]:
    clusters = KubeCluster.objects.defer("kubeconfig").order_by("name")
    return [
        WatchMetrics(
            cluster=cluster.name,
            events_total=cluster.events_total,
            reconnects_total=cluster.reconnects_total,
            relists_total=cluster.relists_total,
            lag_seconds=cluster.lag_seconds,
            connected=cluster.connected,
            stale=cluster.is_stale(now),
            last_event_age_seconds=(
                (now - cluster.last_event_at).total_seconds() if cluster.last_event_at else None
            ),
            leases_age_seconds=(
                (now - cluster.leases_as_of).total_seconds() if cluster.leases_as_of else None
            ),
            nodes_age_seconds=(
                (now - cluster.nodes_as_of).total_seconds() if cluster.nodes_as_of else None
            ),
            nodes_watch=cluster.nodes_watch,
            nodes_events_total=cluster.nodes_events_total,
            nodes_reconnects_total=cluster.nodes_reconnects_total,
            nodes_relists_total=cluster.nodes_relists_total,
            nodes_lag_seconds=cluster.nodes_lag_seconds,
        )
        for cluster in clusters
    ]


def lease_counts(now: datetime) -> dict[tuple[str, str, str], int]:
    """(cluster, class, state) -> number of live leases, zero-filled so series never vanish."""
    names = dict(KubeCluster.objects.values_list("id", "name"))
    rows = (
        Lease.objects.live()
        .values("cluster_id", "lease_class")
        .annotate(**state_counts(now))
        .order_by()
    )
    counts = {
        (cluster, lease_class, state): 0
        for cluster in names.values()
        for lease_class in LeaseClass.values
        for state in LeaseState.values
    }
    for row in rows:
        cluster = names.get(row["cluster_id"])
        if cluster is None:
            continue
        key = (cluster, row["lease_class"])
        counts[(*key, LeaseState.RELEASED.value)] = row["released"]
        counts[(*key, LeaseState.EXPIRED.value)] = row["expired"]
        counts[(*key, LeaseState.UNKNOWN.value)] = row["unknown"]
        counts[(*key, LeaseState.HELD.value)] = held_count(row)
    return counts


@dataclass(slots=True)
class LeaseMetric:
    cluster: str
    namespace: str
    name: str
    seconds_until_expiry: float | None
    transitions: int | None


def per_lease_metrics(now: datetime) -> list[LeaseMetric]:
    """Leader-election and control-plane leases only: a bounded number of series."""
    names = dict(KubeCluster.objects.values_list("id", "name"))
    rows = (
        Lease.objects.live()
        .filter(lease_class__in=PER_LEASE_METRIC_CLASSES)
        .order_by("cluster_id", "namespace", "name")
        .values_list("cluster_id", "namespace", "name", "holder", "expires_at", "lease_transitions")
    )
    return [
        LeaseMetric(
            cluster=names.get(cluster_id, "?"),
            namespace=namespace,
            name=name,
            # A released lease has no meaningful expiry.
            seconds_until_expiry=(
                (expires_at - now).total_seconds() if holder and expires_at else None
            ),
            transitions=transitions,
        )
        for cluster_id, namespace, name, holder, expires_at, transitions in rows
    ]


@dataclass(slots=True)
class AvailabilityMetric:
    cluster: str
    namespace: str
    name: str
    window: str
    ratio: float | None
    longest_gap_seconds: float


def availability_metrics(now: datetime) -> list[AvailabilityMetric]:
    """Each live election lease's availability over each window: one batched read per window
    (leases/availability.py), never a query per lease."""
    leases = list(
        Lease.objects.live()
        .filter(lease_class__in=ELECTION_CLASSES)
        .select_related("cluster")
        .only(
            "cluster__name",
            "namespace",
            "name",
            "created_at",
            "deleted_at",
            "expires_at",
            "lease_class",
        )
        .order_by("cluster__name", "namespace", "name")
    )
    metrics: list[AvailabilityMetric] = []
    for window in WINDOWS:
        figures = availability_for_leases(leases, now, window)
        metrics.extend(
            AvailabilityMetric(
                cluster=lease.cluster.name,
                namespace=lease.namespace,
                name=lease.name,
                window=window,
                ratio=figures[lease.pk].ratio,
                longest_gap_seconds=figures[lease.pk].longest_gap_seconds,
            )
            for lease in leases
        )
    return metrics


class LeaseCollector(DatabaseCollector):
    up_metric = f"{PREFIX}_lease_metrics_up"
    up_help = "1 when the lease series below could be read from the database."

    def collect_from_database(self) -> Iterable[Metric]:
        now = timezone.now()
        events = CounterMetricFamily(
            f"{PREFIX}_watch_events", "Watch events received.", labels=["cluster"]
        )
        reconnects = CounterMetricFamily(
            f"{PREFIX}_watch_reconnects", "Watch connections re-opened.", labels=["cluster"]
        )
        relists = CounterMetricFamily(
            f"{PREFIX}_watch_relists",
            "Full lists after the resourceVersion became too old (410 Gone).",
            labels=["cluster"],
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}_watch_lag_seconds",
            "Worst delay from event to database commit in the last flush.",
            labels=["cluster"],
        )
        connected = GaugeMetricFamily(
            f"{PREFIX}_watch_connected",
            "1 when a watcher holds a watch connection.",
            labels=["cluster"],
        )
        stale = GaugeMetricFamily(
            f"{PREFIX}_watch_stale",
            "1 when the cluster's lease data is not known to be current (its as-of moment is "
            "older than WATCH_STALE_SECONDS, or no watch is connected).",
            labels=["cluster"],
        )
        event_age = GaugeMetricFamily(
            f"{PREFIX}_watch_last_event_age_seconds",
            "Seconds since the last watch event (-1: never).",
            labels=["cluster"],
        )
        data_age = GaugeMetricFamily(
            f"{PREFIX}_watch_data_age_seconds",
            "Seconds since the data's as-of moment: the latest moment the watcher knew it "
            "matched the API server (-1: never).",
            labels=["cluster", "resource"],
        )
        clusters = watch_metrics(now)
        for cluster in clusters:
            for resource, seconds in (
                ("leases", cluster.leases_age_seconds),
                ("nodes", cluster.nodes_age_seconds),
            ):
                data_age.add_metric(
                    [cluster.cluster, resource], -1.0 if seconds is None else round(seconds, 3)
                )
            labels = [cluster.cluster]
            events.add_metric(labels, cluster.events_total)
            reconnects.add_metric(labels, cluster.reconnects_total)
            relists.add_metric(labels, cluster.relists_total)
            lag.add_metric(labels, cluster.lag_seconds)
            connected.add_metric(labels, 1 if cluster.connected else 0)
            stale.add_metric(labels, 1 if cluster.stale else 0)
            age = cluster.last_event_age_seconds
            event_age.add_metric(labels, -1.0 if age is None else age)
        yield from (events, reconnects, relists, lag, connected, stale, event_age, data_age)
        yield from node_watch_families(clusters)

        leases = GaugeMetricFamily(
            f"{PREFIX}_leases",
            "Live leases by class and state (state from the clock at scrape time).",
            labels=["cluster", "class", "state"],
        )
        for (cluster_name, lease_class, state), count in sorted(lease_counts(now).items()):
            leases.add_metric([cluster_name, lease_class, state], count)
        yield leases

        until_expiry = GaugeMetricFamily(
            f"{PREFIX}_lease_seconds_until_expiry",
            "Seconds until a held leader-election or control-plane lease expires "
            "(negative: expired that long ago).",
            labels=["cluster", "namespace", "name"],
        )
        transitions = GaugeMetricFamily(
            f"{PREFIX}_lease_transitions",
            "The lease's leaseTransitions (holder changes counted by the API server).",
            labels=["cluster", "namespace", "name"],
        )
        for lease in per_lease_metrics(now):
            labels = [lease.cluster, lease.namespace, lease.name]
            if lease.seconds_until_expiry is not None:
                until_expiry.add_metric(labels, lease.seconds_until_expiry)
            if lease.transitions is not None:
                transitions.add_metric(labels, lease.transitions)
        yield from (until_expiry, transitions)
        yield from availability_families(now)


def availability_families(now: datetime) -> Iterable[Metric]:
    labels = ["cluster", "namespace", "name", "window"]
    ratio = GaugeMetricFamily(
        f"{PREFIX}_lease_availability_ratio",
        "Share of the window's observed time during which a leader-election or control-plane "
        "lease had a valid holder (absent when the watcher observed none of the window).",
        labels=labels,
    )
    longest_gap = GaugeMetricFamily(
        f"{PREFIX}_lease_longest_gap_seconds",
        "Longest leaderless gap in the window, counting only the time the watcher observed.",
        labels=labels,
    )
    for lease in availability_metrics(now):
        values = [lease.cluster, lease.namespace, lease.name, lease.window]
        # No observed time is no answer, not 0 % and not 100 %.
        if lease.ratio is not None:
            ratio.add_metric(values, lease.ratio)
        longest_gap.add_metric(values, lease.longest_gap_seconds)
    return (ratio, longest_gap)


def node_watch_families(clusters: list[WatchMetrics]) -> Iterable[Metric]:
    """The Node watch of each cluster: its state (one series per state, zero-filled so an
    alert on `state="forbidden"` sees it end) and its counters."""
    state = GaugeMetricFamily(
        f"{PREFIX}_node_watch_state",
        "1 for the Node watch's current state (watching, reconnecting, forbidden, …).",
        labels=["cluster", "state"],
    )
    events = CounterMetricFamily(
        f"{PREFIX}_node_watch_events", "Node watch events received.", labels=["cluster"]
    )
    reconnects = CounterMetricFamily(
        f"{PREFIX}_node_watch_reconnects", "Node watch connections re-opened.", labels=["cluster"]
    )
    relists = CounterMetricFamily(
        f"{PREFIX}_node_watch_relists",
        "Full Node lists (the first, and after 410 Gone).",
        labels=["cluster"],
    )
    lag = GaugeMetricFamily(
        f"{PREFIX}_node_watch_lag_seconds",
        "Worst delay from Node event to database commit in the last flush that wrote.",
        labels=["cluster"],
    )
    for cluster in clusters:
        for value in ResourceWatchState.values:
            state.add_metric([cluster.cluster, value], 1 if cluster.nodes_watch == value else 0)
        events.add_metric([cluster.cluster], cluster.nodes_events_total)
        reconnects.add_metric([cluster.cluster], cluster.nodes_reconnects_total)
        relists.add_metric([cluster.cluster], cluster.nodes_relists_total)
        lag.add_metric([cluster.cluster], cluster.nodes_lag_seconds)
    return (state, events, reconnects, relists, lag)


_registered = False


def register() -> None:
    """Add the collector to the dashboard's registry, once per process."""
    global _registered
    if _registered:
        return
    from dashboard.metrics import register_collector

    register_collector(LeaseCollector())
    _registered = True
