"""What a kubelet writes on its Node: its labels, the status it registers, its conditions.

Shared by the store's node helpers, the node scenarios and the bulk node traffic, so every
fake Node looks like the one a 1.24 kubelet registers.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from fakes.kube.node_schema import format_node_time

Moment = str | datetime | float
DEFAULT_KUBELET_VERSION = "v1.24.17"
KUBELET_PORT = 10250

# The conditions a kubelet posts itself, with their healthy status, reason and message.
KUBELET_CONDITIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
NOT_READY_REASON = "KubeletNotReady"
NOT_READY_MESSAGE = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
    "message:Network plugin returns error: cni plugin not initialized"
)
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def kubelet_conditions(at: Moment, *, ready: bool = True) -> list[dict[str, Any]]:
    """The four conditions of a freshly registered kubelet, all since `at`."""
    stamp = format_node_time(at)
    conditions = []
    for kind, status, reason, message in KUBELET_CONDITIONS:
        if kind == "Ready" and not ready:
            status, reason, message = "False", NOT_READY_REASON, NOT_READY_MESSAGE
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
                "reason": reason,
                "message": message,
            }
        )
    return conditions


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
