"""One evaluation of a fleet-shaped cluster reads what can be in trouble, not its healthy
leases (issue 22): node heartbeats with their Nodes in an NKS nodegroup, elections that
changed hands once lately (a handover, not flapping), and leader-k8s slot groups whose slots
renew on time. Its queries, and on PostgreSQL the lease rows the database reads (with
statistics and sequential scans off, as at 100,000 leases), are the same with few or many of
them; the troubles are still found."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from alerts.models import Incident, Rule
from leases.models import KubeCluster, Node
from nks.models import NksCluster, NksNodegroup
from tests.alerts.conftest import Clock, keep_fresh
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, poll
from tests.alerts.test_evaluation_scale import Cost, one_evaluation
from tests.leases.factories import make_lease, make_transition
from tests.leases.group_factories import make_slot
from tests.nks.nodes import make_node, watched_cluster

pytestmark = pytest.mark.django_db

# A zone's worth of silent nodes: as many expiry-schedule rows come due as in a fleet, so
# the plans that read them are the plans of a fleet.
SILENT = 60


@pytest.fixture(autouse=True)
def own_evaluation_lock(settings: Any) -> None:
    # Evaluations take one lock in caches["locks"]; in a shared Redis a parallel test
    # worker's evaluation would hold it and this one would skip its run.
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"test-fleet-{uuid.uuid4().hex}"},
    }


def troubled(kube: KubeCluster) -> None:
    """One of each trouble: silent nodes, an expired leader, a flapping lease, a leader-k8s
    group with no slot held."""
    for index in range(SILENT):
        make_node(kube, f"prod-silent-{index:03d}", nodegroup="pool-a", lease_renewed_ago=120)
    make_lease(kube, "kube-scheduler", renewed_ago=60, duration=15)
    flapping = make_lease(kube, "billing-leader", namespace="apps", renewed_ago=1, duration=60)
    for step, seconds_ago in enumerate((200, 120, 40)):
        make_transition(
            flapping, f"pod-{step}", f"pod-{step + 1}", seconds_ago=seconds_ago, missed=0
        )
    make_slot(kube, "orders", 0, renewed_ago=300, duration=15)


def add_healthy(kube: KubeCluster, nodegroup: NksNodegroup, first: int, count: int) -> None:
    """`count` of each healthy shape: Ready members of pool-a with renewing heartbeats,
    elections handed over once a minute ago, leader-k8s groups of three held slots."""
    for index in range(first, first + count):
        make_node(kube, f"prod-pool-a-{index:04d}", nodegroup="pool-a")
        election = make_lease(
            kube, f"op-{index:04d}-leader", namespace="ops", renewed_ago=1, duration=60
        )
        make_transition(election, "pod-old", election.holder, seconds_ago=60)
        for slot in range(3):
            make_slot(
                kube, f"workers-{index:04d}", slot, namespace="jobs", renewed_ago=1, duration=60
            )
    total = Node.objects.present().filter(cluster=kube, nodegroup_label="pool-a").count()
    # NKS counts every member ready: the silent nodes are the one disagreement.
    NksNodegroup.objects.filter(pk=nodegroup.pk).update(node_count=total, ready=total)


def measured(cluster: NksCluster, kube: KubeCluster) -> Cost:
    poll(cluster)
    keep_fresh(kube)
    return one_evaluation(kube)


def open_keys() -> set[str]:
    return set(Incident.objects.filter(resolved_at=None).values_list("key", flat=True))


def test_a_fleet_clusters_evaluation_does_not_grow_with_its_healthy_leases(
    clock: Clock, settings: Any
) -> None:
    settings.NKS_POLL_SECONDS = 30
    cluster = make_nks_cluster(make_account(), "prod")
    nodegroup = make_nodegroup(cluster, "pool-a", node_count=0, ready=0, not_ready=0)
    kube = watched_cluster("prod")
    troubled(kube)
    # Some dozens to start with: a table of a few rows gets other plans than one of
    # hundreds, which is no growth.
    add_healthy(kube, nodegroup, 0, 10)
    measured(cluster, kube)  # opens the incidents: the steady state is measured
    clock.advance(1)
    small = measured(cluster, kube)
    small_open = open_keys()

    add_healthy(kube, nodegroup, 10, 120)
    clock.advance(1)
    large = measured(cluster, kube)

    assert large.queries == small.queries
    # Not more with 120 more healthy leases of each shape. With the few rows of the small
    # case the planner may take an index range (lease_live_class) instead of the ids and read
    # a little more; at scale it reads by id.
    if small.lease_rows is not None:  # counted by PostgreSQL only
        assert large.lease_rows is not None and large.lease_rows <= small.lease_rows
    assert open_keys() == small_open
    assert {key.split(":")[0] for key in small_open} == {
        Rule.NODE_HEARTBEATS_EXPIRED,
        Rule.LEASE_EXPIRED,
        Rule.LEASE_FLAPPING,
        Rule.LEADER_GROUP_UNSTAFFED,
        Rule.NODEGROUP_MISMATCH,
    }
    heartbeats = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED, resolved_at=None)
    assert heartbeats.details["items_total"] == SILENT
