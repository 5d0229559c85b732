"""Read-side queries for NKS: which rows the pages, the overview and the API read, in what order.

Nothing here writes or formats. Queries that join an account or a Lease source defer its
secrets (password, token, kubeconfig), so a page never loads what it must never show.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Case, F, QuerySet, Value, When
from django.db.models.functions import Collate

from dashboard.natural import natural_key
from leases.freshness import is_current
from leases.lease_states import expired_condition, held_count, state_counts
from leases.models import KubeCluster, Lease, LeaseClass
from nks.models import (
    IN_FLIGHT_STATES,
    Health,
    HealthSample,
    NksAccount,
    NksCluster,
    NksEvent,
    NksNodegroup,
    ResizeRequest,
)
from nks.services import kube_name as linked_kube_name

ACCOUNT_SECRETS = ("password", "token")


def accounts() -> list[NksAccount]:
    return list(NksAccount.objects.defer(*ACCOUNT_SECRETS))


def listed_clusters(*, include_gone: bool) -> QuerySet[NksCluster]:
    """Clusters with their account, without the per-node JSON the list never shows."""
    clusters = NksCluster.objects.select_related("account").defer(
        "account__password", "account__token", "node_readiness", "node_addresses"
    )
    return clusters if include_gone else clusters.filter(gone_at__isnull=True)


def api_clusters() -> QuerySet[NksCluster]:
    return (
        NksCluster.objects.select_related("account")
        .defer("account__password", "account__token")
        .prefetch_related("nodegroups")
        .order_by("account__name", "name", "uuid")
    )


def get_cluster(uuid: str) -> NksCluster | None:
    return (
        NksCluster.objects.select_related("account", "kube_cluster")
        .defer("account__password", "account__token", "kube_cluster__kubeconfig")
        .filter(uuid=uuid)
        .first()
    )


def get_nodegroup(cluster_uuid: str, name: str) -> NksNodegroup | None:
    """The nodegroup of that name: the live one, else the one NKS listed last."""
    return (
        NksNodegroup.objects.select_related("cluster__account", "cluster__kube_cluster")
        .defer(
            "cluster__account__password",
            "cluster__account__token",
            "cluster__kube_cluster__kubeconfig",
        )
        .filter(cluster__uuid=cluster_uuid, name=name)
        .order_by(F("gone_at").asc(nulls_first=True), "-polled_at", "-pk")
        .first()
    )


def recent_events(cluster: NksCluster, limit: int) -> QuerySet[NksEvent]:
    return NksEvent.objects.filter(cluster=cluster).order_by("-nks_created_at", "-pk")[:limit]


# --- Health history ----------------------------------------------------------------------


def _samples(cluster_id: int, since: datetime) -> QuerySet[HealthSample]:
    return HealthSample.objects.filter(cluster_id=cluster_id, taken_at__gte=since).order_by(
        "taken_at", "id"
    )


def cluster_health_points(cluster_id: int, since: datetime) -> list[tuple[datetime, Health]]:
    """The cluster's verdict at each poll since `since`, oldest first."""
    return [
        (taken_at, Health(health))
        for taken_at, health in _samples(cluster_id, since).values_list("taken_at", "health")
    ]


def nodegroup_reports(cluster_id: int, since: datetime) -> QuerySet[HealthSample, Any]:
    """(taken_at, freshness, {nodegroup name: report}) per poll since `since`, oldest first."""
    return _samples(cluster_id, since).values_list("taken_at", "freshness", "nodegroups")


# --- Resizes -------------------------------------------------------------------------------


def resizes() -> QuerySet[ResizeRequest]:
    """Resize requests with their cluster (every row links to it), newest first."""
    return ResizeRequest.objects.select_related("cluster").order_by("-created_at", "-pk")


def in_flight_resizes() -> QuerySet[ResizeRequest]:
    return resizes().filter(state__in=IN_FLIGHT_STATES)


def filtered_resizes(filters: dict[str, str]) -> QuerySet[ResizeRequest]:
    """The audit's rows: by cluster uuid, username, and outcome (a state, or "in_flight")."""
    requests = resizes()
    if filters.get("cluster"):
        requests = requests.filter(cluster__uuid=filters["cluster"])
    if filters.get("user"):
        requests = requests.filter(username=filters["user"])
    outcome = filters.get("outcome")
    if outcome == "in_flight":
        requests = requests.filter(state__in=IN_FLIGHT_STATES)
    elif outcome:
        requests = requests.filter(state=outcome)
    return requests


# --- Node heartbeat Leases -----------------------------------------------------------------


def _heartbeat_as_of(kube_cluster: KubeCluster, now: datetime) -> dict[int, datetime]:
    # What its leases' states are judged by (leases.lease_states.lease_as_of, for one).
    as_of = kube_cluster.leases_as_of if kube_cluster.enabled else None
    return {kube_cluster.pk: as_of} if as_of is not None and is_current(as_of, now) else {}


def node_heartbeats(kube_cluster: KubeCluster) -> QuerySet[Lease]:
    """The node heartbeat Leases of a Lease source."""
    return Lease.objects.live().filter(cluster=kube_cluster, lease_class=LeaseClass.NODE_HEARTBEAT)


def node_heartbeat_counts(kube_cluster: KubeCluster, now: datetime) -> dict[str, int]:
    """A Lease source's node heartbeat Leases by state at `now`, counted in one aggregate:
    `total`, `held`, `expired`, `released`, `unknown`."""
    row = node_heartbeats(kube_cluster).aggregate(
        **state_counts(now, _heartbeat_as_of(kube_cluster, now))
    )
    return {**row, "held": held_count(row)}


def node_heartbeat_page(
    kube_cluster: KubeCluster, now: datetime, limit: int
) -> list[dict[str, Any]]:
    """The first `limit` node heartbeat Leases: the expired ones first (what the page is
    looked at for), then in natural name order (worker-2 before worker-10)."""
    expired = expired_condition(now, _heartbeat_as_of(kube_cluster, now))
    # name_key compares as bytes: PostgreSQL's default collation would ignore its padding
    # (SQLite compares bytes already).
    name_key: Any = F("name_key")
    if connection.vendor == "postgresql":
        name_key = Collate(name_key, "C")
    rows = list(
        node_heartbeats(kube_cluster)
        .annotate(rank=Case(When(expired, then=Value(0)), default=Value(1)))
        .order_by("rank", name_key, "name")
        .values("rank", "namespace", "name", "holder", "expires_at", "renew_time")[:limit]
    )
    # The ingest writes name_key; a lease written another way (admin, a script) has none, so
    # the page is put in natural order again here, within the rows the database chose.
    rows.sort(key=lambda row: (row["rank"], natural_key(row["name"]), row["name"]))
    for row in rows:
        del row["rank"]
    return rows


def nks_cluster_watched_as(kube_cluster: KubeCluster) -> tuple[NksCluster, set[str]] | None:
    """The NKS cluster a Lease source watches, with its live nodegroups' names; or None.

    The reverse of ``nks.services.linked_kube_cluster``: the cluster linked to it, else a live
    one whose name it was registered under.
    """
    clusters = NksCluster.objects.live().defer("node_readiness", "node_addresses")
    cluster = clusters.filter(kube_cluster=kube_cluster).first()
    if cluster is None:
        cluster = next(
            (
                candidate
                for candidate in clusters.filter(kube_cluster__isnull=True)
                if linked_kube_name(candidate.name) == kube_cluster.name
            ),
            None,
        )
    if cluster is None:
        return None
    names = set(
        NksNodegroup.objects.filter(cluster=cluster, gone_at__isnull=True).values_list(
            "name", flat=True
        )
    )
    return cluster, names
