"""Fencing token reuse (leases/fencing.py) as the ingestor records it: a leader-k8s token
that comes back after a different holder marks its transition and the lease. Each object
carries the uid and the growing resourceVersion a real API server gives it: the order a
reuse is judged by (tests/leases/test_history_truth.py has the objects out of order)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine

from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease, LeaseTransition

pytestmark = pytest.mark.django_db

MOMENT = datetime(2026, 11, 29, 7, 0, 0, tzinfo=UTC)


def token(letter: str) -> str:
    return "b4k-" + letter * 22


A, B, C = token("A"), token("B"), token("C")


def leader_k8s(
    holder: str | None, node: str = "", transitions: int = 0, version: int = 1
) -> dict[str, Any]:
    annotations = {"leader.bluetape4k.io/managed-by": "bluetape4k-leader-k8s"}
    if node:
        annotations["leader.bluetape4k.io/node-id"] = node
        annotations["leader.bluetape4k.io/audit-leader-id"] = node
    return {
        "metadata": {
            "namespace": "operators",
            "name": "billing",
            "uid": "uid-billing",
            "resourceVersion": str(version),
            "annotations": annotations,
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": "2026-11-29T07:00:00.000000Z",
            "leaseTransitions": transitions,
        },
    }


def marks() -> list[tuple[str, bool]]:
    return list(LeaseTransition.objects.order_by("id").values_list("to_holder", "fencing_reused"))


@pytest.fixture
def cluster() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


def run(cluster: KubeCluster, holders: list[str], *, flush_each: bool = True) -> LeaseIngestor:
    ingestor = LeaseIngestor(cluster.id)
    for count, holder in enumerate(holders):
        ingestor.observe(
            leader_k8s(holder, node=f"node-{holder[-1:]}", transitions=count, version=count + 1)
        )
        if flush_each:
            ingestor.flush()
    ingestor.flush()
    return ingestor


def test_a_token_back_after_another_holder_is_marked(cluster: KubeCluster) -> None:
    with time_machine.travel(MOMENT, tick=False):
        run(cluster, [A, B, A])
    assert marks() == [(B, False), (A, True)]
    assert Lease.objects.get().fencing_reused_at == MOMENT


def test_a_new_token_each_time_is_not_marked(cluster: KubeCluster) -> None:
    run(cluster, [A, B, C])
    assert marks() == [(B, False), (C, False)]
    assert Lease.objects.get().fencing_reused_at is None


def test_a_token_back_after_a_release_only_is_not_marked(cluster: KubeCluster) -> None:
    run(cluster, [A, "", A])
    assert marks() == [("", False), (A, False)]


def test_a_token_back_after_a_release_by_another_holder_is_marked(cluster: KubeCluster) -> None:
    run(cluster, [A, B, "", A])
    assert marks() == [(B, False), ("", False), (A, True)]


def test_reuse_inside_one_coalesced_batch_is_marked(cluster: KubeCluster) -> None:
    run(cluster, [A, B, "", A], flush_each=False)
    assert marks() == [(B, False), ("", False), (A, True)]


def test_reuse_is_found_by_a_restarted_ingestor(cluster: KubeCluster) -> None:
    run(cluster, [A, B, ""])
    second = LeaseIngestor(cluster.id)
    second.observe(leader_k8s(A, node="node-A", transitions=3, version=4))
    second.flush()
    assert marks()[-1] == (A, True)


def test_plain_leases_are_never_marked(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    for count, holder in enumerate(["pod-a", "pod-b", "pod-a"]):
        obj = leader_k8s(holder, transitions=count, version=count + 1)
        obj["metadata"]["annotations"] = {}
        ingestor.observe(obj)
        ingestor.flush()
    assert [reused for _, reused in marks()] == [False, False]


def test_transitions_carry_the_identities_of_both_holders(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(leader_k8s(A, node="pod-0"))
    ingestor.flush()
    ingestor.observe(leader_k8s(B, node="pod-1", transitions=1))
    ingestor.observe(leader_k8s(None, transitions=1))
    ingestor.observe(leader_k8s(C, node="pod-2", transitions=2))
    ingestor.flush()
    assert list(
        LeaseTransition.objects.order_by("id").values_list("from_identity", "to_identity")
    ) == [("pod-0", "pod-1"), ("pod-1", ""), ("", "pod-2")]
