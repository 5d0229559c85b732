"""One evaluation reads the leases that can be in trouble, not every lease (issue 22): its
queries, and on PostgreSQL the lease rows the database reads, are the same for 20 healthy
leases as for 400, and a mass expiry is judged whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from alerts import evaluation
from alerts.expiry_schedule import next_lease_due
from alerts.lease_rules import DUE_CHUNK
from alerts.models import Incident, Rule
from leases.models import KubeCluster, LeaderGroup, LeaseHolderSpan
from tests.alerts.conftest import Clock, evaluate, keep_fresh
from tests.leases.factories import NOW, make_cluster, make_lease, make_many_leases
from tests.leases.group_factories import make_slot
from tests.table_reads import rows_read

pytestmark = pytest.mark.django_db


@dataclass
class Cost:
    queries: int
    lease_rows: int | None  # None: not counted (SQLite)


def _lease_rows_read() -> int | None:
    """Rows of the lease table read so far in this transaction, as PostgreSQL counts them
    (sequential reads and index fetches); None on SQLite, which keeps no such count."""
    if connection.vendor != "postgresql":
        return None
    return rows_read()


def _plan_as_at_scale(at_scale: bool) -> None:
    """A table of a few hundred rows is cheaper to scan than to look up, so PostgreSQL's plan
    for it is not the plan of 100,000 leases. With statistics (autovacuum keeps them in
    production) and told to avoid scans, it still scans a table that no index serves: the
    rows read then show every read that would grow with the table."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        if at_scale:
            cursor.execute("ANALYZE leases_lease, leases_leasedeadline, leases_leasetransition")
        cursor.execute(f"SET LOCAL enable_seqscan = {'off' if at_scale else 'on'}")


@contextmanager
def counted() -> Iterator[Cost]:
    cost = Cost(0, None)
    _plan_as_at_scale(True)
    before = _lease_rows_read()
    with CaptureQueriesContext(connection) as queries:
        yield cost
    after = _lease_rows_read()
    _plan_as_at_scale(False)
    cost.queries = len(queries)
    cost.lease_rows = None if before is None or after is None else after - before


def one_evaluation(*clusters: KubeCluster) -> Cost:
    """An evaluation as beat runs it, with the read that schedules the next one."""
    keep_fresh(*clusters)
    with counted() as cost:
        summary = evaluation.run_evaluation(dispatch=False)
        next_lease_due(NOW)
    assert summary is not None and summary.errors == []
    return cost


def troubled_fleet() -> KubeCluster:
    """A cluster with one of each trouble (an expired leader, a silent node) besides its
    healthy leases."""
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", renewed_ago=60, duration=15)
    make_lease(cluster, "node-dead", namespace="kube-node-lease", renewed_ago=120, duration=40)
    make_lease(cluster, "kube-controller-manager", renewed_ago=1, duration=15)
    return cluster


def add_healthy(cluster: KubeCluster, nodes: int, elections: int, first: int = 0) -> None:
    make_many_leases(cluster, nodes)
    for index in range(first, first + elections):
        lease = make_lease(
            cluster, f"op-{index:04d}-leader", namespace="ops", renewed_ago=1, duration=60
        )
        LeaseHolderSpan.objects.create(lease=lease, holder=lease.holder, started_at=NOW)


def test_evaluation_cost_does_not_grow_with_healthy_leases(clock: Clock) -> None:
    cluster = troubled_fleet()
    add_healthy(cluster, nodes=16, elections=2)
    one_evaluation(cluster)  # opens the incidents: the steady state is measured
    small = one_evaluation(cluster)

    add_healthy(cluster, nodes=0, elections=36, first=2)
    make_many_leases_from(cluster, 16, 360)
    large = one_evaluation(cluster)

    assert large.queries == small.queries
    assert large.lease_rows == small.lease_rows
    open_rules = set(Incident.objects.values_list("rule", flat=True))
    assert open_rules == {Rule.LEASE_EXPIRED, Rule.NODE_HEARTBEATS_EXPIRED}


def make_many_leases_from(cluster: KubeCluster, first: int, count: int) -> None:
    """More renewing node leases, named after the ones there."""
    for index in range(first, first + count):
        make_lease(cluster, f"node-{index:04d}", namespace="kube-node-lease", duration=40)


def test_healthy_leases_are_not_read_at_all(clock: Clock) -> None:
    cluster = make_cluster("prod")
    add_healthy(cluster, nodes=200, elections=20)

    cost = one_evaluation(cluster)

    if cost.lease_rows is None:
        pytest.skip("rows read are counted by PostgreSQL only")
    assert cost.lease_rows == 0


def test_a_mass_expiry_is_judged_whole(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_many_leases(cluster, DUE_CHUNK + 5)  # renewed 3 s ago, for 40 s

    clock.advance(60)  # a zone went down: every node's lease expired 23 s ago
    evaluate(cluster)

    incident = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED)
    assert incident.details["items_total"] == DUE_CHUNK + 5
    assert incident.title == f"{DUE_CHUNK + 5} nodes stopped heart-beating"


def add_healthy_groups(cluster: KubeCluster, first: int, count: int) -> None:
    """leader-k8s groups of three slots, every slot renewing on time."""
    for number in range(first, first + count):
        for slot in range(3):
            make_slot(
                cluster, f"workers-{number:03d}", slot, namespace="jobs", renewed_ago=1, duration=60
            )


def test_group_rules_read_only_the_groups_that_can_matter(clock: Clock) -> None:
    cluster = make_cluster("prod")
    # No slot held: leader_group_unstaffed. Two of three recorded slots held: degraded.
    make_slot(cluster, "orders", 0, renewed_ago=300, duration=15)
    make_slot(cluster, "orders", 1, holder="")
    make_slot(cluster, "billing", 0, renewed_ago=1, duration=60)
    make_slot(cluster, "billing", 1, renewed_ago=1, duration=60)
    make_slot(cluster, "billing", 2, renewed_ago=300, duration=15)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="billing", expected_size=3)
    add_healthy_groups(cluster, 0, 2)
    one_evaluation(cluster)  # opens the incidents: the steady state is measured
    small = one_evaluation(cluster)

    add_healthy_groups(cluster, 2, 40)
    large = one_evaluation(cluster)

    assert large.queries == small.queries
    # Not more with 120 more healthy slots. With the few rows of the small case the planner
    # may read a little more (an index range instead of the ids), never the healthy groups.
    if small.lease_rows is not None:
        assert large.lease_rows is not None and large.lease_rows <= small.lease_rows
    groups = dict(
        Incident.objects.filter(
            rule__in=[Rule.LEADER_GROUP_UNSTAFFED, Rule.LEADER_GROUP_DEGRADED]
        ).values_list("rule", "key")
    )
    assert groups == {
        Rule.LEADER_GROUP_UNSTAFFED: f"{Rule.LEADER_GROUP_UNSTAFFED}:prod/apps/orders",
        Rule.LEADER_GROUP_DEGRADED: f"{Rule.LEADER_GROUP_DEGRADED}:prod/apps/billing",
    }


def test_a_group_incident_resolves_though_its_group_is_healthy_again(clock: Clock) -> None:
    cluster = make_cluster("prod")
    slot = make_slot(cluster, "orders", 0, renewed_ago=300, duration=15)
    one_evaluation(cluster)
    assert Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED, resolved_at=None).exists()
    # Renewed: no longer due by its schedule, so read only as an open incident's group.
    slot.renew_time, slot.expires_at = NOW, NOW + timedelta(seconds=60)
    slot.save()
    one_evaluation(cluster)
    incident = Incident.objects.get(rule=Rule.LEADER_GROUP_UNSTAFFED)
    assert incident.resolved_at is not None
    assert incident.resolution == "1 of ≥ 1 slot (highest slot seen) held again"
