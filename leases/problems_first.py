"""Problems first: the Leases page's default order, one page at a cost that grows with
the problems and the page, not with the leases.

The order is the problem rank (`leases.queries.problem_rank_sql`), then the natural name.
Every lease without a problem ranks NONE, so a page is two segments read apart: the leases
that may have a problem (`problem_candidates_sql`: their expiry schedule says so, a fencing
token was reused, or they flap; a few, looked up by id and ranked), and the rest in the
order of an index that holds no renewed column (`ranked_statement`). The Leases table
(`leases.queries.table_page`) and the API (`ranked_page`) read the same statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.db import connection

from dashboard.flapping import FlapPolicy
from leases.cursors import (
    RANK_FIELD,
    Cursor,
    SortColumn,
    SortKey,
    bytewise,
    encode_cursor,
    keyset_sql,
    order_sql,
)
from leases.flapping import flapping_ids_sql
from leases.models import Lease, LeaseDeadline, LeaseState
from leases.queries import (
    FENCING_ANOMALY_WINDOW,
    KeysetPage,
    LeaseFilters,
    Problem,
    adapted_cursor,
    column_sql,
    filter_sql,
    lease_column,
    page_from_rows,
    problem_rank_sql,
    stored_column_sql,
)


def ranked_page(
    filters: LeaseFilters,
    now: datetime,
    cluster_ids: Mapping[str, int],
    policy: FlapPolicy,
    cursor: Cursor | None,
    limit: int,
    fields: Sequence[str],
) -> KeysetPage:
    """One page of leases in an order computed from the clock (problems first), as dicts of
    `fields`: the page's ids and sort values by the table's statement (`ranked_statement`,
    whose cost does not grow with the leases), then their rows by id.

    For readers that want other columns than the table's (the API); `keyset_page` would rank
    every matching lease.
    """
    where = filter_sql(filters, now, cluster_ids, policy)
    if where is None:
        return KeysetPage([], None, None)
    conditions, params = where
    sort, descending = filters.sort_key, filters.descending
    backwards = cursor is not None and cursor.direction == "before"
    statement, statement_params = ranked_statement(
        sort, descending, backwards, cursor, filters, conditions, params, now, policy, limit
    )
    columns = [column.field for column in sort.all_columns]
    selected = ", ".join(page_column(name) for name in ["id", *columns])
    with connection.cursor() as db:
        db.execute(f"SELECT {selected} {statement}", statement_params)
        keys = db.fetchall()
    found = {
        row["id"]: row
        for row in Lease.objects.filter(pk__in=[key[0] for key in keys]).values(
            *dict.fromkeys(["id", *fields])
        )
    }
    # A lease removed between the two reads is left out; its place still moves the cursor.
    page = page_from_rows(keys, cursor, limit, lambda key: encode_cursor(key[1:], key[0], sort))
    return KeysetPage(
        [found[key[0]] for key in page.rows if key[0] in found],
        page.next_cursor,
        page.previous_cursor,
    )


# The Leases table's page of ids in a ranked order, joined back to the lease table.
_PAGE = "page"


@cache
def page_column(field: str) -> str:
    return f"{connection.ops.quote_name(_PAGE)}.{connection.ops.quote_name(field)}"


def problem_candidates_sql(now: datetime, policy: FlapPolicy) -> tuple[str, list[Any]]:
    """The ids of every lease that may have a problem at `now` (a superset of those whose
    `problem_rank_sql` is not NONE), read from indexes alone, and its parameters: those
    expiring soon or expired by their schedule (LeaseDeadline.soon_at <= now), a fencing
    token reused within the window, flapping. How many they are grows with the problems,
    not with the leases."""
    quote, adapt = connection.ops.quote_name, connection.ops.adapt_datetimefield_value
    deadline = quote(LeaseDeadline._meta.db_table)
    table = quote(Lease._meta.db_table)
    flapping, flapping_params = flapping_ids_sql(now, policy)
    # Names and placeholders only: every value is a parameter.
    sql = (
        f"SELECT {deadline}.lease_id FROM {deadline} "  # noqa: S608
        f"WHERE {deadline}.soon_at <= %s "
        f"UNION SELECT {table}.id FROM {table} WHERE {lease_column('fencing_reused_at')} > %s "
        f"UNION {flapping}"
    )
    return sql, [adapt(now), adapt(now - FENCING_ANOMALY_WINDOW), *flapping_params]


def ranked_statement(
    sort: SortKey,
    descending: bool,
    backwards: bool,
    cursor: Cursor | None,
    filters: LeaseFilters,
    conditions: list[str],
    params: list[Any],
    now: datetime,
    policy: FlapPolicy,
    limit: int,
) -> tuple[str, list[Any]]:
    """FROM ... ORDER BY of a problems-first page, and its parameters, at a cost that grows
    with the problems and the page, not with the leases.

    The order is the problem rank, then the rest of the sort key: the leases with a problem
    (a few, found by `problem_candidates_sql` and ranked there) come before the others,
    which all rank NONE and so are in the order of the rest of the key alone, which an index
    serves (lease_natural, or lease_cluster_natural under a cluster filter). A page is the
    first `limit + 1` rows of the two segments in reading order, each read from where the
    cursor is (only the segment the cursor is in, and those after it, are read), merged,
    and joined back to the lease table for the rows' columns.
    """
    table, quote = connection.ops.quote_name(Lease._meta.db_table), connection.ops.quote_name
    rank_column, *rest_columns = sort.all_columns
    assert rank_column.computed and sort.unique
    rest = SortKey(sort.param, sort.label, tuple(rest_columns), unique=True)
    keys = [column.field for column in rest_columns]
    narrow = list(dict.fromkeys(["id", *keys]))
    adapted = adapted_cursor(cursor) if cursor is not None else None
    where = " AND ".join(conditions) or "1 = 1"
    rank, rank_params = problem_rank_sql(now, policy)
    none = f"{Problem.NONE:d}"
    derived_columns = ", ".join(stored_column_sql(name, False) for name in narrow)

    def problems(keyset: bool) -> tuple[str, list[Any]]:
        candidates, candidates_params = problem_candidates_sql(now, policy)
        keyset_where, keyset_params = (
            keyset_sql(sort, descending, adapted, column_sql)
            if keyset and adapted is not None
            else ("1 = 1", [])
        )
        order, order_params = order_sql(sort, descending, backwards, column_sql)
        # The candidates ranked in a derived table named like the lease table, so that the
        # keyset condition and the order read the rank as a column, computed once per lease.
        # Each candidate is looked up by its primary key. On PostgreSQL the ids are read
        # first, as an array (an InitPlan, run once), and `id = ANY(...)` probes the primary
        # key with them: an IN, a join or even a LATERAL subquery is flattened into a join,
        # and with a thousand candidates the planner would rather hash-join them against a
        # scan of every lease (measured: 91 ms of 99 at 100,000 leases), the cost this
        # statement exists to avoid. SQLite looks an IN list's rows up by id itself.
        if connection.vendor == "postgresql":
            by_id = f"= ANY(ARRAY({candidates}))"
        else:
            by_id = f"IN ({candidates})"
        leases_of_candidates = f"{table} WHERE {where} AND {lease_column('id')} {by_id}"
        # OFFSET 0 keeps PostgreSQL from pulling the derived table up into the query around
        # it: pulled up, the rank's expression replaced each use of the column, and a page
        # after a cursor computed it seven times per candidate, each with its own flapping
        # subplan (25 of 28 ms at 100,000 leases; the first page took 4).
        fence = " OFFSET 0" if connection.vendor == "postgresql" else ""
        ranked = (
            f"SELECT {', '.join(lease_column(name) for name in narrow)}, "  # noqa: S608
            f"{rank} AS {quote(RANK_FIELD)} FROM {leases_of_candidates}{fence}"
        )
        sql = (
            f"SELECT * FROM (SELECT {derived_columns}, "  # noqa: S608
            f"{stored_column_sql(RANK_FIELD, False)} FROM ({ranked}) AS {table} "
            f"WHERE {stored_column_sql(RANK_FIELD, False)} < {none} AND {keyset_where} "
            f"ORDER BY {order} LIMIT %s) AS {quote('problems')}"
        )
        return sql, [
            *rank_params,
            *params,
            *candidates_params,
            *keyset_params,
            *order_params,
            limit + 1,
        ]

    def others(keyset: bool) -> tuple[str, list[Any]]:
        keyset_where, keyset_params = (
            keyset_sql(rest, descending, Cursor(adapted.direction, adapted.values[1:]), column_sql)
            if keyset and adapted is not None
            else ("1 = 1", [])
        )
        order, order_params = order_sql(rest, descending, backwards, column_sql)
        # "No problem" as a CASE, not as `rank = NONE`: PostgreSQL guesses an equality on an
        # expression it keeps no statistics of matches 0.5 % of the rows, so that a page of
        # 500 (the API's) would need the whole index read, and it sorts a scan of every lease
        # instead (142 of 161 ms at 100,000 leases). Of a CASE it guesses half, nearer the
        # truth (nearly every lease has no problem), and it reads the index a page at a time.
        no_problem = f"CASE WHEN ({rank}) = {none} THEN TRUE ELSE FALSE END"
        sql = (
            f"SELECT * FROM (SELECT {', '.join(lease_column(name) for name in narrow)}, "  # noqa: S608
            f"{none} AS {quote(RANK_FIELD)} FROM {table} "
            f"WHERE {where} AND {no_problem} AND {keyset_where} "
            f"ORDER BY {order} LIMIT %s) AS {quote('others')}"
        )
        return sql, [*params, *rank_params, *keyset_params, *order_params, limit + 1]

    # Reading order: problems, then the others; reversed when the order is descending or
    # the page is read backwards from a cursor (both: forwards again).
    segments = [problems, others]
    if descending != backwards:
        segments.reverse()
    if cursor is not None:
        in_problems = cursor.values[0] != Problem.NONE
        start = segments.index(problems if in_problems else others)
        segments = segments[start:]
    if not _others_possible(filters):
        segments = [segment for segment in segments if segment is not others]
    if not segments:
        segments = [problems]  # an empty page still needs a statement
    parts = [segment(keyset=index == 0) for index, segment in enumerate(segments)]
    union = " UNION ALL ".join(sql for sql, _ in parts)
    union_params = [value for _, part_params in parts for value in part_params]
    page_order, page_order_params = order_sql(
        sort, descending, backwards, lambda column: (_paged(column), [])
    )
    page = f"SELECT * FROM ({union}) AS {quote(_PAGE)} ORDER BY {page_order} LIMIT %s"  # noqa: S608
    statement = (
        f"FROM ({page}) AS {quote(_PAGE)} JOIN {table} ON {lease_column('id')} = "
        f"{page_column('id')} ORDER BY {page_order}"
    )
    return statement, [*union_params, *page_order_params, limit + 1, *page_order_params]


def _others_possible(filters: LeaseFilters) -> bool:
    """Whether a lease without a problem can match: an expired or flapping lease always has
    one, unless it is deleted (deleted leases rank NONE)."""
    if filters.include_deleted:
        return True
    return not (filters.flapping or filters.state == LeaseState.EXPIRED)


def _paged(column: SortColumn) -> str:
    sql = page_column(column.field)
    return bytewise(sql) if column.bytewise else sql
