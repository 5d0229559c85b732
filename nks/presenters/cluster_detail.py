"""One cluster's page: health in detail, 24 h history, nodegroups, operations, Leases, resizes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext

from dashboard.natural import natural_key
from dashboard.timefmt import iso_js, iso_utc
from nks import queries
from nks.models import NksCluster
from nks.node_picture import CrossCheck, counted_cluster_cross_checks
from nks.presenters.clusters import ClusterRow, cluster_row
from nks.presenters.common import Banner, cluster_banners
from nks.presenters.resizes import ResizeRow, resize_rows
from nks.presenters.rows import (
    EventRow,
    LeasesPanel,
    NodegroupRow,
    event_rows,
    node_leases,
    nodegroup_row,
)
from nks.presenters.timeline import Timeline, cluster_timeline
from nks.services import linked_kube_cluster

EVENTS_SHOWN = 20
RESIZES_SHOWN = 20


@dataclass(slots=True)
class ClusterDetail:
    cluster: NksCluster
    row: ClusterRow
    banners: list[Banner]
    timeline: Timeline
    nodegroups: list[NodegroupRow]
    events: list[EventRow]
    leases: LeasesPanel | None
    health_fields: list[tuple[str, str]]
    resizes: list[ResizeRow]
    server_now: str
    # NKS's counts beside the watched cluster's Nodes, per worker nodegroup (empty unwatched).
    checks: list[CrossCheck]


def _health_fields(cluster: NksCluster, row: ClusterRow) -> list[tuple[str, str]]:
    """NKS's health report field by field, as sent: what an engineer compares with NKS."""
    # Field names as NKS spells them (health_status, api, cluster.api_status, ...) stay so.
    version_status = cluster.kube_version_status or gettext("status unknown")
    return [
        (gettext("Health (dashboard's verdict)"), str(row.health.label)),
        ("health_status", cluster.health_status or gettext("missing")),
        (
            gettext("Health data refreshed by NKS"),
            iso_utc(cluster.health_timestamp) if cluster.health_timestamp else gettext("unknown"),
        ),
        ("api", cluster.api or "—"),
        ("cluster.api_status", cluster.api_status or "—"),
        ("cluster.node_status", cluster.node_status or "—"),
        (gettext("Nodes ready"), row.nodes_text),
        ("Kubernetes", f"{cluster.kube_version or '?'} ({version_status})"),
        (gettext("Platform version"), cluster.platform_version or "—"),
        (gettext("Availability zone"), cluster.availability_zone or "—"),
        (gettext("API address"), cluster.api_address or "—"),
        ("UUID", cluster.uuid),
    ]


def cluster_detail(uuid: str, now: datetime) -> ClusterDetail | None:
    cluster = queries.get_cluster(uuid)
    if cluster is None:
        return None
    groups = sorted(
        cluster.nodegroups.all(),
        key=lambda group: (group.gone_at is not None, natural_key(group.name)),
    )
    row = cluster_row(cluster, now)
    return ClusterDetail(
        cluster=cluster,
        row=row,
        banners=cluster_banners(cluster, now),
        timeline=cluster_timeline(cluster.pk, now),
        nodegroups=[nodegroup_row(group, cluster, now) for group in groups],
        events=event_rows(queries.recent_events(cluster, EVENTS_SHOWN), now),
        leases=node_leases(linked_kube_cluster(cluster), now, cluster.node_readiness),
        health_fields=_health_fields(cluster, row),
        resizes=resize_rows(queries.resizes().filter(cluster=cluster)[:RESIZES_SHOWN], now),
        server_now=iso_js(now),
        checks=counted_cluster_cross_checks(cluster, now),
    )
