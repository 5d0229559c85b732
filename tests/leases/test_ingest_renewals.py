"""The renewal fast path (lease_rows.renew_leases) leaves exactly the rows the full upsert
would: one long-lived ingestor (renewals written as renewals) is compared, flush by flush,
with a fresh ingestor per flush on a second cluster (nothing committed by it yet, so every
lease is written in full), over random sequences of renewals and real changes."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
import time_machine

from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease, LeaseTransition

pytestmark = pytest.mark.django_db

NAMES = ("node-a", "node-b", "leader", "odd")
COMPARED = [
    "namespace",
    "name",
    "uid",
    "lease_class",
    "holder",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "lease_transitions",
    "strategy",
    "preferred_holder",
    "labels",
    "resource_version",
    "created_at",
    "observed_at",
    "deleted_at",
]


def lease(name: str, version: int) -> dict[str, Any]:
    return {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {
            "namespace": "kube-node-lease" if name.startswith("node") else "kube-system",
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "creationTimestamp": "2026-11-29T06:00:00Z",
            "labels": {"app": name},
        },
        "spec": {
            "holderIdentity": f"{name}-holder",
            "leaseDurationSeconds": 40,
            "renewTime": "2026-11-29T07:00:00.000000Z",
            "leaseTransitions": 0,
        },
    }


def mutate(rng: random.Random, obj: dict[str, Any], version: int) -> dict[str, Any]:
    """The next object of a lease: mostly a renewal, sometimes a change of another kind."""
    obj = copy.deepcopy(obj)
    metadata, spec = obj["metadata"], obj["spec"]
    metadata["resourceVersion"] = str(version)
    second = version % 60
    spec["renewTime"] = f"2026-11-29T07:01:{second:02d}.{version:06d}Z"
    roll = rng.random()
    if roll < 0.55:
        pass  # a renewal, nothing else
    elif roll < 0.62:
        spec["holderIdentity"] = rng.choice(["pod-a", "pod-b", "", "pod\x00nul"])
        spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + rng.choice([1, 2])
    elif roll < 0.67:
        metadata["labels"] = {"app": rng.choice(["x", "y", "z\x00"])}
    elif roll < 0.71:
        spec["leaseDurationSeconds"] = rng.choice([15, 40, True, -1, 10**12])
    elif roll < 0.76:
        # A real apiserver moves managedFields at every renewal: not stored, still fast.
        metadata["managedFields"] = [{"manager": "kubelet", "time": f"t{version}"}]
    elif roll < 0.80:
        spec["renewTime"] = rng.choice(
            [None, "garbage", "9999-12-31T23:59:59.000000Z", "x" * 80, "2026\x00", 12]
        )
    elif roll < 0.83:
        metadata["resourceVersion"] = rng.choice(["9" * 70, "7\x00", 5])
    elif roll < 0.86:
        obj.pop("kind", None)  # as a list returns items
        obj.pop("apiVersion", None)
    elif roll < 0.88:
        spec["acquireTime"] = f"2026-11-29T07:00:{second:02d}.000000Z"
    elif roll < 0.90:
        obj["spec"] = {"renewTime": spec.get("renewTime")}
    else:
        spec["preferredHolder"] = rng.choice(["", "pod-b"])
    return obj


def rows(cluster_id: int) -> list[tuple[Any, ...]]:
    return list(
        Lease.objects.filter(cluster_id=cluster_id)
        .order_by("namespace", "name")
        .values_list(*COMPARED)
    )


def transitions(cluster_id: int) -> list[tuple[Any, ...]]:
    return list(
        LeaseTransition.objects.filter(lease__cluster_id=cluster_id)
        .order_by("lease__name", "id")
        .values_list(
            "lease__name",
            "from_holder",
            "to_holder",
            "observed_at",
            "acquire_time",
            "lease_transitions",
            "missed",
        )
    )


@pytest.mark.parametrize("seed", range(6))
def test_renewals_leave_the_rows_a_full_write_leaves(seed: int) -> None:
    rng = random.Random(seed)
    fast_cluster = KubeCluster.objects.create(name=f"fast-{seed}", kubeconfig="x")
    full_cluster = KubeCluster.objects.create(name=f"full-{seed}", kubeconfig="x")
    fast = LeaseIngestor(fast_cluster.id)
    current = {name: lease(name, index + 1) for index, name in enumerate(NAMES)}
    version = 100
    renewed = 0
    with time_machine.travel("2026-11-29T07:05:00Z", tick=False) as clock:
        for step in range(40):
            events: list[tuple[str, dict[str, Any] | None]] = []
            for name in rng.sample(NAMES, rng.randint(1, len(NAMES))):
                version += 1
                if rng.random() < 0.04:
                    events.append((name, None))  # deleted (it comes back later)
                else:
                    current[name] = mutate(rng, current[name], version)
                    events.append((name, current[name]))
            full = LeaseIngestor(full_cluster.id)  # a fresh one writes every lease in full
            for ingestor in (fast, full):
                for name, obj in events:
                    if obj is None:
                        namespace = current[name]["metadata"]["namespace"]
                        ingestor.observe_deleted((namespace, name))
                    else:
                        ingestor.observe(copy.deepcopy(obj))
            fast_result, full_result = fast.flush(), full.flush()
            assert full_result.leases_renewed == 0
            renewed += fast_result.leases_renewed
            for field in ("leases_written", "objects_cleaned", "transitions_written"):
                assert getattr(fast_result, field) == getattr(full_result, field), (step, field)
            assert rows(fast_cluster.id) == rows(full_cluster.id), step
            assert transitions(fast_cluster.id) == transitions(full_cluster.id), step
            clock.shift(1)
    assert renewed > 20  # the fast path was taken, not only the full one


def test_a_renewal_of_a_row_removed_behind_the_ingestor_writes_it_in_full() -> None:
    cluster = KubeCluster.objects.create(name="gone", kubeconfig="x")
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("node-a", 1))
    ingestor.flush()
    Lease.objects.filter(cluster=cluster).delete()
    renewal = lease("node-a", 2)
    renewal["spec"]["renewTime"] = "2026-11-29T07:00:10.000000Z"
    ingestor.observe(renewal)
    result = ingestor.flush()
    assert (result.leases_written, result.leases_renewed) == (1, 0)
    row = Lease.objects.get(cluster=cluster)
    assert row.resource_version == "2"
    assert row.renew_time is not None and row.renew_time.second == 10


def test_a_renewal_of_a_committed_row_moves_renew_time_and_version_in_place() -> None:
    cluster = KubeCluster.objects.create(name="retry", kubeconfig="x")
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("node-a", 1))
    first = ingestor.flush()
    assert (first.leases_written, first.leases_renewed) == (1, 0)
    renewal = lease("node-a", 2)
    renewal["spec"]["renewTime"] = "2026-11-29T07:00:10.000000Z"
    ingestor.observe(renewal)
    second = ingestor.flush()
    assert (second.leases_written, second.leases_renewed) == (1, 1)
    row = Lease.objects.get(cluster=cluster)
    assert row.resource_version == "2"
    assert row.renew_time is not None and row.renew_time.second == 10


def test_the_first_watch_event_after_a_list_is_a_renewal() -> None:
    """A list's items come without kind and apiVersion (the real API server's, and the
    fake's: list_all.json); a watch's objects with them. The row is the same either way,
    so the next renewal of a listed lease is written as a renewal, not in full."""
    cluster = KubeCluster.objects.create(name="relisted", kubeconfig="x")
    ingestor = LeaseIngestor(cluster.id)
    listed = lease("node-a", 1)
    del listed["kind"], listed["apiVersion"]
    ingestor.observe(listed)
    assert ingestor.flush().leases_renewed == 0
    renewal = lease("node-a", 2)
    renewal["spec"]["renewTime"] = "2026-11-29T07:00:10.000000Z"
    ingestor.observe(renewal)
    result = ingestor.flush()
    assert (result.leases_written, result.leases_renewed) == (1, 1)
    row = Lease.objects.get(cluster=cluster)
    assert row.resource_version == "2"
    assert row.renew_time is not None and row.renew_time.second == 10
