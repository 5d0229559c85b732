"""The watchers' status: is each cluster's lease data live, and if not, why (the Clusters page,
and the banners and pills of every Leases page)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.timefmt import When, format_duration, when
from leases.models import (
    KubeCluster,
)


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
    # Objects stored without their NUL characters or skipped because the database refused them.
    skipped_objects_total: int


def _cluster_problem(cluster: KubeCluster, stale: bool, now: datetime) -> str:
    """Why this cluster's data must not be taken as current, in words; "" when it is fresh."""
    if not cluster.enabled:
        return (
            f"Cluster {cluster.name} is disabled: its leases are not watched, so what is shown "
            "is as it was when watching stopped."
        )
    if not stale:
        return ""
    error = cluster.last_error or "no error was recorded"
    if not has_data(cluster):
        return f"No data from cluster {cluster.name} yet — its watcher has not connected: {error}"
    age = format_duration((now - cluster.last_flush_at).total_seconds())
    if not cluster.connected:
        return (
            f"Data from cluster {cluster.name} is {age} old — its watcher is not connected: {error}"
        )
    return (
        f"Data from cluster {cluster.name} is {age} old — its watcher is connected but has "
        f"written nothing since: {error}"
    )


def has_data(cluster: KubeCluster) -> bool:
    """Has a watcher ever listed this cluster? Rows written before this rule stamped their
    flush time with nothing to flush, so a flush time alone proves nothing."""
    return cluster.last_flush_at is not None and cluster.last_list_at is not None


def candidates_text(cluster: KubeCluster) -> str:
    """Where LeaseCandidates come from, or why there are none, in words."""
    if cluster.candidates_problem == "forbidden":
        return (
            "forbidden: the dashboard's credentials may not list leasecandidates; grant get, "
            "list and watch on leasecandidates in coordination.k8s.io"
        )
    if cluster.candidates_api:
        return cluster.candidates_api
    if cluster.candidates_problem == "not_served":
        return "not served by this API server"
    return "not read yet"


def cluster_status(cluster: KubeCluster, now: datetime) -> ClusterStatus:
    stale = cluster.is_stale(now)
    return ClusterStatus(
        id=cluster.pk,
        name=cluster.name,
        enabled=cluster.enabled,
        source=cluster.get_source_display(),
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
            format_duration((now - cluster.last_flush_at).total_seconds())
            if has_data(cluster) and cluster.last_flush_at is not None
            else "no data yet"
        ),
        has_data=has_data(cluster),
        candidates=candidates_text(cluster),
        problem=_cluster_problem(cluster, stale, now),
        config_warning=cluster.config_warning,
        skipped_objects_total=cluster.skipped_objects_total,
    )


def cluster_statuses(now: datetime) -> list[ClusterStatus]:
    # The kubeconfig is a secret: it is never even read by the pages.
    clusters = KubeCluster.objects.defer("kubeconfig").order_by("name")
    return [cluster_status(cluster, now) for cluster in clusters]
