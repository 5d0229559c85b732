"""A node's life in a fake cluster: a kubelet joins (its Node and its heartbeat Lease), posts
status, stops, and the node is removed (the Lease goes with it, as the garbage collector does).

Flipping Ready and cordoning are store methods (`set_node_ready`, `cordon_node`); these
functions do what touches both kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fakes.kube.kubelet import DEFAULT_KUBELET_VERSION, Moment, kubelet_labels, kubelet_status
from fakes.kube.store import ObjectStore

NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_DURATION = 40


def add_node(
    store: ObjectStore,
    name: str,
    *,
    provider_id: str = "",
    internal_ip: str = "",
    labels: Mapping[str, str] | None = None,
    kubelet_version: str = DEFAULT_KUBELET_VERSION,
    ready: bool = True,
    at: Moment | None = None,
    created_at: float | datetime | None = None,
    lease_duration_seconds: int = NODE_LEASE_DURATION,
) -> dict[str, Any]:
    """A kubelet joins: its Node (Ready since `at`, or NotReady) and its heartbeat Lease in
    kube-node-lease, owned by the Node and renewed at `at`. Returns the Node."""
    when = store.now() if at is None else at
    node = store.apply_node(
        name,
        spec={"providerID": provider_id} if provider_id else {},
        status=kubelet_status(
            name, at=when, internal_ip=internal_ip, kubelet_version=kubelet_version, ready=ready
        ),
        labels=kubelet_labels(name, extra=labels),
        annotations={
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
        created_at=created_at,
    )
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
    store.apply_lease(
        NODE_LEASE_NAMESPACE,
        name,
        {
            "holderIdentity": name,
            "leaseDurationSeconds": lease_duration_seconds,
            "renewTime": when,
        },
        owner_references=[owner],
        created_at=created_at,
    )
    return node


def remove_node(store: ObjectStore, name: str) -> bool:
    """Delete the Node, then its heartbeat Lease (the garbage collector follows the owner
    reference). False when there was no such Node."""
    removed = store.delete_node(name)
    store.delete_lease(NODE_LEASE_NAMESPACE, name)
    return removed


def kubelet_heartbeat(store: ObjectStore, name: str, at: Moment | None = None) -> bool:
    """One kubelet heartbeat: the Lease's renewTime. False when the Lease is gone."""
    return store.renew_lease(NODE_LEASE_NAMESPACE, name, at)
