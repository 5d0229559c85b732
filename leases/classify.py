"""Which kind of Lease is this? Classes drive filters, alert rules and metric cardinality."""

from __future__ import annotations

import re
from collections.abc import Mapping

from leases.models import LeaseClass

NODE_LEASE_NAMESPACE = "kube-node-lease"
CONTROL_PLANE_LEASES = frozenset(
    {"kube-controller-manager", "kube-scheduler", "cloud-controller-manager"}
)
# 1.26 and later: `apiserver-<hash>`, labelled apiserver.kubernetes.io/identity.
APISERVER_IDENTITY_LABEL = "apiserver.kubernetes.io/identity"
# 1.24 and 1.25: `kube-apiserver-<uuid>`, labelled k8s.io/component=kube-apiserver (and no
# identity label), in kube-system; a leader-election lease never carries that label.
COMPONENT_LABEL = "k8s.io/component"
APISERVER_COMPONENT = "kube-apiserver"
_APISERVER_UUID_NAME = re.compile(
    r"kube-apiserver-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
)


def classify_lease(namespace: str, name: str, labels: Mapping[str, str]) -> LeaseClass:
    if namespace == NODE_LEASE_NAMESPACE:
        return LeaseClass.NODE_HEARTBEAT
    if APISERVER_IDENTITY_LABEL in labels:
        return LeaseClass.APISERVER_IDENTITY
    if namespace == "kube-system" and (
        name.startswith("apiserver-")
        or labels.get(COMPONENT_LABEL) == APISERVER_COMPONENT
        or _APISERVER_UUID_NAME.fullmatch(name) is not None
    ):
        return LeaseClass.APISERVER_IDENTITY
    if namespace == "kube-system" and name in CONTROL_PLANE_LEASES:
        return LeaseClass.CONTROL_PLANE
    return LeaseClass.LEADER_ELECTION
