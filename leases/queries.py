"""Which leases: the filters, keyset paging, and counts by state judged by the clock.

Nothing here writes or formats. Every function takes `now` from its caller: a lease's state
is a matter of the clock (`renewTime + leaseDurationSeconds`), and one request must judge
all its rows by one clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, F, OrderBy, Q

from dashboard.flapping import FlapPolicy
from leases.cursors import (
    DEFAULT_SORT,
    SORT_KEYS,
    Cursor,
    SortColumn,
    SortKey,
    encode_cursor,
)
from leases.flapping import flapping_lease_ids
from leases.models import Lease, LeaseClass, LeaseQuerySet

# Held leases that expire within this are "expiring soon" on the overview.
EXPIRING_SOON = timedelta(seconds=10)


def _order_by(sort: SortKey, descending: bool) -> list[OrderBy]:
    # NULLs (a lease never renewed) sort last in both directions, on SQLite and PostgreSQL.
    order = []
    for column in sort.all_columns:
        expression = F(column.field)
        if column.nullable:
            order.append(
                expression.desc(nulls_last=True) if descending else expression.asc(nulls_last=True)
            )
        else:
            order.append(expression.desc() if descending else expression.asc())
    return order


def _reverse_order_by(sort: SortKey, descending: bool) -> list[OrderBy]:
    order = []
    for column in sort.all_columns:
        expression = F(column.field)
        if column.nullable:
            order.append(
                expression.asc(nulls_first=True)
                if descending
                else expression.desc(nulls_first=True)
            )
        else:
            order.append(expression.asc() if descending else expression.desc())
    return order


def _comes_after(column: SortColumn, value: Any, descending: bool) -> Q | None:
    """Rows whose value in this column sorts after `value` (NULLs last)."""
    if value is None:
        return None
    lookup = "lt" if descending else "gt"
    condition = Q(**{f"{column.field}__{lookup}": value})
    if column.nullable:
        condition |= Q(**{f"{column.field}__isnull": True})
    return condition


def _comes_before(column: SortColumn, value: Any, descending: bool) -> Q | None:
    if value is None:
        return Q(**{f"{column.field}__isnull": False})
    lookup = "gt" if descending else "lt"
    return Q(**{f"{column.field}__{lookup}": value})


def _equals(column: SortColumn, value: Any) -> Q:
    if value is None:
        return Q(**{f"{column.field}__isnull": True})
    return Q(**{column.field: value})


def keyset_condition(sort: SortKey, descending: bool, cursor: Cursor) -> Q:
    """Rows strictly after (or before) the cursor in the sort order, as one condition.

    Lexicographic: beyond in the first column, or equal there and beyond in the second...
    """
    compare = _comes_after if cursor.direction == "after" else _comes_before
    alternatives: list[Q] = []
    equal_so_far = Q()
    for column, value in zip(sort.all_columns, cursor.values, strict=True):
        beyond = compare(column, value, descending)
        if beyond is not None:
            alternatives.append(equal_so_far & beyond)
        equal_so_far &= _equals(column, value)
    if not alternatives:
        return Q(pk__in=[])
    condition = alternatives[0]
    for alternative in alternatives[1:]:
        condition |= alternative
    # A range on the leading column lets the index start at the cursor instead of filtering
    # every row before it.
    first, first_value = sort.all_columns[0], cursor.values[0]
    if first_value is not None and not first.nullable:
        forward = (cursor.direction == "after") != descending
        condition &= Q(**{f"{first.field}__{'gte' if forward else 'lte'}": first_value})
    return condition


@dataclass(frozen=True, slots=True)
class LeaseFilters:
    """What the engineer asked to see; every field maps to a URL parameter."""

    cluster: str = ""
    namespace: str = ""
    lease_class: str = ""
    state: str = ""
    q: str = ""
    flapping: bool = False
    include_deleted: bool = False
    sort: str = DEFAULT_SORT

    @property
    def sort_key(self) -> SortKey:
        return SORT_KEYS[self.sort.removeprefix("-")]

    @property
    def descending(self) -> bool:
        return self.sort.startswith("-")

    def params(self) -> dict[str, str]:
        """The URL parameters that reproduce these filters (defaults left out)."""
        params = {
            "cluster": self.cluster,
            "namespace": self.namespace,
            "class": self.lease_class,
            "state": self.state,
            "q": self.q,
            "flapping": "true" if self.flapping else "",
            "deleted": "true" if self.include_deleted else "",
            "sort": "" if self.sort == DEFAULT_SORT else self.sort,
        }
        return {key: value for key, value in params.items() if value}

    def query_string(self, **extra: str) -> str:
        params = self.params()
        params.update({key: value for key, value in extra.items() if value})
        return urlencode(params)

    @property
    def default_sort(self) -> bool:
        return self.sort == DEFAULT_SORT

    @property
    def active(self) -> bool:
        return bool(
            self.cluster
            or self.namespace
            or self.lease_class
            or self.state
            or self.q
            or self.flapping
            or self.include_deleted
        )


def filter_leases(
    filters: LeaseFilters,
    now: datetime,
    cluster_ids: Mapping[str, int],
    policy: FlapPolicy | None = None,
) -> LeaseQuerySet:
    """The leases matching the filters, unordered. `cluster_ids` maps names to ids;
    `policy` says what flapping is (default: the one in force, `flap_policy()`)."""
    leases: LeaseQuerySet = Lease.objects.all()
    if not filters.include_deleted:
        leases = leases.live()
    if filters.cluster:
        cluster_id = cluster_ids.get(filters.cluster)
        if cluster_id is None:
            return leases.none()
        # By id, not by a join on the name: the (cluster, namespace, name) index then
        # serves both the filter and the default order.
        leases = leases.filter(cluster_id=cluster_id)
    if filters.namespace:
        leases = leases.filter(namespace=filters.namespace)
    if filters.lease_class:
        leases = leases.filter(lease_class=filters.lease_class)
    if filters.state:
        leases = leases.in_state(filters.state, now)
    if filters.q:
        leases = leases.filter(Q(name__icontains=filters.q) | Q(holder__icontains=filters.q))
    if filters.flapping:
        leases = leases.filter(pk__in=flapping_lease_ids(now, policy))
    return leases


@dataclass(slots=True)
class KeysetPage:
    rows: list[dict[str, Any]]
    next_cursor: str | None
    previous_cursor: str | None


def keyset_page(
    leases: LeaseQuerySet,
    filters: LeaseFilters,
    cursor: Cursor | None,
    limit: int,
    fields: Sequence[str],
) -> KeysetPage:
    """One page of `leases` in the filters' order, fetching limit + 1 rows and no COUNT."""
    sort, descending = filters.sort_key, filters.descending
    columns = [column.field for column in sort.all_columns]
    wanted = list(dict.fromkeys([*fields, *columns, "id"]))
    if cursor is None:
        rows = list(leases.order_by(*_order_by(sort, descending)).values(*wanted)[: limit + 1])
        has_more, has_previous = len(rows) > limit, False
        rows = rows[:limit]
    elif cursor.direction == "after":
        page = leases.filter(keyset_condition(sort, descending, cursor))
        rows = list(page.order_by(*_order_by(sort, descending)).values(*wanted)[: limit + 1])
        has_more, has_previous = len(rows) > limit, True
        rows = rows[:limit]
    else:
        page = leases.filter(keyset_condition(sort, descending, cursor))
        rows = list(
            page.order_by(*_reverse_order_by(sort, descending)).values(*wanted)[: limit + 1]
        )
        has_previous, has_more = len(rows) > limit, True
        rows = rows[:limit]
        rows.reverse()

    def cursor_of(row: dict[str, Any]) -> str:
        return encode_cursor([row[name] for name in columns], row["id"])

    return KeysetPage(
        rows=rows,
        next_cursor=cursor_of(rows[-1]) if rows and has_more else None,
        previous_cursor=cursor_of(rows[0]) if rows and has_previous else None,
    )


def expired_condition(now: datetime) -> Q:
    """Held by someone, past its expiry: the rule of `lease_state`, as a query condition."""
    return ~Q(holder="") & Q(expires_at__lte=now)


def state_counts(now: datetime) -> dict[str, Count]:
    """Aggregates counting a group's leases by state at `now`, for `.annotate(**...)`.

    `total`, `released` and `expired`; the held ones are the rest (`held_count`).
    """
    return {
        "total": Count("id"),
        "released": Count("id", filter=Q(holder="")),
        "expired": Count("id", filter=expired_condition(now)),
    }


def held_count(row: Mapping[str, int]) -> int:
    return row["total"] - row["released"] - row["expired"]


def state_counts_by_cluster(now: datetime) -> dict[int, dict[str, int]]:
    """Live leases per cluster by state, plus the two alarming subsets, in one query."""
    expired = expired_condition(now)
    rows = (
        Lease.objects.live()
        .values("cluster_id")
        .annotate(
            **state_counts(now),
            expiring_soon=Count(
                "id",
                filter=~Q(holder="") & Q(expires_at__gt=now, expires_at__lte=now + EXPIRING_SOON),
            ),
            nodes_expired=Count("id", filter=expired & Q(lease_class=LeaseClass.NODE_HEARTBEAT)),
        )
        .order_by()
    )
    counts = {}
    for row in rows:
        counts[row["cluster_id"]] = {**row, "held": held_count(row)}
    return counts


def namespaces() -> list[str]:
    """Namespaces that have leases, for the filter's suggestions (full page only)."""
    return list(
        Lease.objects.live().order_by("namespace").values_list("namespace", flat=True).distinct()
    )
