"""One nodegroup's page: nodes and their Leases, 24 h history, resizes, the progress box."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dashboard.timefmt import When, iso_js, when
from leases.models import LeaseState
from nks import queries
from nks.models import Health, NksCluster, NksNodegroup
from nks.presenters.common import Banner, age_text, cluster_banners, ready_bar
from nks.presenters.resizes import ResizeRow, resize_rows
from nks.presenters.rows import (
    LeasesPanel,
    NodegroupRow,
    node_leases,
    nodegroup_health,
    nodegroup_row,
    readiness_of,
)
from nks.presenters.timeline import PERIODS_SHOWN, TIMELINE_HOURS, Timeline, build_timeline
from nks.services import linked_kube_cluster

RESIZES_SHOWN = 20
# A finished request stays in the nodegroup page's progress box this long.
RECENT_OUTCOME = timedelta(hours=1)


@dataclass(slots=True)
class NodeRow:
    name: str
    address: str
    uuid: str
    ready: bool | None  # NKS's per-node Ready
    lease: LeaseState | None  # None: no heartbeat Lease to judge by
    lease_text: str


@dataclass(slots=True)
class HistoryChange:
    at: When
    ready: str
    node_status: str
    health: Health


@dataclass(slots=True)
class NodegroupDetail:
    cluster: NksCluster
    nodegroup: NksNodegroup
    row: NodegroupRow
    banners: list[Banner]
    nodes: list[NodeRow]
    timeline: Timeline
    changes: list[HistoryChange]
    resizes: list[ResizeRow]
    leases: LeasesPanel | None
    server_now: str
    # NKS counts NotReady nodes but neither per-node keys nor expired Leases name them.
    unnamed_not_ready: bool


def nodegroup_history(
    cluster_id: int, name: str, now: datetime
) -> tuple[Timeline, list[HistoryChange]]:
    """The nodegroup's strip, and each poll at which its report changed, newest first."""
    points: list[tuple[datetime, Health]] = []
    changes: list[HistoryChange] = []
    last: tuple[Any, ...] | None = None
    since = now - timedelta(hours=TIMELINE_HOURS)
    for taken_at, freshness, groups in queries.nodegroup_reports(cluster_id, since):
        line = (groups or {}).get(name)
        if line is None:
            continue
        verdict = nodegroup_health(
            line.get("node_status") or "", line.get("ready"), line.get("not_ready"), freshness
        )
        points.append((taken_at, verdict))
        signature = (line.get("ready"), line.get("not_ready"), line.get("node_status"), verdict)
        if signature != last:
            moment = when(taken_at, now)
            assert moment is not None
            changes.append(
                HistoryChange(
                    at=moment,
                    ready=ready_bar(line.get("ready"), line.get("not_ready")).text,
                    node_status=line.get("node_status") or "—",
                    health=verdict,
                )
            )
            last = signature
    changes.reverse()
    return build_timeline(points, now), changes[:PERIODS_SHOWN]


def _node_rows(nodegroup: NksNodegroup, leases: LeasesPanel | None) -> list[NodeRow]:
    lease_states = {row.name: row.state for row in leases.rows} if leases else {}
    missing = "not watched" if leases is None else "no lease"
    nodes = []
    for node in nodegroup.nodes:
        lease = lease_states.get(node.get("name") or "")
        nodes.append(
            NodeRow(
                name=node.get("name") or "—",
                address=node.get("address") or "—",
                uuid=node.get("uuid") or "—",
                ready=readiness_of(node.get("ready")),
                lease=lease,
                lease_text=lease.value if lease else missing,
            )
        )
    if not nodes:
        # NKS listed addresses only: nothing to tell the nodes apart by but those.
        nodes = [
            NodeRow("—", address, "—", None, None, "—") for address in nodegroup.node_addresses
        ]
    return nodes


def nodegroup_detail(nodegroup: NksNodegroup, now: datetime) -> NodegroupDetail:
    cluster = nodegroup.cluster
    leases = node_leases(linked_kube_cluster(cluster), now, cluster.node_readiness)
    nodes = _node_rows(nodegroup, leases)
    timeline, changes = nodegroup_history(cluster.pk, nodegroup.name, now)
    banners = cluster_banners(cluster, now)
    if nodegroup.gone_at is not None and cluster.gone_at is None:
        banners.append(
            Banner(
                "warning",
                f"NKS stopped listing this nodegroup {age_text(nodegroup.gone_at, now)}.",
            )
        )
    return NodegroupDetail(
        cluster=cluster,
        nodegroup=nodegroup,
        row=nodegroup_row(nodegroup, cluster, now),
        banners=banners,
        nodes=nodes,
        timeline=timeline,
        changes=changes,
        resizes=resize_rows(queries.resizes().filter(nodegroup=nodegroup)[:RESIZES_SHOWN], now),
        leases=leases,
        server_now=iso_js(now),
        unnamed_not_ready=bool(nodegroup.not_ready)
        and not any(row.ready is False or row.lease == LeaseState.EXPIRED for row in nodes),
    )


def latest_resize_row(nodegroup: NksNodegroup, now: datetime) -> ResizeRow | None:
    """The nodegroup's request in flight, else its last one if it finished within an hour."""
    request = queries.resizes().filter(nodegroup=nodegroup).first()
    if request is None:
        return None
    if not request.is_in_flight and (
        request.finished_at is None or now - request.finished_at > RECENT_OUTCOME
    ):
        return None
    return resize_rows([request], now)[0]
