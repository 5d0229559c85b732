"""Node rows and heartbeat Leases written straight with the ORM, as the Node watch would.

The pages, form and rules read these rows; how the watcher fills them is tested with the
watcher. Times are relative to the real clock (NKS tests poll the fake over real HTTP) unless
`now` is given.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import count
from typing import Any

from django.utils import timezone

from fakes.nks import FakeNks
from leases.models import (
    NODEGROUP_LABEL,
    ROLE_LABEL,
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseClass,
    Node,
    NodeReadyChange,
    ResourceWatchState,
)

_uids = count(1)


def watched_cluster(name: str, *, now: datetime | None = None, **fields: Any) -> KubeCluster:
    """A Lease source whose watcher wrote just now and whose Node watch is watching."""
    moment = now or timezone.now()
    values: dict[str, Any] = {
        "kubeconfig": "apiVersion: v1\n",
        "connected": True,
        "connected_since": moment - timedelta(hours=1),
        "last_flush_at": moment,
        "leases_as_of": moment,
        "nodes_as_of": moment,
        "last_event_at": moment,
        "nodes_watch": ResourceWatchState.WATCHING,
        "nodes_connected_since": moment - timedelta(hours=1),
    }
    values.update(fields)
    return KubeCluster.objects.create(name=name, **values)


def heartbeat(
    kube: KubeCluster, name: str, *, renewed_ago: float = 1.0, now: datetime | None = None
) -> Lease:
    """The kubelet's Lease in kube-node-lease, renewed `renewed_ago` s ago, 40 s long."""
    renewed = (now or timezone.now()) - timedelta(seconds=renewed_ago)
    lease, _ = Lease.objects.update_or_create(
        cluster=kube,
        namespace="kube-node-lease",
        name=name,
        defaults={
            "lease_class": LeaseClass.NODE_HEARTBEAT,
            "holder": name,
            "renew_time": renewed,
            "lease_duration_seconds": 40,
            "expires_at": renewed + timedelta(seconds=40),
            "observed_at": renewed,
        },
    )
    return lease


def make_node(
    kube: KubeCluster,
    name: str,
    *,
    nodegroup: str | None = "default-worker",
    instance: str | None = None,
    provider_id: str | None = None,
    ready: str = ConditionStatus.TRUE,
    reason: str = "KubeletReady",
    message: str = "kubelet is posting ready status",
    cordoned: bool = False,
    lease_renewed_ago: float | None = 1.0,
    now: datetime | None = None,
    **fields: Any,
) -> Node:
    """A worker Node; `instance` makes its providerID (openstack:///<instance>), `nodegroup`
    its magnum label (None: no label), and a heartbeat Lease unless `lease_renewed_ago` is None."""
    moment = now or timezone.now()
    labels = {ROLE_LABEL: "worker", "kubernetes.io/hostname": name}
    if nodegroup is not None:
        labels[NODEGROUP_LABEL] = nodegroup
    since = moment - timedelta(minutes=30)
    values: dict[str, Any] = {
        "uid": f"node-uid-{next(_uids)}",
        "labels": labels,
        "created_at": moment - timedelta(days=2),
        "provider_id": provider_id
        if provider_id is not None
        else (f"openstack:///{instance}" if instance else ""),
        "unschedulable": cordoned,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
        if cordoned
        else [],
        "conditions": {
            "Ready": {
                "status": ready,
                "reason": reason,
                "message": message,
                "last_transition_time": since.isoformat(),
            },
            "MemoryPressure": {"status": "False", "reason": "KubeletHasSufficientMemory"},
        },
        "ready": ready,
        "ready_since": since,
        "nodegroup_label": nodegroup or "",
        "kubelet_version": "v1.29.3",
        "internal_address": "192.168.0.10",
        "observed_at": moment,
    }
    values.update(fields)
    node = Node.objects.create(cluster=kube, name=name, **values)
    if lease_renewed_ago is not None:
        heartbeat(kube, name, renewed_ago=lease_renewed_ago, now=moment)
    return node


def set_ready(node: Node, status: str, reason: str, message: str = "") -> None:
    """Ready changes as the watcher records it: the row, and a history row."""
    now = timezone.now()
    previous = node.ready
    conditions = dict(node.conditions)
    conditions["Ready"] = {
        "status": status,
        "reason": reason,
        "message": message,
        "last_transition_time": now.isoformat(),
    }
    Node.objects.filter(pk=node.pk).update(
        ready=status, ready_since=now, conditions=conditions, observed_at=now
    )
    NodeReadyChange.objects.create(
        node=node,
        from_status=previous,
        to_status=status,
        reason=reason,
        message=message,
        transitioned_at=now,
        observed_at=now,
    )
    node.refresh_from_db()


def nodes_like_the_fake(
    fake: FakeNks, cluster: str, *, kube_name: str | None = None
) -> tuple[KubeCluster, dict[str, Node]]:
    """The fake NKS cluster watched: a Node (labelled, providerID from the fake's instance
    UUID, Ready as the fake says) and a fresh heartbeat Lease for every node of its workers."""
    kube = watched_cluster(kube_name or cluster)
    made: dict[str, Node] = {}
    with fake.state.lock:
        groups = [
            (group.name, [(node.name, node.uuid, node.ready) for node in group.nodes])
            for group in fake.state.find_cluster(cluster).workers
        ]
    for group, nodes in groups:
        for name, uuid, ready in nodes:
            made[name] = make_node(
                kube,
                name,
                nodegroup=group,
                instance=uuid,
                ready=ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
                reason="KubeletReady" if ready else "KubeletNotReady",
            )
    return kube, made
