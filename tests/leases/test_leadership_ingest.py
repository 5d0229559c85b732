"""Who really leads, as the ingest stores it: bounded annotations, the library, leader-k8s's
identity, token and foreign writers, slot groups and natural name keys; on both upsert paths
and through the renewal fast path. Then a leader-k8s election written with the official
client to the fake API server and followed by the real watcher over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from fakes.kube import FakeApiServer
from leases.ingest import LeaseIngestor
from leases.leader_k8s import MAX_ANNOTATION_KEY, MAX_ANNOTATION_VALUE, MAX_ANNOTATIONS
from leases.models import KubeCluster, Lease, LeaseHolderSpan, LeaseLibrary, LeaseTransition
from tests.leases.test_watcher import RunningWatcher, eventually, register

MANAGED_BY = {"leader.bluetape4k.io/managed-by": "bluetape4k-leader-k8s"}
TOKEN_A, TOKEN_B = "b4k-" + "A" * 22, "b4k-" + "B" * 22


def annotated(
    holder: str | None,
    annotations: dict[str, Any],
    *,
    name: str = "billing",
    namespace: str = "operators",
    renew: str = "2026-11-29T07:00:00.000000Z",
    version: int = 1,
    transitions: int = 0,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "resourceVersion": str(version),
            "annotations": annotations,
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": renew,
            "leaseTransitions": transitions,
            **spec,
        },
    }


def leader_k8s(node: str, audit: str = "", **annotations: str) -> dict[str, str]:
    return {
        **MANAGED_BY,
        "leader.bluetape4k.io/node-id": node,
        "leader.bluetape4k.io/audit-leader-id": audit or node,
        **annotations,
    }


def stored(*objects: dict[str, Any], cluster: KubeCluster) -> LeaseIngestor:
    ingestor = LeaseIngestor(cluster.id)
    for obj in objects:
        ingestor.observe(obj)
    ingestor.flush()
    return ingestor


@pytest.fixture
def cluster(db: None) -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


# --- annotations -------------------------------------------------------------------------


@pytest.mark.django_db
def test_annotations_beyond_the_limit_and_non_string_values_are_dropped_and_counted(
    cluster: KubeCluster,
) -> None:
    annotations: dict[str, Any] = {f"example.com/a-{i:03d}": "v" for i in range(70)}
    annotations |= {"example.com/number": 5, "example.com/list": ["x"], "example.com/none": None}
    stored(annotated("pod-a", annotations), cluster=cluster)
    lease = Lease.objects.get()
    assert len(lease.annotations) == MAX_ANNOTATIONS
    assert sorted(lease.annotations)[-1] == f"example.com/a-{MAX_ANNOTATIONS - 1:03d}"
    assert set(lease.annotations.values()) == {"v"}
    assert lease.annotations_cut == 70 - MAX_ANNOTATIONS + 3


@pytest.mark.django_db
def test_long_annotation_keys_and_values_are_cut_and_counted(cluster: KubeCluster) -> None:
    long_key = "example.com/" + "k" * 400
    stored(annotated("pod-a", {long_key: "v", "example.com/long": "x" * 5000}), cluster=cluster)
    lease = Lease.objects.get()
    assert lease.annotations == {
        "example.com/long": "x" * MAX_ANNOTATION_VALUE,
        long_key[:MAX_ANNOTATION_KEY]: "v",
    }
    assert lease.annotations_cut == 2


@pytest.mark.django_db
def test_annotations_that_are_no_object_store_nothing(cluster: KubeCluster) -> None:
    stored(annotated("pod-a", ["not", "a", "map"]), cluster=cluster)  # type: ignore[arg-type]
    lease = Lease.objects.get()
    assert (lease.annotations, lease.annotations_cut, lease.library) == ({}, 0, "plain")


@pytest.mark.django_db
def test_annotations_with_nul_characters_are_stored_without_them(cluster: KubeCluster) -> None:
    stored(
        annotated("pod-a", {"example.com/x": "a\x00b", **leader_k8s("no\x00de")}), cluster=cluster
    )
    lease = Lease.objects.get()
    assert lease.annotations["example.com/x"] == "ab"
    assert lease.library == LeaseLibrary.LEADER_K8S


# --- libraries, identities, tokens -------------------------------------------------------


@pytest.mark.django_db
def test_leader_k8s_stores_node_and_audit_ids_as_identity_and_the_token_beside_them(
    cluster: KubeCluster,
) -> None:
    stored(annotated(TOKEN_A, leader_k8s("pod-0", "billing-leader")), cluster=cluster)
    lease = Lease.objects.get()
    assert lease.library == LeaseLibrary.LEADER_K8S
    assert (lease.holder, lease.identity, lease.token) == (
        TOKEN_A,
        "pod-0 / billing-leader",
        TOKEN_A,
    )
    assert not lease.foreign_writer


@pytest.mark.django_db
def test_a_leader_k8s_lease_whose_holder_is_no_token_is_a_foreign_writer(
    cluster: KubeCluster,
) -> None:
    stored(annotated("kubectl-edit", leader_k8s("pod-0")), cluster=cluster)
    lease = Lease.objects.get()
    assert (lease.token, lease.foreign_writer) == ("", True)


@pytest.mark.django_db
def test_a_released_leader_k8s_lease_has_no_identity_and_no_foreign_writer(
    cluster: KubeCluster,
) -> None:
    stored(annotated(None, leader_k8s("pod-0")), cluster=cluster)
    lease = Lease.objects.get()
    assert (lease.identity, lease.token, lease.foreign_writer) == ("", "", False)


@pytest.mark.django_db
def test_coordinated_and_plain_leases_are_told_apart(cluster: KubeCluster) -> None:
    stored(
        annotated("master-0", {}, name="kube-scheduler", strategy="OldestEmulationVersion"),
        annotated("pod-a", {}, name="plain"),
        cluster=cluster,
    )
    assert dict(Lease.objects.values_list("name", "library")) == {
        "kube-scheduler": LeaseLibrary.COORDINATED,
        "plain": LeaseLibrary.PLAIN,
    }
    assert set(Lease.objects.values_list("identity", flat=True)) == {"master-0", "pod-a"}


# --- slot groups and names ---------------------------------------------------------------


@pytest.mark.django_db
def test_slot_groups_are_parsed_from_the_right_and_only_for_leader_k8s(
    cluster: KubeCluster,
) -> None:
    stored(
        annotated(TOKEN_A, leader_k8s("pod-0"), name="jobs-slot-0"),
        annotated(TOKEN_B, leader_k8s("pod-1"), name="jobs-slot-1"),
        annotated(None, leader_k8s("pod-2"), name="a-slot-1-slot-12"),
        annotated(TOKEN_A, leader_k8s("pod-3"), name="jobs-slot-01"),
        annotated(TOKEN_A, leader_k8s("pod-4"), name="-slot-3"),
        annotated("pod-x", {}, name="plain-slot-0"),
        cluster=cluster,
    )
    groups = {
        name: (group, slot)
        for name, group, slot in Lease.objects.values_list("name", "group_name", "group_slot")
    }
    assert groups == {
        "jobs-slot-0": ("jobs", 0),
        "jobs-slot-1": ("jobs", 1),
        "a-slot-1-slot-12": ("a-slot-1", 12),
        "jobs-slot-01": ("", None),
        "-slot-3": ("", None),
        "plain-slot-0": ("", None),
    }


@pytest.mark.django_db
def test_names_sort_naturally_by_their_key(cluster: KubeCluster) -> None:
    names = ["worker-10", "worker-2", "worker-1", "worker-010a", "worker-9b"]
    stored(*(annotated("x", {}, name=name) for name in names), cluster=cluster)
    assert list(Lease.objects.order_by("name_key").values_list("name", flat=True)) == [
        "worker-1",
        "worker-2",
        "worker-9b",
        "worker-10",
        "worker-010a",
    ]


# --- renewals and identity changes -------------------------------------------------------


@pytest.mark.django_db
def test_a_renewal_keeps_the_leadership_columns_and_an_annotation_change_is_written_in_full(
    cluster: KubeCluster,
) -> None:
    ingestor = stored(annotated(TOKEN_A, leader_k8s("pod-0")), cluster=cluster)
    ingestor.observe(
        annotated(TOKEN_A, leader_k8s("pod-0"), renew="2026-11-29T07:00:05.000000Z", version=2)
    )
    renewal = ingestor.flush()
    lease = Lease.objects.get()
    assert renewal.leases_renewed == 1
    assert (lease.identity, lease.token, lease.library) == ("pod-0", TOKEN_A, "leader_k8s")
    # Same holder, new node id (and audit id): no renewal, the row is written in full.
    ingestor.observe(annotated(TOKEN_A, leader_k8s("pod-9"), version=3))
    change = ingestor.flush()
    assert (change.leases_written, change.leases_renewed) == (1, 0)
    assert Lease.objects.get().identity == "pod-9"
    # The next transition starts from the identity the lease showed last.
    ingestor.observe(annotated(TOKEN_B, leader_k8s("pod-1"), version=4, transitions=1))
    ingestor.flush()
    transition = LeaseTransition.objects.get()
    assert (transition.from_identity, transition.to_identity) == ("pod-9", "pod-1")


@pytest.mark.django_db
def test_a_restarted_ingestor_knows_the_identity_of_the_holder(cluster: KubeCluster) -> None:
    stored(annotated(TOKEN_A, leader_k8s("pod-0")), cluster=cluster)
    stored(annotated(TOKEN_B, leader_k8s("pod-1"), transitions=1), cluster=cluster)
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.from_identity) == (TOKEN_A, "pod-0")
    assert (transition.to_holder, transition.to_identity) == (TOKEN_B, "pod-1")


@pytest.mark.django_db
def test_plain_transitions_carry_the_holders_as_identities(cluster: KubeCluster) -> None:
    long_holder = "h" * 400
    ingestor = stored(annotated("pod-a", {}), cluster=cluster)
    ingestor.observe(annotated(long_holder, {}, transitions=1))
    ingestor.observe(annotated("pod-b", {}, transitions=2))
    ingestor.flush()
    assert list(
        LeaseTransition.objects.order_by("id").values_list("from_identity", "to_identity")
    ) == [("pod-a", "h" * 253), ("h" * 253, "pod-b")]


# --- over real HTTP ----------------------------------------------------------------------


def lease_body(holder: str | None, node: str, transitions: int, moment: datetime) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name="billing", namespace="operators", annotations=leader_k8s(node) if node else None
        ),
        spec=client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=15,
            acquire_time=moment,
            renew_time=moment,
            lease_transitions=transitions,
        ),
    )


@pytest.mark.django_db(transaction=True)
def test_a_leader_k8s_election_over_http_is_understood(
    apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], client.ApiClient]
) -> None:
    """Written as an elector would, through the official client: acquire with token A,
    take over with token B, release, then token A writes again (a stale holder)."""
    api = client.CoordinationV1Api(make_api_client(apiserver))
    start = datetime.now(UTC).replace(microsecond=0)
    api.create_namespaced_lease("operators", lease_body(TOKEN_A, "pod-0", 0, start))
    cluster = register(apiserver)

    def write(holder: str | None, node: str, transitions: int, seconds: int) -> None:
        current = api.read_namespaced_lease("billing", "operators")
        body = lease_body(holder, node, transitions, start + timedelta(seconds=seconds))
        body.metadata.resource_version = current.metadata.resource_version
        if not node:  # a release keeps the annotations of the last holder
            body.metadata.annotations = current.metadata.annotations
        api.replace_namespaced_lease("billing", "operators", body)

    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.filter(token=TOKEN_A).exists())
        write(TOKEN_B, "pod-1", 1, 5)
        eventually(lambda: LeaseTransition.objects.count() == 1)
        write(None, "", 1, 8)
        eventually(lambda: LeaseTransition.objects.count() == 2)
        write(TOKEN_A, "pod-0", 2, 30)
        eventually(lambda: LeaseTransition.objects.count() == 3)
    lease = Lease.objects.get()
    assert (lease.library, lease.identity, lease.token) == ("leader_k8s", "pod-0", TOKEN_A)
    assert lease.fencing_reused_at is not None
    assert list(
        LeaseTransition.objects.order_by("id").values_list(
            "from_identity", "to_identity", "fencing_reused"
        )
    ) == [("pod-0", "pod-1", False), ("pod-1", "", False), ("", "pod-0", True)]
    assert list(
        LeaseHolderSpan.objects.order_by("started_at").values_list(
            "identity", "started_at", "ended_at"
        )
    ) == [
        ("pod-0", start, start + timedelta(seconds=5)),
        ("pod-1", start + timedelta(seconds=5), start + timedelta(seconds=8)),
        ("pod-0", start + timedelta(seconds=30), None),
    ]


@pytest.mark.django_db
def test_a_change_in_the_first_batch_of_a_new_lease_knows_the_first_identity(
    cluster: KubeCluster,
) -> None:
    stored(
        annotated(TOKEN_A, leader_k8s("pod-0")),
        annotated(TOKEN_B, leader_k8s("pod-1"), transitions=1),
        cluster=cluster,
    )
    transition = LeaseTransition.objects.get()
    assert (transition.from_identity, transition.to_identity) == ("pod-0", "pod-1")
