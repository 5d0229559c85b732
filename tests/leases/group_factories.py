"""leader-k8s slot leases for the group tests: fields as leases/leader_k8s.py reads them."""

from __future__ import annotations

from typing import Any

from leases.leader_k8s import (
    AUDIT_ID_ANNOTATION,
    MANAGED_BY_ANNOTATION,
    MANAGED_BY_VALUE,
    NODE_ID_ANNOTATION,
    leadership,
)
from leases.models import KubeCluster, Lease, LeaseClass
from tests.leases.factories import make_lease

_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def token(seed: int) -> str:
    """A leader-k8s fencing token (`b4k-` + 22 Base58 characters), one per seed."""
    digits = []
    for _ in range(22):
        seed, digit = divmod(seed * 7919 + 13, 58)
        digits.append(_BASE58[digit])
    return "b4k-" + "".join(digits)


def leader_k8s_annotations(node_id: str, audit_id: str = "") -> dict[str, str]:
    annotations = {MANAGED_BY_ANNOTATION: MANAGED_BY_VALUE, NODE_ID_ANNOTATION: node_id}
    if audit_id:
        annotations[AUDIT_ID_ANNOTATION] = audit_id
    return annotations


def make_leader_k8s_lease(
    cluster: KubeCluster,
    name: str,
    *,
    holder: str,
    node_id: str = "",
    namespace: str = "apps",
    managed: bool = True,
    **fields: Any,
) -> Lease:
    """A lease as the watcher stores it once leases/leader_k8s.py has read it."""
    annotations = leader_k8s_annotations(node_id) if managed else {}
    found = leadership(name, holder, annotations)
    values: dict[str, Any] = {
        "lease_class": LeaseClass.LEADER_ELECTION,
        "annotations": annotations,
        "library": found.library,
        "identity": found.identity,
        "token": found.token,
        "foreign_writer": found.foreign_writer,
        "group_name": found.group_name,
        "group_slot": found.group_slot,
    }
    values.update(fields)
    return make_lease(cluster, name, namespace=namespace, holder=holder, **values)


def make_slot(
    cluster: KubeCluster, group: str, slot: int, *, seed: int = 0, node_id: str = "", **fields: Any
) -> Lease:
    """Slot `slot` of `group`, held (unless `holder` or the times say otherwise) by a token."""
    fields.setdefault("holder", token(seed or slot + 1))
    return make_leader_k8s_lease(
        cluster, f"{group}-slot-{slot}", node_id=node_id or f"node-{slot}", **fields
    )
