"""One nodegroup's page: its Nodes and their Leases beside NKS's counts, 24 h history, resizes,
the progress box."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils.translation import gettext

from dashboard.natural import natural_key
from dashboard.timefmt import When, iso_js, when
from leases.models import ConditionStatus, LeaseState
from nks import queries
from nks.models import Health, NksCluster, NksNodegroup
from nks.node_picture import (
    CrossCheck,
    NodegroupNodePage,
    NodegroupNodes,
    NodeLine,
    cross_check,
)
from nks.presenters.common import Banner, age_text, cluster_banners, ready_bar
from nks.presenters.resizes import ResizeRow, resize_rows
from nks.presenters.rows import NodegroupRow, nodegroup_health, nodegroup_row
from nks.presenters.timeline import PERIODS_SHOWN, TIMELINE_HOURS, Timeline, build_timeline

RESIZES_SHOWN = 20
# The nodegroup page's table shows this many of its member Nodes (those needing a look first
# when there are more); the rest are one link away (`?nodes=all`). The resize form lists its
# own first removable nodes (nks.forms.NODES_OFFERED) and takes any other one typed in.
NODES_SHOWN = 25
# The query parameter (and its one value) that shows every member Node.
ALL_NODES_PARAMETER = "nodes"
ALL_NODES = "all"
# A finished request stays in the nodegroup page's progress box this long.
RECENT_OUTCOME = timedelta(hours=1)


@dataclass(slots=True)
class NodeRow:
    """A Node of the watched cluster, as the nodegroup page's table shows it."""

    name: str
    url: str
    ready: ConditionStatus
    ready_reason: str
    ready_message: str
    ready_since: When | None
    heartbeat: LeaseState | None  # None: no heartbeat Lease of that name
    heartbeat_url: str
    heartbeat_renewed: When | None
    age: When | None
    instance_uuid: str
    instance_problem: str
    cordoned: bool


def node_rows(lines: list[NodeLine], now: datetime, limit: int | None = None) -> list[NodeRow]:
    """The nodes in natural name order (worker-2 before worker-10). With `limit` and more
    nodes than that: the first `limit` of those needing a look first (NotReady, heartbeat
    expired, cordoned), each part in natural name order."""
    ordered = sorted(lines, key=lambda line: natural_key(line.name))
    if limit is not None and len(ordered) > limit:
        ordered = sorted(ordered, key=lambda line: line.removal_rank == 3)[:limit]
    return [node_row(line, now) for line in ordered]


def node_row(line: NodeLine, now: datetime) -> NodeRow:
    return NodeRow(
        name=line.name,
        url=line.url,
        ready=line.ready,
        ready_reason=line.ready_reason,
        ready_message=line.ready_message,
        ready_since=when(line.ready_since, now),
        heartbeat=line.heartbeat,
        heartbeat_url=line.heartbeat_url,
        heartbeat_renewed=when(line.heartbeat_renewed, now),
        age=when(line.created_at, now),
        instance_uuid=line.instance.uuid or "",
        instance_problem=line.instance.problem,
        cordoned=line.cordoned,
    )


@dataclass(slots=True)
class NodesPanel:
    """The nodegroup's Nodes from the cluster's own API, or why there are none to show."""

    watched: bool
    kube_cluster: str
    watch_problem: str
    members: list[NodeRow]
    unlabelled: list[NodeRow]
    check: CrossCheck | None
    # Without a watched cluster, NKS's addresses are all there is to tell nodes apart by.
    addresses: list[str]
    # Member Nodes in all (the table may show fewer), and the page showing every one.
    members_total: int = 0
    unlabelled_total: int = 0
    all_url: str = ""

    @property
    def more(self) -> int:
        return self.members_total - len(self.members)

    @property
    def unlabelled_more(self) -> int:
        return self.unlabelled_total - len(self.unlabelled)


def nodes_panel(
    nodegroup: NksNodegroup,
    nodes: NodegroupNodes | NodegroupNodePage | None,
    now: datetime,
    *,
    every_node: bool = False,
    page_url: str = "",
) -> NodesPanel:
    """The Nodes card; a bounded table (NODES_SHOWN) unless `every_node` was asked for.

    ``nodes``: every member (``nodegroup_nodes``, when the resize form needs them anyway or
    every node is asked for), or the page of them the table shows (``nodegroup_node_page``).
    """
    if nodes is None:
        return NodesPanel(
            False, "", "", [], [], None, [str(address) for address in nodegroup.node_addresses]
        )
    all_url = f"{page_url}?{urlencode({ALL_NODES_PARAMETER: ALL_NODES})}#nodes"
    if isinstance(nodes, NodegroupNodePage):
        # Already the page, in the table's order.
        return NodesPanel(
            watched=True,
            kube_cluster=nodes.kube_cluster.name,
            watch_problem=nodes.watch_problem,
            members=[node_row(line, now) for line in nodes.members],
            unlabelled=[node_row(line, now) for line in nodes.unlabelled],
            check=nodes.check,
            addresses=[],
            members_total=nodes.members_total,
            unlabelled_total=nodes.unlabelled_total,
            all_url=all_url,
        )
    limit = None if every_node else NODES_SHOWN
    return NodesPanel(
        watched=True,
        kube_cluster=nodes.kube_cluster.name,
        watch_problem=nodes.watch_problem,
        members=node_rows(nodes.members, now, limit),
        unlabelled=node_rows(nodes.unlabelled, now, limit),
        check=cross_check(nodegroup, nodes, now),
        addresses=[],
        members_total=len(nodes.members),
        unlabelled_total=len(nodes.unlabelled),
        all_url=all_url,
    )


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
    nodes: NodesPanel
    timeline: Timeline
    changes: list[HistoryChange]
    resizes: list[ResizeRow]
    server_now: str


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


def nodegroup_detail(
    nodegroup: NksNodegroup,
    now: datetime,
    nodes: NodegroupNodes | NodegroupNodePage | None,
    *,
    every_node: bool = False,
    page_url: str = "",
) -> NodegroupDetail:
    """``nodes``: the nodegroup's Nodes (``nks.node_picture.nodegroup_nodes``), read once per
    request for both this and the resize form. ``every_node``: the table lists every member
    Node, not NODES_SHOWN; ``page_url``: the page's own URL, for the link to all of them."""
    cluster = nodegroup.cluster
    timeline, changes = nodegroup_history(cluster.pk, nodegroup.name, now)
    banners = cluster_banners(cluster, now)
    if nodegroup.gone_at is not None and cluster.gone_at is None:
        banners.append(
            Banner(
                "warning",
                gettext("NKS stopped listing this nodegroup %(age)s.")
                % {"age": age_text(nodegroup.gone_at, now)},
            )
        )
    return NodegroupDetail(
        cluster=cluster,
        nodegroup=nodegroup,
        row=nodegroup_row(nodegroup, cluster, now),
        banners=banners,
        nodes=nodes_panel(nodegroup, nodes, now, every_node=every_node, page_url=page_url),
        timeline=timeline,
        changes=changes,
        resizes=resize_rows(queries.resizes().filter(nodegroup=nodegroup)[:RESIZES_SHOWN], now),
        server_now=iso_js(now),
    )


def progress_version(row: ResizeRow | None) -> str:
    """What the progress box says, in a few characters: the same version, the same words.

    The box sits in a live region; its 2-second refresh sends the version it shows, and an
    unchanged one is answered with no content, so a screen reader announces changes only.
    """
    if row is None:
        return "none"
    said = f"{row.id}|{row.state}|{row.error}"
    return hashlib.sha256(said.encode()).hexdigest()[:12]


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
