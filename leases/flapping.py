"""Flapping: a lease whose holder keeps changing, because its leader keeps losing it
(overloaded API server, CPU starvation, network trouble).

What counts as flapping (how many changes within which window) is `dashboard.flapping`'s
policy, the lease_flapping alert rule's threshold and window when an admin set them. Every
flapping query, of the Leases pages and of that rule, lives here and takes that policy, so
the page's count and filter and the rule's incidents agree.

Only changes the watcher saw count, one per transition row: `missed` changes happened at
unknown times while nobody watched, possibly days apart, so they say nothing about the
window. A release (the holder gives the lease up: "") is no change of its own: a graceful
handover is a release and an acquisition, one change. Counted as two, a rolling restart of
a two-replica controller was "flapping" against a real kube-apiserver: the acquisitions are
what count.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Min

from dashboard.flapping import FlapPolicy, flap_policy
from leases.models import Lease, LeaseTransition


def change_counts(now: datetime, policy: FlapPolicy | None = None) -> Any:
    """Per lease with a holder change in the window: `lease_id`, `changes` (how many),
    `first` and `last` (when), grouped in the database. Narrow it with `.filter()`."""
    window = (policy or flap_policy()).window
    return (
        LeaseTransition.objects.filter(observed_at__gt=now - window)
        .exclude(to_holder="")
        .values("lease_id")
        .annotate(changes=Count("id"), first=Min("observed_at"), last=Max("observed_at"))
        .order_by()
    )


def flapping_lease_ids(now: datetime, policy: FlapPolicy | None = None) -> Any:
    """Ids of leases flapping now, as a subquery for `pk__in`."""
    policy = policy or flap_policy()
    return change_counts(now, policy).filter(changes__gte=policy.changes).values("lease_id")


def recent_changes_sql(
    lease_id: str, now: datetime, policy: FlapPolicy | None = None
) -> tuple[str, list[Any]]:
    """Holder changes in the window of the lease whose id is the column `lease_id`, as a
    correlated SQL subquery and its parameters (counted as `change_counts` counts).

    For the Leases table's one statement: an index probe per row it returns, no GROUP BY.
    """
    window = (policy or flap_policy()).window
    table = connection.ops.quote_name(LeaseTransition._meta.db_table)
    # Names and a placeholder only: the time is a parameter.
    return (
        f"SELECT COUNT(*) FROM {table} WHERE {table}.lease_id = {lease_id} "  # noqa: S608
        f"AND {table}.observed_at > %s AND {table}.to_holder <> ''",
        [connection.ops.adapt_datetimefield_value(now - window)],
    )


def flapping_ids_sql(now: datetime, policy: FlapPolicy) -> tuple[str, list[Any]]:
    """`flapping_lease_ids` as SQL and its parameters, built without the ORM.

    For the Leases table's problems-first order, polled every few seconds: the database
    reads it once per statement (a hashed subquery), and the ORM's compilation of the same
    question would cost more than the rest of the statement's building.
    """
    table = connection.ops.quote_name(LeaseTransition._meta.db_table)
    # Names and placeholders only: the time and the threshold are parameters.
    return (
        f"SELECT {table}.lease_id FROM {table} WHERE {table}.observed_at > %s "  # noqa: S608
        f"AND {table}.to_holder <> '' GROUP BY {table}.lease_id HAVING COUNT(*) >= %s",
        [connection.ops.adapt_datetimefield_value(now - policy.window), policy.changes],
    )


def flap_counts(
    lease_ids: Iterable[int], now: datetime, policy: FlapPolicy | None = None
) -> dict[int, int]:
    """Holder changes in the window for each of these leases, in one grouped query."""
    ids = list(lease_ids)
    if not ids:
        return {}
    rows = change_counts(now, policy).filter(lease_id__in=ids)
    return dict(rows.values_list("lease_id", "changes"))


def most_flapping(now: datetime, limit: int, policy: FlapPolicy | None = None) -> dict[int, int]:
    """Live leases flapping now, most holder changes first: lease id -> changes.

    The changes are grouped first and only the flapping leases are then looked up by
    primary key to drop deleted ones: joined before grouping, every change of the window
    was matched against a hash of every live lease (a read of the whole lease table)."""
    policy = policy or flap_policy()
    table = connection.ops.quote_name(LeaseTransition._meta.db_table)
    leases = connection.ops.quote_name(Lease._meta.db_table)
    # Names and placeholders only: the time, the threshold and the limit are parameters.
    statement = f"""
        SELECT found.lease_id, found.changes FROM (
            SELECT {table}.lease_id AS lease_id, COUNT(*) AS changes FROM {table}
            WHERE {table}.observed_at > %s AND {table}.to_holder <> ''
            GROUP BY {table}.lease_id HAVING COUNT(*) >= %s
        ) AS found
        WHERE EXISTS (
            SELECT 1 FROM {leases} WHERE {leases}.id = found.lease_id
            AND {leases}.deleted_at IS NULL
        )
        ORDER BY found.changes DESC, found.lease_id LIMIT %s
    """  # noqa: S608
    moment = connection.ops.adapt_datetimefield_value(now - policy.window)
    with connection.cursor() as cursor:
        cursor.execute(statement, [moment, policy.changes, limit])
        return {int(lease_id): int(changes) for lease_id, changes in cursor.fetchall()}
