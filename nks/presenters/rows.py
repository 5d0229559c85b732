"""Rows more than one NKS page shows: a nodegroup, an NKS operation, a node heartbeat Lease.

Rows carry domain values (Health, OperationPhase, EventState, LeaseState); the templates pick
their colours with the filters of nks/templatetags/nks_classes.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.translation import gettext

from dashboard.links import lease_url
from dashboard.timefmt import When, format_duration, when
from leases.models import KubeCluster, LeaseClass, LeaseState, lease_state
from nks.enums import EventState, Freshness, OperationPhase
from nks.models import Health, NksCluster, NksEvent, NksNodegroup
from nks.presenters.common import ReadyBar, ready_bar
from nks.queries import node_heartbeat_counts, node_heartbeat_page


def nodegroup_health(
    node_status: str, ready: int | None, not_ready: int | None, freshness: str
) -> Health:
    """A nodegroup's verdict from one health report (its line and the cluster's freshness)."""
    if freshness != Freshness.FRESH:
        return Health.UNKNOWN
    upper = node_status.upper()
    if upper == "NORMAL":
        return Health.HEALTHY
    if upper == "NOT_READY_NODE_EXIST":
        return Health.DEGRADED
    if upper == "ALL_NODES_NOT_READY":
        return Health.DOWN
    if upper or ready is None or not_ready is None:
        return Health.UNKNOWN
    if not_ready == 0:
        return Health.HEALTHY
    return Health.DOWN if ready == 0 else Health.DEGRADED


@dataclass(slots=True)
class NodegroupRow:
    url: str
    name: str
    role: str
    status: str
    phase: OperationPhase
    status_reason: str
    node_count: str
    min_max: str
    autoscaler: str
    ready: ReadyBar
    node_status: str
    # None for a nodegroup that runs no workloads (a master group): no verdict to give.
    health: Health | None
    in_progress: bool
    gone: bool


def nodegroup_url(cluster_uuid: str, name: str) -> str:
    return reverse("nks:nodegroup", args=[cluster_uuid, name])


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def nodegroup_row(group: NksNodegroup, cluster: NksCluster, now: datetime) -> NodegroupRow:
    verdict = (
        nodegroup_health(group.node_status, group.ready, group.not_ready, cluster.freshness)
        if group.is_worker
        else None
    )
    if verdict is not None and cluster.effective_health(now) == Health.UNKNOWN:
        verdict = Health.UNKNOWN
    autoscaler = {
        True: gettext("on"),
        False: gettext("off"),
        None: gettext("unknown"),
    }[group.autoscaler_enabled]
    if group.autoscaler_enabled and (group.autoscaler_min or group.autoscaler_max):
        autoscaler += f" ({group.autoscaler_min or '?'}-{group.autoscaler_max or '?'})"
    return NodegroupRow(
        url=nodegroup_url(cluster.uuid, group.name),
        name=group.name,
        role=group.role or "—",
        status=group.status or gettext("unknown"),
        phase=OperationPhase.classify(group.status),
        status_reason=group.status_reason,
        node_count=str(group.node_count) if group.node_count is not None else "?",
        min_max=f"{_count(group.min_node_count)} / {_count(group.max_node_count)}",
        autoscaler=autoscaler,
        ready=ready_bar(group.ready, group.not_ready),
        node_status=group.node_status or ("—" if not group.is_worker else gettext("unknown")),
        health=verdict,
        in_progress=group.in_progress,
        gone=group.gone_at is not None,
    )


@dataclass(slots=True)
class EventRow:
    type: str
    state: EventState
    state_text: str  # as NKS sent it
    resource: str
    started: When | None
    finished: When | None
    duration: str
    contents: str


def event_rows(events: Iterable[NksEvent], now: datetime) -> list[EventRow]:
    rows = []
    for event in events:
        state = EventState(event.state)
        duration = event.duration
        if duration is not None:
            length = format_duration(duration.total_seconds())
        elif state == EventState.IN_PROGRESS and event.nks_created_at:
            length = gettext("%(duration)s so far") % {
                "duration": format_duration((now - event.nks_created_at).total_seconds())
            }
        else:
            length = "—"
        rows.append(
            EventRow(
                type=event.type or gettext("unknown"),
                state=state,
                state_text=event.raw_state or state.value,
                resource=f"{event.resource_type or '?'} {event.resource_name}".strip(),
                started=when(event.nks_created_at, now),
                finished=when(event.nks_updated_at, now) if event.finished else None,
                duration=length,
                contents=event.contents,
            )
        )
    return rows


def readiness_of(value: Any) -> bool | None:
    """NKS's per-node Ready as stored: True or False when it said so, anything else unknown."""
    return value if isinstance(value, bool) else None


@dataclass(slots=True)
class NodeLeaseRow:
    name: str
    url: str
    state: LeaseState
    renewed: When | None
    nks_ready: bool | None  # NKS's per-node Ready key, when it sent one


@dataclass(slots=True)
class LeasesPanel:
    """Node heartbeat Leases of the Kubernetes cluster behind an NKS cluster: counted in
    SQL, and a bounded page of rows (expired first); the rest are in the Leases table."""

    kube_cluster: KubeCluster
    watcher_stale: bool
    rows: list[NodeLeaseRow]
    held: int
    expired: int
    total: int
    list_url: str

    @property
    def more(self) -> int:
        return self.total - len(self.rows)


# A cluster page shows this many heartbeat Leases; a 5,000-node cluster's are one link away.
NODE_LEASES_SHOWN = 50


def node_leases(
    kube_cluster: KubeCluster | None, now: datetime, readiness: dict[str, Any] | None = None
) -> LeasesPanel | None:
    if kube_cluster is None:
        return None
    prefix = reverse("leases:index")
    as_of = kube_cluster.leases_as_of if kube_cluster.enabled else None
    counts = node_heartbeat_counts(kube_cluster, now)
    rows = [
        NodeLeaseRow(
            name=lease["name"],
            url=lease_url(prefix, kube_cluster.name, lease["namespace"], lease["name"]),
            state=lease_state(lease["holder"], lease["expires_at"], now, as_of),
            renewed=when(lease["renew_time"], now),
            nks_ready=readiness_of((readiness or {}).get(lease["name"])),
        )
        for lease in node_heartbeat_page(kube_cluster, now, NODE_LEASES_SHOWN)
    ]
    return LeasesPanel(
        kube_cluster=kube_cluster,
        watcher_stale=kube_cluster.is_stale(now),
        rows=rows,
        held=counts["held"],
        expired=counts["expired"],
        total=counts["total"],
        list_url=f"{prefix}?"
        + urlencode({"cluster": kube_cluster.name, "class": LeaseClass.NODE_HEARTBEAT.value}),
    )
