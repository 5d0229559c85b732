"""The Leases table's one SQL statement finds the rows the ORM's filter finds, in its order.

`table_page` (the table) and `filter_leases` + `keyset_page` (the JSON API) share the filter
conditions and the keyset condition; these tests walk both, page by page and both ways,
through every sort order with ties, NULLs, every state, deleted and flapping leases, and
the problems-first order's ranks (a reused fencing token, expiring soon) and natural names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine

from dashboard.flapping import flap_policy
from dashboard.natural import natural_key
from leases.cursors import RANK_FIELD, SORT_KEYS, Cursor, decode_cursor
from leases.models import KubeCluster, Lease, LeaseLibrary
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

FILTERS = [
    LeaseFilters(),
    LeaseFilters(state="held"),
    LeaseFilters(state="expired"),
    LeaseFilters(state="released"),
    LeaseFilters(state="nonsense"),
    LeaseFilters(cluster="b-cluster", namespace="ns-1"),
    LeaseFilters(cluster="no-such-cluster"),
    LeaseFilters(lease_class="leader_election", include_deleted=True),
    LeaseFilters(q="LEASE-1"),
    LeaseFilters(q="50%_"),
    LeaseFilters(flapping=True),
    LeaseFilters(library="leader_k8s"),
    LeaseFilters(library="plain", state="held", include_deleted=True),
    LeaseFilters(library="nonsense"),
    LeaseFilters(q="WORKER-1"),
]
LIBRARIES = list(LeaseLibrary)


@pytest.fixture(autouse=True)
def leases() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        first, second = make_cluster("a-cluster"), make_cluster("b-cluster")
        for index in range(17):
            name = f"lease-{index % 7}" if index != 16 else "50%_off"
            lease = make_lease(
                first if index % 2 else second,
                name,
                namespace=f"ns-{index % 3}",
                holder=["", "x", "y"][index % 3],
                renewed_ago=float(index % 4) * 10,
                duration=None if index % 5 == 0 else 15,
                renew_time=None if index % 6 == 0 else NOW - timedelta(seconds=index % 4 * 10),
                lease_transitions=None if index % 4 == 0 else index % 3,
                deleted_at=NOW if index % 8 == 7 else None,
                name_key=natural_key(name),
                library=LIBRARIES[index % 3],
                identity=f"worker-{index % 4} / audit" if index % 3 == 1 else "",
                fencing_reused_at=NOW - timedelta(hours=index % 3 * 20) if index % 4 == 1 else None,
            )
            for seconds_ago in range(index % 5):
                make_transition(lease, "x", "y", seconds_ago=30 + seconds_ago)
        # Names whose natural order is not their byte order, ranked alike and apart.
        for index, name in enumerate(["lease-10", "lease-9", "lease-010", "lease-100"]):
            make_lease(
                first,
                name,
                namespace="ns-0",
                holder="z",
                renewed_ago=index * 3,
                duration=15,
                name_key=natural_key(name),
            )
        yield


def cluster_ids() -> dict[str, int]:
    return dict(KubeCluster.objects.values_list("name", "pk"))


def orm_ids(filters: LeaseFilters) -> list[int]:
    leases = filter_leases(filters, NOW, cluster_ids())
    return [row["id"] for row in keyset_page(leases, filters, None, 1_000, ("id",)).rows]


def walk(filters: LeaseFilters, limit: int) -> tuple[list[int], list[int]]:
    """The table's ids following `next` cursors to the end, then `previous` ones back."""
    ids, policy = cluster_ids(), flap_policy()

    def page(cursor: Cursor | None) -> tuple[list[int], str | None, str | None]:
        found = table_page(filters, NOW, ids, policy, cursor, limit)
        return [row[0] for row in found.rows], found.next_cursor, found.previous_cursor

    forward: list[int] = []
    rows, after, before = page(None)
    forward += rows
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, filters.sort_key)))
        forward += rows
    backward: list[int] = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, filters.sort_key)))
        backward = rows + backward
    return forward, backward


@pytest.mark.parametrize("sort", [*SORT_KEYS, *(f"-{key}" for key in SORT_KEYS)])
@pytest.mark.parametrize("filters", FILTERS, ids=lambda filters: filters.query_string() or "all")
def test_the_table_statement_and_the_orm_find_the_same_rows_in_the_same_order(
    filters: LeaseFilters, sort: str
) -> None:
    filters = replace(filters, sort=sort)

    forward, backward = walk(filters, limit=3)

    assert forward == orm_ids(filters)
    assert backward == forward


def test_each_row_counts_its_holder_changes_within_the_window() -> None:
    filters = LeaseFilters(include_deleted=True)
    page = table_page(filters, NOW, cluster_ids(), flap_policy(), None, 100)

    counts = {row[0]: row[-1] for row in page.rows}

    assert counts == {lease.pk: lease.transitions.count() for lease in Lease.objects.all()}
    assert sorted(set(counts.values())) == [0, 1, 2, 3, 4]


def test_the_fixture_ranks_leases_at_every_level_of_problems_first() -> None:
    leases = with_problem_rank(filter_leases(LeaseFilters(), NOW, cluster_ids()), NOW)

    ranks = set(leases.values_list(RANK_FIELD, flat=True))

    assert ranks == set(Problem)
