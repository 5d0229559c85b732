"""One Kubernetes Node: Ready now and its history, the other conditions, its heartbeat Lease,
and where NKS has it (cluster, nodegroup, instance UUID)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.urls import reverse
from django.utils.translation import gettext

from dashboard.links import lease_url
from dashboard.timefmt import When, format_duration, iso_js, relative_text, when
from leases.models import (
    KEPT_NODE_CONDITIONS,
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseState,
    Node,
    ResourceWatchState,
)
from leases.parse import parse_time
from leases.presenters.display import expiry_text, leases_prefix
from leases.presenters.watchers import ClusterStatus, cluster_status
from leases.provider_id import InstanceId, instance_uuid
from nks.presenters.rows import nodegroup_url
from nks.queries import nks_cluster_watched_as

NODE_LEASE_NAMESPACE = "kube-node-lease"
# A flapping node can have thousands of Ready changes: the page shows the newest.
HISTORY_LIMIT = 200


def node_watch_problem(kube_cluster: KubeCluster, now: datetime) -> str:
    """Why the cluster's Node rows may not be current, in words; "" when they are."""
    if not kube_cluster.enabled:
        return gettext("The Lease source %(name)s is disabled: its Nodes are not watched.") % {
            "name": kube_cluster.name
        }
    if kube_cluster.is_stale(now):
        return gettext("The watcher of %(name)s is not writing: its Node data may be old.") % {
            "name": kube_cluster.name
        }
    if kube_cluster.nodes_watch != ResourceWatchState.WATCHING:
        values = {
            "name": kube_cluster.name,
            "state": ResourceWatchState(kube_cluster.nodes_watch).label,
            "error": kube_cluster.nodes_last_error,
        }
        if kube_cluster.nodes_last_error:
            return gettext("The Node watch of %(name)s is %(state)s (%(error)s).") % values
        return gettext("The Node watch of %(name)s is %(state)s.") % values
    if kube_cluster.nodes_stale(now):
        # Watching, yet not proved current: the API server is frozen or the stream stuck.
        return gettext(
            "The Node data of %(name)s has not been confirmed by its API server for %(age)s: "
            "it may be old."
        ) % {
            "name": kube_cluster.name,
            "age": format_duration(
                (now - kube_cluster.nodes_as_of).total_seconds() if kube_cluster.nodes_as_of else 0
            ),
        }
    return ""


@dataclass(slots=True)
class ConditionRow:
    type: str
    status: ConditionStatus
    reason: str
    message: str
    since: When | None


@dataclass(slots=True)
class ReadyChangeRow:
    from_status: ConditionStatus
    to_status: ConditionStatus
    reason: str
    message: str
    transitioned: When | None
    observed: When | None
    # Ready changed and changed back while the dashboard was not watching: the watcher found
    # the same status with a newer lastTransitionTime (a row with from == to).
    missed: bool = False


@dataclass(slots=True)
class Heartbeat:
    url: str
    state: LeaseState
    renewed: When | None
    expires: When | None
    expires_text: str
    deleted: When | None
    namespace: str = NODE_LEASE_NAMESPACE


@dataclass(slots=True)
class NksPlace:
    """Where NKS has the node: its cluster, and its nodegroup when the label names one."""

    cluster_name: str
    cluster_url: str
    nodegroup: str  # the label's value
    nodegroup_url: str  # "" when NKS lists no nodegroup of that name


@dataclass(slots=True)
class NodeDetail:
    node: Node
    cluster: ClusterStatus
    watch_problem: str
    ready: ConditionRow
    conditions: list[ConditionRow]
    history: list[ReadyChangeRow]
    older_changes: int
    taints: list[tuple[str, str, str]]
    labels: list[tuple[str, str]]
    instance: InstanceId
    heartbeat: Heartbeat | None
    heartbeat_url: str  # where the Lease would be, shown even when none was seen
    nks: NksPlace | None
    created: When | None
    observed: When | None
    deleted: When | None
    server_now: str
    # "0 s ago" in the reader's language, until the browser's clock takes over.
    updated_text: str


def _status(value: object) -> ConditionStatus:
    return ConditionStatus(value) if value in ConditionStatus.values else ConditionStatus.UNKNOWN


def _condition(kind: str, data: dict[str, object] | None, now: datetime) -> ConditionRow:
    data = data if isinstance(data, dict) else {}
    # Stored as the API server wrote it; an unreadable time is shown as unknown, not a 500.
    moment = parse_time(data.get("last_transition_time"))
    return ConditionRow(
        type=kind,
        status=_status(data.get("status", "")),
        reason=str(data.get("reason") or ""),
        message=str(data.get("message") or ""),
        since=when(moment, now),
    )


def _ready(node: Node, data: dict[str, object] | None, now: datetime) -> ConditionRow:
    """Ready from the columns the watcher copies out (they are what pages and rules filter on),
    with the condition's reason and message."""
    row = _condition("Ready", data, now)
    row.status = _status(node.ready)
    row.since = when(node.ready_since, now) or row.since
    if node.cluster.nodes_stale(now):
        # Not known now (the banner says since when): the last known status stays in words.
        row.reason = gettext("last known: %(status)s") % {"status": row.status.label}
        row.status = ConditionStatus.UNKNOWN
    return row


def _heartbeat(kube_cluster: KubeCluster, name: str, now: datetime) -> Heartbeat | None:
    lease = Lease.objects.filter(
        cluster=kube_cluster, namespace=NODE_LEASE_NAMESPACE, name=name
    ).first()
    if lease is None:
        return None
    state = lease.state_at(now, kube_cluster.leases_as_of if kube_cluster.enabled else None)
    return Heartbeat(
        url=lease_url(leases_prefix(), kube_cluster.name, NODE_LEASE_NAMESPACE, name),
        state=state,
        renewed=when(lease.renew_time, now),
        expires=when(lease.expires_at, now),
        expires_text=expiry_text(state, lease.expires_at, now),
        deleted=when(lease.deleted_at, now),
    )


def _nks_place(kube_cluster: KubeCluster, nodegroup: str) -> NksPlace | None:
    found = nks_cluster_watched_as(kube_cluster)
    if found is None:
        return None
    cluster, nodegroup_names = found
    return NksPlace(
        cluster_name=cluster.name,
        cluster_url=reverse("nks:cluster", args=[cluster.uuid]),
        nodegroup=nodegroup,
        nodegroup_url=nodegroup_url(cluster.uuid, nodegroup)
        if nodegroup and nodegroup in nodegroup_names
        else "",
    )


def node_detail(cluster: str, name: str, now: datetime) -> NodeDetail | None:
    node = (
        Node.objects.select_related("cluster")
        .defer("cluster__kubeconfig")
        .filter(cluster__name=cluster, name=name)
        .first()
    )
    if node is None:
        return None
    kube_cluster = node.cluster
    conditions = node.conditions if isinstance(node.conditions, dict) else {}
    newest = list(node.ready_changes.order_by("-observed_at", "-id")[: HISTORY_LIMIT + 1])
    total = len(newest) if len(newest) <= HISTORY_LIMIT else node.ready_changes.count()
    shown = newest[:HISTORY_LIMIT]
    taints = [
        (str(taint.get("key", "")), str(taint.get("value") or ""), str(taint.get("effect", "")))
        for taint in (node.taints if isinstance(node.taints, list) else [])
        if isinstance(taint, dict)
    ]
    return NodeDetail(
        node=node,
        cluster=cluster_status(kube_cluster, now),
        watch_problem=node_watch_problem(kube_cluster, now),
        ready=_ready(node, conditions.get("Ready"), now),
        conditions=[
            _condition(kind, conditions.get(kind), now)
            for kind in KEPT_NODE_CONDITIONS
            if kind != "Ready" and kind in conditions
        ],
        history=[
            ReadyChangeRow(
                from_status=_status(change.from_status),
                to_status=_status(change.to_status),
                reason=change.reason,
                message=change.message,
                transitioned=when(change.transitioned_at, now),
                observed=when(change.observed_at, now),
                missed=change.from_status == change.to_status,
            )
            for change in shown
        ],
        older_changes=total - len(shown),
        taints=taints,
        labels=sorted((str(key), str(value)) for key, value in (node.labels or {}).items()),
        instance=instance_uuid(node.provider_id),
        heartbeat=_heartbeat(kube_cluster, node.name, now),
        heartbeat_url=lease_url(leases_prefix(), kube_cluster.name, NODE_LEASE_NAMESPACE, name),
        nks=_nks_place(kube_cluster, node.nodegroup_label),
        created=when(node.created_at, now),
        observed=when(node.observed_at, now),
        deleted=when(node.deleted_at, now),
        server_now=iso_js(now),
        updated_text=relative_text(0),
    )
