"""Which kind of Lease is this? Classes drive filters, alert rules and metric cardinality."""

from __future__ import annotations

from collections.abc import Mapping

from leases.models import LeaseClass

NODE_LEASE_NAMESPACE = "kube-node-lease"
CONTROL_PLANE_LEASES = frozenset(
    {"kube-controller-manager", "kube-scheduler", "cloud-controller-manager"}
)
APISERVER_IDENTITY_LABEL = "apiserver.kubernetes.io/identity"


def classify_lease(namespace: str, name: str, labels: Mapping[str, str]) -> LeaseClass:
    if namespace == NODE_LEASE_NAMESPACE:
        return LeaseClass.NODE_HEARTBEAT
    if APISERVER_IDENTITY_LABEL in labels or (
        namespace == "kube-system" and name.startswith("apiserver-")
    ):
        return LeaseClass.APISERVER_IDENTITY
    if namespace == "kube-system" and name in CONTROL_PLANE_LEASES:
        return LeaseClass.CONTROL_PLANE
    return LeaseClass.LEADER_ELECTION
