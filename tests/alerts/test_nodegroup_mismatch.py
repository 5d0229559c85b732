"""nodegroup_mismatch: NKS's counts against the cluster's own Nodes and heartbeat Leases.

The clock is frozen at NOW and moves one NKS poll (30 s) at a time; each tick is a successful
NKS poll, a live watcher (fresh, its Node watch watching) and kubelets renewing their Leases.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from alerts.evaluation import EvaluationSummary
from alerts.models import Incident, IncidentState, Rule
from leases.models import KubeCluster, Lease, Node, ResourceWatchState
from nks.models import NksAccount, NksCluster, NksNodegroup
from tests.alerts.conftest import Clock, evaluate
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, poll
from tests.nks.nodes import heartbeat, make_node, watched_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_evaluation_lock(settings: Any) -> None:
    # Evaluations take one lock in caches["locks"]; in a shared Redis a parallel test
    # worker's evaluation would hold it and this one would skip its run.
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"test-mismatch-{uuid.uuid4().hex}"},
    }


KEY = "nodegroup_mismatch:kr1/prod/pool-a"
INSTANCES = [f"3f1c2b7e-0000-4000-8000-00000000000{index}" for index in range(4)]


@pytest.fixture
def prod(clock: Clock, settings: Any) -> tuple[NksCluster, KubeCluster]:
    """NKS cluster prod (nodegroup pool-a: 3 nodes, 3:0 ready) watched as Lease source prod."""
    settings.NKS_POLL_SECONDS = 30
    cluster = make_nks_cluster(make_account(), "prod")
    make_nodegroup(cluster, "pool-a", node_count=3, ready=3, not_ready=0)
    kube = watched_cluster("prod")
    return cluster, kube


def tick(
    cluster: NksCluster, kube: KubeCluster, clock: Clock, *, silent: tuple[str, ...] = ()
) -> EvaluationSummary:
    """One NKS poll later: NKS polled, the watcher wrote, every kubelet renewed but `silent`."""
    clock.advance(30)
    poll(cluster)
    for name in Node.objects.present().filter(cluster=kube).values_list("name", flat=True):
        if name not in silent:
            heartbeat(kube, name)
    return evaluate(kube)


def incident() -> Incident | None:
    return Incident.objects.filter(rule=Rule.NODEGROUP_MISMATCH).order_by("-pk").first()


def test_a_missing_node_opens_after_three_polls_and_resolves_when_it_joins(
    prod: tuple[NksCluster, KubeCluster], clock: Clock
) -> None:
    cluster, kube = prod
    for index in range(2):
        make_node(kube, f"prod-pool-a-{index}", nodegroup="pool-a", instance=INSTANCES[index])
    evaluate(kube)
    for _ in range(2):
        tick(cluster, kube, clock)
        found = incident()
        assert found is not None and found.state == IncidentState.PENDING, "not yet 3 polls"
    tick(cluster, kube, clock)
    found = incident()
    assert found is not None and found.state == IncidentState.FIRING
    assert found.key == KEY and found.cluster == "prod"
    assert found.title == "nodegroup pool-a: NKS and the cluster disagree"
    assert found.details["items"] == [
        "NKS says 3 nodes in pool-a; the cluster has 2 Node objects labelled with it.",
        "NKS counts 3:0 ready:not ready in pool-a; the cluster's Nodes say 2:0.",
    ]

    make_node(kube, "prod-pool-a-2", nodegroup="pool-a", instance=INSTANCES[2])
    tick(cluster, kube, clock)
    found.refresh_from_db()
    assert found.state == IncidentState.RESOLVED
    assert found.resolution.startswith("NKS and the cluster's Nodes agree again")


def test_nks_counting_a_node_ready_whose_heartbeat_expired_is_a_disagreement(
    prod: tuple[NksCluster, KubeCluster], clock: Clock
) -> None:
    cluster, kube = prod
    for index in range(3):
        make_node(kube, f"prod-pool-a-{index}", nodegroup="pool-a", instance=INSTANCES[index])
    for _ in range(5):
        tick(cluster, kube, clock, silent=("prod-pool-a-1",))
    found = incident()
    assert found is not None and found.state == IncidentState.FIRING
    expired = Lease.objects.get(name="prod-pool-a-1").expires_at
    assert found.details["items"] == [
        "NKS counts node prod-pool-a-1 ready; its heartbeat Lease expired at "
        f"{expired.isoformat().replace('+00:00', 'Z')}."
    ]


def test_agreement_opens_nothing(prod: tuple[NksCluster, KubeCluster], clock: Clock) -> None:
    cluster, kube = prod
    for index in range(3):
        make_node(kube, f"prod-pool-a-{index}", nodegroup="pool-a", instance=INSTANCES[index])
    for _ in range(5):
        tick(cluster, kube, clock)
    assert incident() is None


@pytest.mark.parametrize(
    "go_stale",
    [
        pytest.param(
            lambda kube: KubeCluster.objects.filter(pk=kube.pk).update(
                nodes_watch=ResourceWatchState.FORBIDDEN
            ),
            id="node watch forbidden",
        ),
        pytest.param(
            lambda kube: NksAccount.objects.update(
                last_success_at=timezone.now() - timedelta(hours=1)
            ),
            id="NKS polls failing",
        ),
        pytest.param(
            lambda kube: NksNodegroup.objects.update(status="UPDATE_IN_PROGRESS"),
            id="NKS resizing the nodegroup",
        ),
    ],
)
def test_no_verdict_while_either_side_is_stale_or_nks_is_busy(
    prod: tuple[NksCluster, KubeCluster], clock: Clock, go_stale: Any
) -> None:
    cluster, kube = prod
    for index in range(2):
        make_node(kube, f"prod-pool-a-{index}", nodegroup="pool-a", instance=INSTANCES[index])
    for _ in range(4):
        tick(cluster, kube, clock)
    found = incident()
    assert found is not None and found.state == IncidentState.FIRING

    # The third node joins while the data cannot be judged: the incident is frozen, not
    # resolved (nothing can be said either way until both sides are current).
    make_node(kube, "prod-pool-a-2", nodegroup="pool-a", instance=INSTANCES[2])
    clock.advance(30)
    go_stale(kube)
    KubeCluster.objects.filter(pk=kube.pk).update(
        connected=True,
        last_flush_at=timezone.now(),
        last_event_at=timezone.now(),
        leases_as_of=timezone.now(),
        nodes_as_of=timezone.now(),
    )
    evaluate()
    found.refresh_from_db()
    assert found.state == IncidentState.FIRING


def test_an_unwatched_cluster_has_nothing_to_compare(clock: Clock, settings: Any) -> None:
    cluster = make_nks_cluster(make_account(), "prod")
    make_nodegroup(cluster, "pool-a", node_count=3, ready=3, not_ready=0)
    for _ in range(5):
        clock.advance(30)
        poll(cluster)
        evaluate()
    assert incident() is None
