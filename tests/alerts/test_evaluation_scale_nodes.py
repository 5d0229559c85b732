"""The Node side of one evaluation reads what can be in trouble, not every Node (issue 22):
``nodegroup_mismatch`` counts a nodegroup's members in SQL and reads only the members whose
heartbeat Lease is due, so its queries, and on PostgreSQL the lease rows the database reads,
are the same for a nodegroup of a few healthy Nodes as for one of hundreds."""

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
from tests.nks.nodes import make_node, watched_cluster

pytestmark = pytest.mark.django_db

SILENT = "prod-pool-a-silent"


@pytest.fixture(autouse=True)
def own_evaluation_lock(settings: Any) -> None:
    # Evaluations take one lock in caches["locks"]; in a shared Redis a parallel test
    # worker's evaluation would hold it and this one would skip its run.
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"test-nodes-{uuid.uuid4().hex}"},
    }


def add_members(kube: KubeCluster, nodegroup: NksNodegroup, first: int, count: int) -> None:
    """Healthy Ready members with renewing heartbeats; NKS counts them too (no disagreement
    but the silent node's)."""
    for index in range(first, first + count):
        make_node(kube, f"prod-pool-a-{index:04d}", nodegroup="pool-a")
    total = Node.objects.present().filter(cluster=kube, nodegroup_label="pool-a").count()
    NksNodegroup.objects.filter(pk=nodegroup.pk).update(node_count=total, ready=total)


def measured(cluster: NksCluster, kube: KubeCluster) -> Cost:
    poll(cluster)
    keep_fresh(kube)
    return one_evaluation(kube)


def mismatch_items() -> list[str]:
    incident = Incident.objects.get(rule=Rule.NODEGROUP_MISMATCH)
    return list(incident.details["items"])


def test_nodegroup_mismatch_costs_the_same_for_few_or_many_healthy_nodes(
    clock: Clock, settings: Any
) -> None:
    settings.NKS_POLL_SECONDS = 30
    cluster = make_nks_cluster(make_account(), "prod")
    nodegroup = make_nodegroup(cluster, "pool-a", node_count=0, ready=0, not_ready=0)
    kube = watched_cluster("prod")
    # NKS counts every node ready; this one's kubelet went silent two minutes ago.
    make_node(kube, SILENT, nodegroup="pool-a", lease_renewed_ago=120)
    # Some dozens to start with: a table of five rows gets other plans than one of hundreds
    # (next_lease_due then scans it whole), which is no growth.
    add_members(kube, nodegroup, 0, 30)
    measured(cluster, kube)  # opens the incident: the steady state is measured
    small = measured(cluster, kube)
    small_items = mismatch_items()

    add_members(kube, nodegroup, 30, 300)
    large = measured(cluster, kube)

    assert large.queries == small.queries
    assert large.lease_rows == small.lease_rows
    assert mismatch_items() == small_items
    assert small_items == [
        f"NKS counts node {SILENT} ready; its heartbeat Lease expired at "
        f"{kube.leases.get(name=SILENT).expires_at.isoformat().replace('+00:00', 'Z')}."
    ]


def test_counts_still_say_how_many_members_nks_misses(clock: Clock, settings: Any) -> None:
    settings.NKS_POLL_SECONDS = 30
    cluster = make_nks_cluster(make_account(), "prod")
    nodegroup = make_nodegroup(cluster, "pool-a")
    kube = watched_cluster("prod")
    add_members(kube, nodegroup, 0, 250)
    make_node(kube, "prod-pool-a-not-ready", nodegroup="pool-a", ready="False")
    make_node(kube, "elsewhere-0", nodegroup="pool-b")
    make_node(kube, "unlabelled-0", nodegroup=None)
    gone = make_node(kube, "prod-pool-a-gone", nodegroup="pool-a")
    Node.objects.filter(pk=gone.pk).update(deleted_at=clock.now())

    measured(cluster, kube)

    assert mismatch_items() == [
        "NKS says 250 nodes in pool-a; the cluster has 251 Node objects labelled with it.",
        "NKS counts 250:0 ready:not ready in pool-a; the cluster's Nodes say 250:1.",
    ]


def not_ready_items() -> list[str]:
    incident = Incident.objects.get(rule=Rule.NODEGROUP_NOT_READY)
    return list(incident.details["items"])


def test_nodegroup_not_ready_names_the_clusters_not_ready_members_at_any_size(
    clock: Clock, settings: Any
) -> None:
    cluster = make_nks_cluster(make_account(), "prod")
    nodegroup = make_nodegroup(
        cluster, "pool-a", ready=30, not_ready=2, node_status="NOT_READY_NODE_EXIST"
    )
    kube = watched_cluster("prod")
    make_node(kube, "prod-pool-a-bad-1", nodegroup="pool-a", ready="False")
    make_node(kube, "prod-pool-a-bad-0", nodegroup="pool-a", ready="Unknown")
    make_node(kube, "prod-pool-b-bad", nodegroup="pool-b", ready="False")
    add_members(kube, nodegroup, 0, 30)
    NksNodegroup.objects.filter(pk=nodegroup.pk).update(ready=30, not_ready=2)
    measured(cluster, kube)
    small = measured(cluster, kube)
    assert not_ready_items() == ["prod-pool-a-bad-0", "prod-pool-a-bad-1"]

    add_members(kube, nodegroup, 30, 300)
    NksNodegroup.objects.filter(pk=nodegroup.pk).update(ready=330, not_ready=2)
    large = measured(cluster, kube)

    assert (large.queries, large.lease_rows) == (small.queries, small.lease_rows)
    assert not_ready_items() == ["prod-pool-a-bad-0", "prod-pool-a-bad-1"]
