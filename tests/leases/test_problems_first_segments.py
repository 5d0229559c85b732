"""Problems first, read as two segments (the leases that may have a problem, found through
their expiry schedule, then one index-ordered page of the rest): still every problem before
every healthy lease, worst first, and paging across the boundary between the two, forwards
and back, loses and repeats no row, under every filter, in both directions of the order.

The oracle is the order of every matching lease ranked one by one (`with_problem_rank`,
what the table did before), walked by the ORM's keyset pages."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine

from dashboard.flapping import flap_policy
from dashboard.natural import natural_key
from leases.cursors import RANK_FIELD, Cursor, decode_cursor
from leases.models import KubeCluster, Lease, LeaseClass, LeaseDeadline
from leases.problems_first import ranked_page
from leases.queries import (
    LeaseFilters,
    Problem,
    filter_leases,
    keyset_page,
    table_page,
    with_problem_rank,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def fleet(seed: int) -> list[KubeCluster]:
    """Two clusters of node and election leases, some with each problem, some deleted or
    released, with names that share natural keys (node-01 and node-1)."""
    rng = random.Random(seed)
    clusters = [make_cluster("alpha"), make_cluster("beta")]
    for index in range(70):
        cluster = rng.choice(clusters)
        node = rng.random() < 0.7
        name = f"node-{index % 23:0{rng.choice([1, 2])}d}" if node else f"ctl-{index}"
        namespace = "kube-node-lease" if node else rng.choice(["apps", "ops"])
        if Lease.objects.filter(cluster=cluster, namespace=namespace, name=name).exists():
            continue
        fields: dict[str, object] = {"name_key": natural_key(name)}
        roll = rng.random()
        if roll < 0.12:
            fields.update(renewed_ago=rng.choice([16, 100, 5000]), duration=15)  # expired
        elif roll < 0.2:
            fields.update(renewed_ago=6, duration=15)  # expiring soon: 9 s left
        elif roll < 0.26:
            fields.update(renewed_ago=80, duration=100)  # soon: under a quarter left
        elif roll < 0.3:
            fields["fencing_reused_at"] = NOW - timedelta(hours=rng.choice([1, 30]))
        elif roll < 0.34:
            fields["holder"] = ""  # released
        elif roll < 0.4:
            fields.update(renewed_ago=100, deleted_at=NOW - timedelta(minutes=1))
        else:
            fields.update(renewed_ago=rng.uniform(0, 5), duration=rng.choice([40, 3600]))
        lease = make_lease(cluster, name, namespace=namespace, **fields)
        if rng.random() < 0.08:
            for seconds_ago in (300, 200, 100):
                make_transition(lease, "a", "b", seconds_ago=seconds_ago)
    return clusters


def cluster_ids() -> dict[str, int]:
    return dict(KubeCluster.objects.values_list("name", "pk"))


def table_walk(filters: LeaseFilters, limit: int) -> tuple[list[int], list[int]]:
    """The table's ids following `next` cursors to the end, then `previous` ones back."""
    policy, sort = flap_policy(), filters.sort_key

    def page(cursor: Cursor | None) -> tuple[list[int], str | None, str | None]:
        found = table_page(filters, NOW, cluster_ids(), policy, cursor, limit)
        assert len(found.rows) <= limit
        return [row[0] for row in found.rows], found.next_cursor, found.previous_cursor

    rows, after, before = page(None)
    forward = list(rows)
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, sort)))
        forward += rows
    backward = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, sort)))
        backward = rows + backward
    return forward, backward


def api_walk(filters: LeaseFilters, limit: int) -> tuple[list[int], list[int]]:
    """The same through `ranked_page` (the API's problems first), as dicts."""
    policy, sort = flap_policy(), filters.sort_key

    def page(cursor: Cursor | None) -> tuple[list[int], str | None, str | None]:
        found = ranked_page(filters, NOW, cluster_ids(), policy, cursor, limit, ("name",))
        return [row["id"] for row in found.rows], found.next_cursor, found.previous_cursor

    rows, after, before = page(None)
    forward = list(rows)
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, sort)))
        forward += rows
    backward = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, sort)))
        backward = rows + backward
    return forward, backward


def oracle(filters: LeaseFilters) -> list[int]:
    """Every matching lease ranked and ordered in one query (the ORM's one page of all)."""
    leases = filter_leases(filters, NOW, cluster_ids())
    found = keyset_page(leases, filters, None, 10_000, ("id",))
    return [row["id"] for row in found.rows]


FILTERS = [
    LeaseFilters(),
    LeaseFilters(include_deleted=True),
    LeaseFilters(cluster="alpha"),
    LeaseFilters(cluster="beta", lease_class=LeaseClass.NODE_HEARTBEAT, state="held"),
    LeaseFilters(lease_class=LeaseClass.LEADER_ELECTION),
    LeaseFilters(state="expired"),
    LeaseFilters(state="expired", include_deleted=True),
    LeaseFilters(state="released"),
    LeaseFilters(flapping=True),
    LeaseFilters(q="node-1"),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sort", ["problems", "-problems"])
def test_paging_across_the_problems_end_loses_and_repeats_nothing(seed: int, sort: str) -> None:
    fleet(seed)
    for base in FILTERS:
        filters = replace(base, sort=sort)
        expected = oracle(filters)
        for limit in (1, 3, 7, 100):
            forward, backward = table_walk(filters, limit)
            assert forward == expected, (filters, limit)
            assert backward == expected, (filters, limit)
        assert api_walk(filters, 3) == (expected, expected), filters


def test_every_problem_comes_before_every_healthy_lease_worst_first() -> None:
    alpha, _ = fleet(7)
    make_lease(alpha, "fenced", fencing_reused_at=NOW - timedelta(hours=2), name_key="fenced")
    page = table_page(LeaseFilters(), NOW, cluster_ids(), flap_policy(), None, 500)
    ranks = dict(
        with_problem_rank(Lease.objects.live(), NOW, flap_policy()).values_list("id", RANK_FIELD)
    )
    shown = [ranks[row[0]] for row in page.rows]
    assert shown == sorted(shown)
    assert set(shown) == set(Problem)  # every kind of problem, and healthy leases, are there


def test_a_lease_without_a_schedule_row_is_still_not_lost_when_healthy() -> None:
    # The schedule only ever adds candidates: a healthy lease comes from the index of the
    # rest, whatever its schedule says.
    cluster = make_cluster()
    lease = make_lease(cluster, "calm", renewed_ago=1, duration=3600, name_key="calm")
    LeaseDeadline.objects.filter(lease=lease).delete()
    page = table_page(LeaseFilters(), NOW, cluster_ids(), flap_policy(), None, 10)
    assert [row[0] for row in page.rows] == [lease.id]
