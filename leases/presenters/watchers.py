"""The watchers' status: is each cluster's lease data live, and if not, why (the Clusters page,
and the banners and pills of every Leases page); and where each cluster's Node watch stands."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Count, Field
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.natural import natural_key
from dashboard.timefmt import When, format_duration, when
from leases.kube import MAX_LEASE_BYTES, MAX_NODE_BYTES
from leases.models import KubeCluster, Node, ResourceWatchState
from leases.watcher_assignment import fleet

NODES_FORBIDDEN = _(
    "forbidden: the dashboard's ServiceAccount may not list nodes; grant get/list/watch on nodes"
)
NODES_NOT_SERVED = _("not served: this API server answers 404 for v1 Nodes")


@dataclass(slots=True)
class NodeWatchStatus:
    """The Node watch of one cluster: its state, how many Nodes, and how fresh they are."""

    cluster_id: int
    state: str  # a ResourceWatchState value
    state_label: str
    # The state in words when it needs any ("forbidden: …"), else "".
    problem: str
    last_event: When | None
    last_list: When | None
    stale: bool
    # "live", "no data yet", or how old the Node rows are ("data 2 min old").
    freshness: str
    last_error: str
    last_error_at: When | None
    relists_total: int
    reconnects_total: int
    events_total: int
    # Present Nodes, when counted for every cluster at once (`count_present_nodes`).
    counted_nodes: int | None = None

    def node_count(self) -> int:
        """Present Nodes, counted only when a page shows them: the Leases table and the
        overview poll every few seconds and need none."""
        if self.counted_nodes is not None:
            return self.counted_nodes
        return Node.objects.present().filter(cluster_id=self.cluster_id).count()


def count_present_nodes(statuses: Sequence[ClusterStatus]) -> None:
    """Every cluster's present Nodes in one grouped count (the watchers page), rather than
    one COUNT per cluster as each row asks for its own."""
    counts = dict(
        Node.objects.present()
        .filter(cluster_id__in=[status.id for status in statuses])
        .order_by()
        .values("cluster_id")
        .annotate(count=Count("id"))
        .values_list("cluster_id", "count")
    )
    for status in statuses:
        status.nodes.counted_nodes = counts.get(status.id, 0)


@dataclass(slots=True)
class CutObjects:
    """Objects of one resource the API server sent over their size cap: not ingested."""

    resource: str  # "Leases", "Nodes", in words
    total: int
    cap_bytes: int
    # The last one cut: its namespace/name as the server wrote it (untrusted text) and size.
    last: str
    last_bytes: int
    last_at: When | None


def cut_objects(cluster: KubeCluster, now: datetime) -> list[CutObjects]:
    """What the watch left out for its size, per resource (none: an empty list)."""
    found = []
    for resource, total, cap, last, last_bytes, last_at in (
        (
            gettext("Leases"),
            cluster.leases_cut_total,
            MAX_LEASE_BYTES,
            cluster.leases_last_cut,
            cluster.leases_last_cut_bytes,
            cluster.leases_last_cut_at,
        ),
        (
            gettext("Nodes"),
            cluster.nodes_cut_total,
            MAX_NODE_BYTES,
            cluster.nodes_last_cut,
            cluster.nodes_last_cut_bytes,
            cluster.nodes_last_cut_at,
        ),
        # The latest list's count (they are listed again every few seconds): no moment.
        (
            gettext("LeaseCandidates"),
            cluster.candidates_cut,
            MAX_LEASE_BYTES,
            cluster.candidates_last_cut,
            cluster.candidates_last_cut_bytes,
            None,
        ),
    ):
        if total:
            found.append(CutObjects(resource, total, cap, last, last_bytes, when(last_at, now)))
    return found


@dataclass(slots=True)
class ClusterStatus:
    """A watched cluster as the pages show it. Holds no kubeconfig, so none can leak."""

    id: int
    name: str
    enabled: bool
    source: str
    connected: bool
    stale: bool
    connected_since: When | None
    last_event: When | None
    last_flush: When | None
    last_list: When | None
    resource_version: str
    events_per_second: str
    events_total: int
    reconnects_total: int
    relists_total: int
    lag: str
    last_error: str
    last_error_at: When | None
    candidates_api: str
    data_age: str
    # False until a watcher has listed the cluster: no age to show, only "no data yet".
    has_data: bool
    # Where LeaseCandidates come from, or why there are none ("forbidden: …"), in words.
    candidates: str
    problem: str
    # Works, but an engineer should know (TLS verification off); from the kubeconfig check.
    config_warning: str
    # The lease data's as-of moment (leases.freshness), what states are judged by; None
    # for a disabled cluster, whose data is judged by nothing.
    as_of: datetime | None
    as_of_when: When | None
    # Objects stored without their NUL characters or skipped because the database refused them.
    skipped_objects_total: int
    nodes: NodeWatchStatus
    # Objects over their size cap, left out (leases/kube/bounded.py).
    cut: list[CutObjects]
    # The watch worker holding the cluster's lock now ("host:pid"), "" when none does. Only
    # the watchers page reads the lock's store for it (`watch_fleet`); elsewhere it is "".
    worker: str = ""


def _cluster_problem(cluster: KubeCluster, stale: bool, now: datetime) -> str:
    """Why this cluster's data must not be taken as current, in words; "" when it is fresh."""
    if not cluster.enabled:
        return gettext(
            "Cluster %(name)s is disabled: its leases are not watched, so what is shown "
            "is as it was when watching stopped."
        ) % {"name": cluster.name}
    if not stale:
        return ""
    # The error is the API server's or the client's own text: shown as written.
    error = cluster.last_error or gettext("no error was recorded")
    if not has_data(cluster) or cluster.leases_as_of is None:
        return gettext(
            "No data from cluster %(name)s yet — its watcher has not connected: %(error)s"
        ) % {"name": cluster.name, "error": error}
    age = format_duration(max(0.0, (now - cluster.leases_as_of).total_seconds()))
    if not cluster.connected:
        return gettext(
            "Data from cluster %(name)s is %(age)s old — its watcher is not connected: %(error)s"
        ) % {"name": cluster.name, "age": age, "error": error}
    return gettext(
        "Data from cluster %(name)s is %(age)s old — its watch is open, but the API server "
        "has not confirmed anything since (it may be frozen, or the stream stuck): %(error)s"
    ) % {"name": cluster.name, "age": age, "error": error}


def has_data(cluster: KubeCluster) -> bool:
    """Has a watcher ever listed this cluster? Rows written before this rule stamped their
    flush time with nothing to flush, so a flush time alone proves nothing."""
    return cluster.last_flush_at is not None and cluster.last_list_at is not None


def candidates_text(cluster: KubeCluster) -> str:
    """Where LeaseCandidates come from, or why there are none, in words."""
    if cluster.candidates_problem == "forbidden":
        return gettext(
            "forbidden: the dashboard's credentials may not list leasecandidates; grant get, "
            "list and watch on leasecandidates in coordination.k8s.io"
        )
    if cluster.candidates_api:
        return cluster.candidates_api
    if cluster.candidates_problem == "not_served":
        return gettext("not served by this API server")
    return gettext("not read yet")


def node_watch_status(cluster: KubeCluster, lease_stale: bool, now: datetime) -> NodeWatchStatus:
    """The same housekeeping thread writes both resources: Node rows are current while
    their watch is open and the cluster's watcher is live (its lease flushes are fresh)."""
    state = ResourceWatchState(cluster.nodes_watch or ResourceWatchState.NOT_STARTED)
    live = (
        state == ResourceWatchState.WATCHING
        and not lease_stale
        and cluster.enabled
        and not cluster.nodes_stale(now)
    )
    if cluster.nodes_last_list_at is None:
        freshness = gettext("no data yet")
    elif live:
        freshness = gettext("live")
    else:
        # The Node data's as-of moment: the last moment it was known to match the server.
        since = cluster.nodes_as_of or cluster.nodes_last_list_at
        freshness = gettext("data %(age)s old") % {
            "age": format_duration(max(0.0, (now - since).total_seconds()))
        }
    problem = ""
    if state == ResourceWatchState.FORBIDDEN:
        problem = str(NODES_FORBIDDEN)
    elif state == ResourceWatchState.NOT_SERVED:
        problem = str(NODES_NOT_SERVED)
    elif state in (ResourceWatchState.ERROR, ResourceWatchState.RECONNECTING):
        problem = cluster.nodes_last_error
    elif state == ResourceWatchState.WATCHING and lease_stale and cluster.enabled:
        problem = gettext("the cluster's watcher has gone quiet: Nodes are as last seen")
    return NodeWatchStatus(
        cluster_id=cluster.pk,
        state=state.value,
        state_label=str(state.label),
        problem=problem,
        last_event=when(cluster.nodes_last_event_at, now),
        last_list=when(cluster.nodes_last_list_at, now),
        stale=not live,
        freshness=freshness,
        last_error=cluster.nodes_last_error,
        last_error_at=when(cluster.nodes_last_error_at, now),
        relists_total=cluster.nodes_relists_total,
        reconnects_total=cluster.nodes_reconnects_total,
        events_total=cluster.nodes_events_total,
    )


def cluster_status(cluster: KubeCluster, now: datetime) -> ClusterStatus:
    stale = cluster.is_stale(now)
    return ClusterStatus(
        id=cluster.pk,
        name=cluster.name,
        enabled=cluster.enabled,
        source=str(cluster.get_source_display()),
        connected=cluster.connected,
        stale=stale,
        connected_since=when(cluster.connected_since, now),
        last_event=when(cluster.last_event_at, now),
        last_flush=when(cluster.last_flush_at, now) if has_data(cluster) else None,
        last_list=when(cluster.last_list_at, now),
        resource_version=cluster.resource_version,
        events_per_second=f"{cluster.events_per_second:.1f}",
        events_total=cluster.events_total,
        reconnects_total=cluster.reconnects_total,
        relists_total=cluster.relists_total,
        lag=f"{cluster.lag_seconds:.2f} s",
        last_error=cluster.last_error,
        last_error_at=when(cluster.last_error_at, now),
        candidates_api=cluster.candidates_api,
        data_age=(
            format_duration(max(0.0, (now - cluster.leases_as_of).total_seconds()))
            if has_data(cluster) and cluster.leases_as_of is not None
            else gettext("no data yet")
        ),
        as_of=cluster.leases_as_of if cluster.enabled else None,
        as_of_when=when(cluster.leases_as_of, now),
        has_data=has_data(cluster),
        candidates=candidates_text(cluster),
        problem=_cluster_problem(cluster, stale, now),
        config_warning=cluster.config_warning,
        skipped_objects_total=cluster.skipped_objects_total,
        nodes=node_watch_status(cluster, stale, now),
        cut=cut_objects(cluster, now),
    )


@cache
def _cluster_fields() -> tuple[Field[Any, Any], ...]:
    # The kubeconfig is a secret: the pages never even read it.
    return tuple(f for f in KubeCluster._meta.concrete_fields if f.name != "kubeconfig")


@cache
def watched_clusters_sql() -> str:
    """The clusters as every page lists them, by name, compiled once: the question never
    changes and has no parameters. Its columns are `_cluster_fields()`, in that order."""
    names = [field.name for field in _cluster_fields()]
    sql, _ = KubeCluster.objects.only(*names).order_by("name").query.sql_with_params()
    return sql


@cache
def _cluster_converters() -> tuple[tuple[int, Any, Any], ...]:
    """(column, converter, expression) for each value the database returns as something
    else than the field's Python value (SQLite's times, booleans), as the ORM applies them."""
    found = []
    for index, field in enumerate(_cluster_fields()):
        column = field.get_col(KubeCluster._meta.db_table)
        for converter in connection.ops.get_db_converters(column) + field.get_db_converters(
            connection
        ):
            found.append((index, converter, column))
    return tuple(found)


def clusters_from_rows(rows: Iterable[Sequence[Any]]) -> list[KubeCluster]:
    """Clusters from rows that begin with `watched_clusters_sql()`'s columns (any after them
    are ignored), built as the ORM builds them, in natural name order (prod-2 before
    prod-10). Not a RawQuerySet: its per-query mapping of columns to fields cost more than
    the query itself (0.14 ms of 0.22 for one cluster)."""
    fields = _cluster_fields()
    attnames = [field.attname for field in fields]
    converters = _cluster_converters()
    clusters = []
    for row in rows:
        values = list(row[: len(fields)])
        for index, converter, column in converters:
            values[index] = converter(values[index], column, connection)
        clusters.append(KubeCluster.from_db(connection.alias, attnames, values))
    # The statements order by name for a stable start; a handful of names, sorted here.
    clusters.sort(key=lambda cluster: natural_key(cluster.name))
    return clusters


def stale_sources(now: datetime) -> list[ClusterStatus]:
    """The clusters whose data must not be taken as current now (disabled ones too)."""
    return [cluster for cluster in cluster_statuses(now) if cluster.problem]


def cluster_statuses(now: datetime) -> list[ClusterStatus]:
    with connection.cursor() as cursor:
        cursor.execute(watched_clusters_sql())
        rows = cursor.fetchall()
    return [cluster_status(cluster, now) for cluster in clusters_from_rows(rows)]


@dataclass(slots=True)
class FleetWorkerStatus:
    """A watch worker on the watchers page: live, or gone within the hour."""

    name: str
    live: bool
    # The clusters whose lock it holds now, by name (natural order).
    clusters: list[str]
    capacity: int
    concurrency: int
    heartbeat: When | None
    started: When | None


@dataclass(slots=True)
class WatchFleet:
    workers: list[FleetWorkerStatus]
    live_count: int
    share: int
    # Enabled clusters whose lock nobody holds, by name.
    unwatched: list[str]


def watch_fleet(statuses: list[ClusterStatus], now: datetime) -> WatchFleet:
    """Which worker watches which cluster (set on each status as `worker`), and the live
    workers with what each holds: the heartbeat rows and one read of the lock's store."""
    current = fleet()
    names = {status.id: status.name for status in statuses}
    for status in statuses:
        status.worker = current.watcher_of.get(status.id, "")
    workers = [
        FleetWorkerStatus(
            name=worker.name,
            live=worker.live,
            clusters=sorted(
                (names[cid] for cid in worker.clusters if cid in names), key=natural_key
            ),
            capacity=worker.capacity,
            concurrency=worker.concurrency,
            heartbeat=when(worker.heartbeat_at, now),
            started=when(worker.started_at, now),
        )
        for worker in current.workers
    ]
    return WatchFleet(
        workers=workers,
        live_count=len(current.live),
        share=current.share,
        unwatched=sorted(
            (names[cid] for cid in current.unwatched if cid in names), key=natural_key
        ),
    )
