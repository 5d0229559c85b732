"""The Leases table's one SQL statement finds the rows the ORM's filter finds, in its order.

`table_page` (the table) and `filter_leases` + `keyset_page` (the JSON API) share the filter
conditions and the keyset condition; these tests walk both, page by page and both ways,
through every sort order with ties, NULLs, every state, deleted and flapping leases.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
import time_machine

from dashboard.flapping import flap_policy
from leases.cursors import SORT_KEYS, Cursor, decode_cursor
from leases.models import KubeCluster, Lease
from leases.queries import LeaseFilters, filter_leases, keyset_page, table_page
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
]


@pytest.fixture(autouse=True)
def leases() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        first, second = make_cluster("a-cluster"), make_cluster("b-cluster")
        for index in range(17):
            lease = make_lease(
                first if index % 2 else second,
                f"lease-{index % 7}" if index != 16 else "50%_off",
                namespace=f"ns-{index % 3}",
                holder=["", "x", "y"][index % 3],
                renewed_ago=float(index % 4) * 10,
                duration=None if index % 5 == 0 else 15,
                renew_time=None if index % 6 == 0 else NOW - timedelta(seconds=index % 4 * 10),
                lease_transitions=None if index % 4 == 0 else index % 3,
                deleted_at=NOW if index % 8 == 7 else None,
            )
            for seconds_ago in range(index % 5):
                make_transition(lease, "x", "y", seconds_ago=30 + seconds_ago)
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
