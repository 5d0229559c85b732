"""A node's life in a fake cluster: a kubelet joins (its Node and its heartbeat Lease), posts
status, stops, and the node is removed (the Lease goes with it, as the garbage collector does).

Flipping Ready and cordoning are store methods (`set_node_ready`, `cordon_node`); these
functions do what touches both kinds.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fakes.kube.node_store import kubelet_conditions
from fakes.kube.store import ObjectStore

NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_LEASE_DURATION = 40
DEFAULT_KUBELET_VERSION = "v1.24.17"
KUBELET_PORT = 10250

Moment = str | datetime | float


def kubelet_labels(
    name: str, *, extra: Mapping[str, str] | None = None, os: str = "linux", arch: str = "amd64"
) -> dict[str, str]:
    """The labels a kubelet puts on its own Node, plus `extra` (Magnum's, the cloud's)."""
    return {
        "beta.kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": os,
        "kubernetes.io/arch": arch,
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": os,
        **(extra or {}),
    }


def kubelet_status(
    name: str,
    *,
    at: Moment,
    internal_ip: str = "",
    kubelet_version: str = DEFAULT_KUBELET_VERSION,
    ready: bool = True,
    cpu: int = 4,
    memory_kib: int = 8_148_204,
) -> dict[str, Any]:
    """A registered kubelet's status: capacity, the four kubelet conditions since `at`,
    addresses (InternalIP and Hostname), the kubelet port and nodeInfo."""
    # Stable per name, so a restarted demo shows the same machine ids.
    digest = hashlib.sha256(name.encode()).hexdigest()
    capacity = {
        "cpu": str(cpu),
        "ephemeral-storage": "20134592Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": f"{memory_kib}Ki",
        "pods": "110",
    }
    addresses = [{"type": "InternalIP", "address": internal_ip}] if internal_ip else []
    addresses.append({"type": "Hostname", "address": name})
    # The kubelet reserves a little CPU and memory for the system.
    allocatable = {**capacity, "cpu": f"{cpu * 1000 - 100}m", "memory": f"{memory_kib - 262144}Ki"}
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": kubelet_conditions(at, ready=ready),
        "addresses": addresses,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
        "nodeInfo": {
            "machineID": digest[:32],
            "systemUUID": str(uuid.UUID(digest[32:64])),
            "bootID": str(uuid.UUID(digest[:32])),
            "kernelVersion": "5.15.0-113-generic",
            "osImage": "Ubuntu 22.04.4 LTS",
            "containerRuntimeVersion": "containerd://1.6.31",
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": kubelet_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


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
