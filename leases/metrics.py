"""Prometheus series for Lease watching, read from the database at scrape time.

Watchers run in Celery workers; their counters live on KubeCluster rows, so any web replica
exports the same numbers. What a scrape costs and says grows with clusters and election
leases, never with node heartbeats:

- per cluster: the watch counters and states, live leases by class and state, and the node
  heartbeats' renewal ages as a histogram and a maximum (never a series per node);
- per leader-election or control-plane lease: its expiry, transitions and availability, up
  to METRICS_MAX_ELECTION_LEASES shared fairly among clusters (the rest counted per cluster),
  so a hostile API server's 100,000 "election" leases cost what the budget allows.

A scrape is a fixed handful of queries: one grouped read of every lease for the counts and
ages, one read of the listed election leases, and the availability reads for all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import (
    Aggregate,
    Case,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Max,
    Q,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.functions import RowNumber
from django.utils import timezone
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from dashboard.metrics import DatabaseCollector, GaugeLines, label_text
from leases.availability import ELECTION_CLASSES, WINDOWS, Availability, availability_by_window
from leases.lease_states import lease_as_of
from leases.models import KubeCluster, Lease, LeaseClass, LeaseState, ResourceWatchState
from leases.overview_queries import lease_state_counts

PREFIX = "lease_dashboard"


@dataclass(slots=True)
class WatchMetrics:
    cluster_id: int
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
            cluster_id=cluster.pk,
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


# Node heartbeat renewal ages (seconds), a histogram per cluster: the buckets bound the
# series however many nodes there are. A kubelet renews every 10 s, a quarter of its 40 s
# lease; past 40 s the lease has expired.
RENEWAL_AGE_BUCKETS: tuple[float, ...] = (5, 10, 15, 20, 30, 40, 60, 120, 300, 600)


@dataclass(slots=True)
class RenewalAges:
    """One cluster's node heartbeat leases by how long ago they were last renewed, at the
    cluster's as-of moment (what is known: a renewal after it may be on its way)."""

    buckets: list[int]  # cumulative: at most each of RENEWAL_AGE_BUCKETS old
    count: int
    sum_seconds: float
    max_seconds: float | None


@dataclass(slots=True)
class LeaseAggregates:
    # (cluster, class, state) -> live leases, zero-filled so series never vanish.
    counts: dict[tuple[str, str, str], int]
    # Cluster name -> renewal ages of its node heartbeat leases; only clusters whose data is
    # current (a stale cluster's ages say nothing of now, as its states are unknown).
    renewal_ages: dict[str, RenewalAges]
    # Cluster id -> live leader-election and control-plane leases.
    election_leases: dict[int, int]


def _seconds(value: timedelta | float | None) -> float:
    # SQLite hands a duration aggregate back as microseconds when no row matched the filter.
    if value is None:
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value) / 1_000_000


def _renewal_aggregates() -> dict[str, Aggregate]:
    """The node heartbeats' renewal ages in a (cluster, class) group, measured back from the
    cluster's as-of moment (what is known), as extra aggregates of the one state count."""
    as_of = F("cluster__leases_as_of")
    renewed = ~Q(holder="") & Q(renew_time__isnull=False)
    age = ExpressionWrapper(as_of - F("renew_time"), output_field=DurationField())
    aggregates: dict[str, Aggregate] = {
        "renewal_count": Count("id", filter=renewed),
        "renewal_age_sum": Sum(age, filter=renewed),
        "renewal_age_max": Max(age, filter=renewed),
    }
    for index, seconds in enumerate(RENEWAL_AGE_BUCKETS):
        aggregates[f"renewed_within_{index}"] = Count(
            "id", filter=renewed & Q(renew_time__gte=as_of - timedelta(seconds=seconds))
        )
    return aggregates


def lease_aggregates(now: datetime, names: dict[int, str]) -> LeaseAggregates:
    """Every live lease counted by cluster, class and state, and the node heartbeats'
    renewal ages: the overview's one grouped state count (`lease_state_counts`, the rule of
    `lease_state` judged by each cluster's as-of moment), per class, with the renewal ages
    read from the same rows."""
    rows = lease_state_counts(now, timedelta(0), by_class=True, extra=_renewal_aggregates())
    counts = {
        (cluster, lease_class, state): 0
        for cluster in names.values()
        for lease_class in LeaseClass.values
        for state in LeaseState.values
    }
    # A current cluster without heartbeats still says "none renewed", not nothing.
    ages: dict[str, RenewalAges] = {
        names[cluster_id]: RenewalAges([0] * len(RENEWAL_AGE_BUCKETS), 0, 0.0, None)
        for cluster_id in lease_as_of(now)
        if cluster_id in names
    }
    elections: dict[int, int] = {}
    for (cluster_id, lease_class), found in rows.items():
        cluster = names.get(cluster_id)
        if cluster is None:
            continue
        if lease_class in ELECTION_CLASSES:
            elections[cluster_id] = elections.get(cluster_id, 0) + found.total
        for state, count in (
            (LeaseState.HELD, found.held),
            (LeaseState.RELEASED, found.released),
            (LeaseState.EXPIRED, found.expired),
            (LeaseState.UNKNOWN, found.unknown),
        ):
            counts[(cluster, lease_class, state.value)] = count
        extra = found.extra
        if found.current and lease_class == LeaseClass.NODE_HEARTBEAT and extra["renewal_count"]:
            ages[cluster] = RenewalAges(
                buckets=[extra[f"renewed_within_{i}"] for i in range(len(RENEWAL_AGE_BUCKETS))],
                count=extra["renewal_count"],
                sum_seconds=_seconds(extra["renewal_age_sum"]),
                max_seconds=_seconds(extra["renewal_age_max"]),
            )
    return LeaseAggregates(counts, ages, elections)


def fair_quotas(counts: Mapping[int, int], budget: int) -> dict[int, int]:
    """How many of each cluster's leases get series of their own within `budget`: every
    cluster the same share, a cluster that needs less leaving the rest to the others. One
    cluster with thousands of election leases (a hostile API server's) cannot push the
    others' leases out."""
    quotas: dict[int, int] = {}
    left = budget
    ordered = sorted(counts.items(), key=lambda item: (item[1], item[0]))
    for position, (cluster_id, count) in enumerate(ordered):
        quotas[cluster_id] = min(count, left // (len(ordered) - position))
        left -= quotas[cluster_id]
    return quotas


@dataclass(slots=True)
class LeaseMetric:
    cluster: str
    namespace: str
    name: str
    seconds_until_expiry: float | None
    transitions: int | None
    # Window -> availability over it.
    availability: dict[str, Availability]


def _listed_leases(quotas: Mapping[int, int], counts: Mapping[int, int]) -> list[Lease]:
    """The live election leases that get series: all of them within the budget; else each
    cluster's first `quota`, control-plane leases first, then by namespace and name."""
    leases = (
        Lease.objects.live()
        .filter(lease_class__in=ELECTION_CLASSES)
        .only(
            "cluster_id",
            "namespace",
            "name",
            "holder",
            "expires_at",
            "lease_transitions",
            "created_at",
            "deleted_at",
            "lease_class",
        )
    )
    capped = {
        cluster_id: quota for cluster_id, quota in quotas.items() if quota < counts[cluster_id]
    }
    if capped:
        leases = leases.annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("cluster_id")],
                order_by=[
                    Case(
                        When(lease_class=LeaseClass.CONTROL_PLANE, then=Value(0)), default=Value(1)
                    ),
                    F("namespace"),
                    F("name"),
                ],
            ),
            quota=Case(
                *(
                    When(cluster_id=cluster_id, then=Value(quota))
                    for cluster_id, quota in capped.items()
                ),
                default=Value(max(counts.values(), default=0)),
            ),
        ).filter(rank__lte=F("quota"))
    return list(leases.order_by("cluster_id", "namespace", "name"))


def per_lease_metrics(
    now: datetime, names: Mapping[int, str], election_leases: Mapping[int, int]
) -> tuple[list[LeaseMetric], dict[str, int]]:
    """Leader-election and control-plane leases, each with its own series, up to
    METRICS_MAX_ELECTION_LEASES shared fairly among clusters; and, per cluster, how many
    were left out. Their availability comes from one batched read for every window
    (leases/availability.py), never a query per lease."""
    counts = {cluster_id: election_leases.get(cluster_id, 0) for cluster_id in names}
    quotas = fair_quotas(counts, settings.METRICS_MAX_ELECTION_LEASES)
    leases = _listed_leases(quotas, counts) if any(quotas.values()) else []
    figures = availability_by_window(leases, now)
    metrics = [
        LeaseMetric(
            cluster=names.get(lease.cluster_id, "?"),
            namespace=lease.namespace,
            name=lease.name,
            # A released lease has no meaningful expiry.
            seconds_until_expiry=(
                (lease.expires_at - now).total_seconds()
                if lease.holder and lease.expires_at
                else None
            ),
            transitions=lease.lease_transitions,
            availability=figures[lease.pk],
        )
        for lease in sorted(
            leases,
            key=lambda lease: (names.get(lease.cluster_id, "?"), lease.namespace, lease.name),
        )
    ]
    omitted = {names[cluster_id]: counts[cluster_id] - quotas[cluster_id] for cluster_id in names}
    return metrics, omitted


# Families other lease modules add (leases/watcher_metrics.py: which worker watches which
# cluster), read under this collector's `up` gauge at each scrape. A source is a function
# of the scrape's moment; add it once per process with `add_family_source`.
FamilySource = Callable[[datetime], Iterable[Metric]]
_family_sources: list[FamilySource] = []


def add_family_source(source: FamilySource) -> None:
    if source not in _family_sources:
        _family_sources.append(source)


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

        names = {cluster.cluster_id: cluster.cluster for cluster in clusters}
        aggregates = lease_aggregates(now, names)
        leases = GaugeMetricFamily(
            f"{PREFIX}_leases",
            "Live leases by class and state (state from the clock at scrape time).",
            labels=["cluster", "class", "state"],
        )
        for (cluster_name, lease_class, state), count in sorted(aggregates.counts.items()):
            leases.add_metric([cluster_name, lease_class, state], count)
        yield leases
        yield from renewal_age_families(aggregates.renewal_ages)

        per_lease, omitted = per_lease_metrics(now, names, aggregates.election_leases)
        yield from per_lease_families(per_lease, omitted)
        for source in _family_sources:
            yield from source(now)


def renewal_age_families(ages: Mapping[str, RenewalAges]) -> Iterable[Metric]:
    """Node heartbeats as aggregates per cluster, never a series per node."""
    histogram = HistogramMetricFamily(
        f"{PREFIX}_node_heartbeat_renewal_age_seconds",
        "Node heartbeat leases with a holder by seconds since their last renewal, at the "
        "cluster's data as-of moment (clusters whose data is current only).",
        labels=["cluster"],
    )
    oldest = GaugeMetricFamily(
        f"{PREFIX}_node_heartbeat_max_renewal_age_seconds",
        "Seconds since the least recently renewed node heartbeat lease with a holder was "
        "renewed, at the cluster's data as-of moment (absent: no such lease, or the data is "
        "not current).",
        labels=["cluster"],
    )
    for cluster, figures in sorted(ages.items()):
        buckets = [
            (_bound(seconds), count)
            for seconds, count in zip(RENEWAL_AGE_BUCKETS, figures.buckets, strict=True)
        ]
        histogram.add_metric(
            [cluster], [*buckets, ("+Inf", figures.count)], round(figures.sum_seconds, 3)
        )
        if figures.max_seconds is not None:
            oldest.add_metric([cluster], round(figures.max_seconds, 3))
    return (histogram, oldest)


def _bound(seconds: float) -> str:
    return f"{float(seconds)}"


def _ratio(value: float) -> float:
    """Floored to a millionth: shorter lines, and a ratio just under 1 never reads as 1."""
    return math.floor(value * 1_000_000) / 1_000_000


def per_lease_families(leases: list[LeaseMetric], omitted: Mapping[str, int]) -> Iterable[Metric]:
    """Up to eight series per election lease, written as text directly (`GaugeLines`): a
    lease's labels are escaped once for all of them.

    The longest gap is written only for a window with a gap: no gap is what a ratio of 1
    already says, and a window nobody observed has no longest gap (nor ratio) to tell. At
    fleet size that leaves out most of the family (a healthy lease has none in 1 h and 24 h).
    """
    until_expiry = GaugeLines(
        f"{PREFIX}_lease_seconds_until_expiry",
        "Seconds until a held leader-election or control-plane lease expires "
        "(negative: expired that long ago).",
    )
    transitions = GaugeLines(
        f"{PREFIX}_lease_transitions",
        "The lease's leaseTransitions (holder changes counted by the API server).",
    )
    ratio = GaugeLines(
        f"{PREFIX}_lease_availability_ratio",
        "Share of the window's observed time during which a leader-election or control-plane "
        "lease had a valid holder (absent when the watcher observed none of the window).",
    )
    longest_gap = GaugeLines(
        f"{PREFIX}_lease_longest_gap_seconds",
        "Longest leaderless gap in the window, counting only the time the watcher observed "
        "(absent when the window had no gap: its ratio is 1, or absent too).",
    )
    left_out = GaugeMetricFamily(
        f"{PREFIX}_lease_series_omitted",
        "Live leader-election and control-plane leases of the cluster without series of "
        "their own: over METRICS_MAX_ELECTION_LEASES, shared fairly among clusters.",
        labels=["cluster"],
    )
    labels = [
        label_text({"cluster": lease.cluster, "namespace": lease.namespace, "name": lease.name})
        for lease in leases
    ]
    for lease, text in zip(leases, labels, strict=True):
        if lease.seconds_until_expiry is not None:
            until_expiry.add_line(text, round(lease.seconds_until_expiry, 3))
        if lease.transitions is not None:
            transitions.add_line(text, lease.transitions)
    for window in WINDOWS:
        suffix = f',window="{window}"'
        for lease, text in zip(leases, labels, strict=True):
            figures = lease.availability[window]
            # No observed time is no answer, not 0 % and not 100 %.
            if figures.ratio is not None:
                ratio.add_line(text + suffix, _ratio(figures.ratio))
            if figures.gaps:
                longest_gap.add_line(text + suffix, round(figures.longest_gap_seconds, 3))
    for cluster, count in sorted(omitted.items()):
        left_out.add_metric([cluster], count)
    return (until_expiry, transitions, ratio, longest_gap, left_out)


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
