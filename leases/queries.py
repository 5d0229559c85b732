"""Which leases: the filters, keyset paging, and counts by state judged by the clock.

The filters and the keyset condition are SQL (`filter_sql`, `leases.cursors.keyset_sql`),
used alone by the Leases table's one statement (`table_page`) and inside ORM queries by
`filter_leases` and `keyset_page`, so the table and the API cannot disagree.

Nothing here writes or formats. Every function takes `now` from its caller: a lease's state
is a matter of the clock (`renewTime + leaseDurationSeconds`), and one request must judge
all its rows by one clock. So is its problem rank (`Problem`), the Leases page's default
order: `problem_rank_sql` in SQL, `fencing_anomaly` and `expiring_soon` for one row in
Python, side by side here. A problems-first page is read by `leases.problems_first`, at a
cost that grows with the problems and the page, not with the leases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import urlencode

from django.db import connection
from django.db.models import (
    BooleanField,
    Expression,
    F,
    IntegerChoices,
    IntegerField,
    OrderBy,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Collate
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from dashboard.flapping import FlapPolicy, flap_policy
from leases.cursors import (
    DEFAULT_SORT,
    RANK_FIELD,
    SORT_KEYS,
    Cursor,
    SortColumn,
    SortKey,
    bytewise,
    encode_cursor,
    keyset_sql,
    order_sql,
)
from leases.flapping import flapping_ids_sql, flapping_lease_ids, recent_changes_sql
from leases.freshness import is_current
from leases.lease_states import (
    lease_as_of,
)
from leases.models import (
    EXPIRING_SOON,
    EXPIRING_SOON_PARTS,
    Lease,
    LeaseQuerySet,
    LeaseState,
)
from leases.overview_queries import counts_by_cluster

# A reused fencing token stays a problem this long after it was seen.
FENCING_ANOMALY_WINDOW = timedelta(hours=24)


class Problem(IntegerChoices):
    """What puts a lease high in the problems-first order; the worst first. A lease has the
    first that applies. Deleted leases are never problems: they are gone."""

    EXPIRED = 0, _("expired")
    FENCING = 1, _("fencing token reused")
    FLAPPING = 2, _("flapping")
    EXPIRING_SOON = 3, _("expiring soon")
    NONE = 4, _("no problem")


def fencing_anomaly(fencing_reused_at: datetime | None, now: datetime) -> bool:
    """A fencing token came back within FENCING_ANOMALY_WINDOW (`problem_rank_sql`'s rule)."""
    return fencing_reused_at is not None and fencing_reused_at > now - FENCING_ANOMALY_WINDOW


def expiring_soon(
    holder: str, expires_at: datetime | None, duration: int | None, now: datetime
) -> bool:
    """Held, and due to expire within EXPIRING_SOON or a quarter of its duration
    (`problem_rank_sql`'s rule; an expired lease is expired, not expiring)."""
    if not holder or expires_at is None or expires_at <= now:
        return False
    if expires_at <= now + EXPIRING_SOON:
        return True
    share = (
        timedelta(microseconds=duration * (1_000_000 // EXPIRING_SOON_PARTS)) if duration else None
    )
    return share is not None and expires_at < now + share


@dataclass(frozen=True, slots=True)
class ProblemBounds:
    """`fencing_anomaly` and `expiring_soon` at one moment, their bounds worked out once for
    the hundred rows of a page (a datetime sum per row and rule cost a tenth of the rows'
    building): a row is judged by comparisons alone."""

    now: datetime
    fencing_since: datetime
    soon_floor: datetime
    # For each lease duration given: the expiry before which a quarter or less of it is left.
    share_ends: dict[int, datetime]

    @classmethod
    def at(cls, now: datetime, durations: Iterable[int | None]) -> ProblemBounds:
        part = 1_000_000 // EXPIRING_SOON_PARTS
        ends = {d: now + timedelta(microseconds=d * part) for d in set(durations) if d}
        return cls(now, now - FENCING_ANOMALY_WINDOW, now + EXPIRING_SOON, ends)


def column_sql(column: SortColumn) -> tuple[str, list[Any]]:
    """A sort column in a statement whose lease table (or the derived table in its place)
    has every sort column, the problem rank included."""
    return stored_column_sql(column.field, column.bytewise), []


@cache
def stored_column_sql(field: str, compared_bytewise: bool) -> str:
    if field == RANK_FIELD:
        table = connection.ops.quote_name(Lease._meta.db_table)
        return f"{table}.{connection.ops.quote_name(RANK_FIELD)}"
    column = lease_column(field)
    return bytewise(column) if compared_bytewise else column


def _order_by(sort: SortKey, descending: bool, backwards: bool) -> list[OrderBy]:
    """`leases.cursors.order_sql` for the ORM: NULLs last, or first read backwards."""
    order = []
    for column in sort.all_columns:
        nulls = {"nulls_first": True} if backwards else {"nulls_last": True}
        options = nulls if column.nullable else {}
        ascending = descending == backwards
        expression: Expression = F(column.field)
        if column.bytewise and connection.vendor == "postgresql":
            expression = Collate(expression, "C")
        order.append(expression.asc(**options) if ascending else expression.desc(**options))
    return order


@dataclass(frozen=True, slots=True)
class LeaseFilters:
    """What the engineer asked to see; every field maps to a URL parameter."""

    cluster: str = ""
    namespace: str = ""
    lease_class: str = ""
    state: str = ""
    library: str = ""
    q: str = ""
    flapping: bool = False
    include_deleted: bool = False
    sort: str = DEFAULT_SORT
    # The order a URL without `sort` asks for (the Leases page's; a reader that walks every
    # lease may want leases.cursors.API_DEFAULT_SORT): left out of the URLs these filters make.
    default_order: str = DEFAULT_SORT

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
            "library": self.library,
            "q": self.q,
            "flapping": "true" if self.flapping else "",
            "deleted": "true" if self.include_deleted else "",
            "sort": "" if self.sort == self.default_order else self.sort,
        }
        return {key: value for key, value in params.items() if value}

    def query_string(self, **extra: str) -> str:
        params = self.params()
        params.update({key: value for key, value in extra.items() if value})
        return urlencode(params)

    @property
    def default_sort(self) -> bool:
        return self.sort == self.default_order

    @property
    def active(self) -> bool:
        return bool(
            self.cluster
            or self.namespace
            or self.lease_class
            or self.state
            or self.library
            or self.q
            or self.flapping
            or self.include_deleted
        )


@cache
def lease_column(field: str) -> str:
    """A Lease field's column, quoted and named with its table: the SQL below is used alone
    (the Leases table) and inside ORM queries (`filter_leases`, `keyset_page`) alike."""
    table = connection.ops.quote_name(Lease._meta.db_table)
    return f"{table}.{connection.ops.quote_name(Lease._meta.get_field(field).column)}"


def state_sql(
    state: str, now: datetime, as_of: Mapping[int, datetime]
) -> tuple[str, list[Any]] | None:
    """`lease_state` as SQL: judged by each cluster's as-of moment (`lease_as_of`). A lease
    of a cluster whose data is not current is unknown; one whose expiry passed after its
    data's as-of moment too."""
    holder, expires_at = lease_column("holder"), lease_column("expires_at")
    cluster = lease_column("cluster_id")
    adapt = connection.ops.adapt_datetimefield_value
    moment = adapt(now)
    current = {cluster_id: at for cluster_id, at in as_of.items() if is_current(at, now)}
    if not current:
        return ("1 = 1", []) if state == LeaseState.UNKNOWN else ("1 = 0", [])
    in_current = f"{cluster} IN ({', '.join('%s' for _ in current)})"
    current_ids: list[Any] = list(current)
    case = f"CASE {' '.join(f'WHEN {cluster} = %s THEN %s' for _ in current)} END"
    case_params: list[Any] = [
        value for cluster_id, at in current.items() for value in (cluster_id, adapt(at))
    ]
    if state == LeaseState.RELEASED:
        return f"{in_current} AND {holder} = ''", current_ids
    if state == LeaseState.HELD:
        return (
            f"{in_current} AND {holder} <> '' AND ({expires_at} > %s OR {expires_at} IS NULL)",
            [*current_ids, moment],
        )
    if state == LeaseState.EXPIRED:
        return (
            f"{in_current} AND {holder} <> '' AND {expires_at} <= %s AND {expires_at} <= {case}",
            [*current_ids, moment, *case_params],
        )
    if state == LeaseState.UNKNOWN:
        return (
            f"(NOT ({in_current}) OR ({holder} <> '' AND {expires_at} <= %s "
            f"AND {expires_at} > {case}))",
            [*current_ids, moment, *case_params],
        )
    return None


def _contains_sql(field: str) -> str:
    # Django's own icontains: UPPER(...::text) LIKE UPPER(%s) on PostgreSQL, LIKE on SQLite.
    internal_type = Lease._meta.get_field(field).get_internal_type()
    column = connection.ops.lookup_cast("icontains", internal_type) % lease_column(field)
    return f"{column} {connection.operators['icontains'] % '%s'}"


def filter_sql(
    filters: LeaseFilters,
    now: datetime,
    cluster_ids: Mapping[str, int],
    policy: FlapPolicy | None = None,
) -> tuple[list[str], list[Any]] | None:
    """The filters as SQL conditions (to be ANDed) and their parameters; None: no lease can
    match (an unknown cluster or state). `cluster_ids` maps names to ids; `policy` says what
    flapping is (default: the one in force, `flap_policy()`)."""
    conditions: list[str] = []
    params: list[Any] = []
    if not filters.include_deleted:
        conditions.append(f"{lease_column('deleted_at')} IS NULL")
    if filters.cluster:
        cluster_id = cluster_ids.get(filters.cluster)
        if cluster_id is None:
            return None
        # By id, not by a join on the name: the (cluster, namespace, name) index then
        # serves both the filter and the default order.
        conditions.append(f"{lease_column('cluster_id')} = %s")
        params.append(cluster_id)
    if filters.namespace:
        conditions.append(f"{lease_column('namespace')} = %s")
        params.append(filters.namespace)
    if filters.lease_class:
        conditions.append(f"{lease_column('lease_class')} = %s")
        params.append(filters.lease_class)
    if filters.state:
        state = state_sql(filters.state, now, lease_as_of(now))
        if state is None:
            return None
        conditions.append(state[0])
        params += state[1]
    if filters.library:
        conditions.append(f"{lease_column('library')} = %s")
        params.append(filters.library)
    if filters.q:
        # The holder as written and in human terms (leader-k8s's node id behind a token).
        pattern = f"%{connection.ops.prep_for_like_query(filters.q)}%"
        conditions.append(
            f"({_contains_sql('name')} OR {_contains_sql('holder')} OR {_contains_sql('identity')})"
        )
        params += [pattern, pattern, pattern]
    if filters.flapping:
        # Rare and never polled by many: the ORM's subquery keeps one definition of flapping.
        flapping, flapping_params = flapping_lease_ids(now, policy).query.sql_with_params()
        conditions.append(f"{lease_column('id')} IN ({flapping})")
        params += flapping_params
    return conditions, params


def filter_leases(
    filters: LeaseFilters,
    now: datetime,
    cluster_ids: Mapping[str, int],
    policy: FlapPolicy | None = None,
) -> LeaseQuerySet:
    """The leases matching the filters, unordered, as a QuerySet (see `filter_sql`); with
    their problem rank at `now` annotated when the filters sort problems first.

    Its conditions name the lease table itself: narrow, join and read it, but do not nest
    it in another query (a subquery's table gets an alias the SQL would not follow).
    """
    leases: LeaseQuerySet = Lease.objects.all()
    if filters.sort_key.computed:
        leases = with_problem_rank(leases, now, policy)
    where = filter_sql(filters, now, cluster_ids, policy)
    if where is None:
        return leases.none()
    conditions, params = where
    if not conditions:
        return leases
    return leases.filter(_condition(" AND ".join(conditions), params))


def problem_rank_sql(now: datetime, policy: FlapPolicy) -> tuple[str, list[Any]]:
    """Each lease's `Problem` at `now`, as an SQL expression over the lease table, and its
    parameters: the first that applies of expired, a fencing token reused within
    FENCING_ANOMALY_WINDOW, flapping (the policy's, as the filter and the lease_flapping
    rule judge it), expiring soon (`expiring_soon`); otherwise, or deleted, none."""
    column, adapt = lease_column, connection.ops.adapt_datetimefield_value
    holder, expires_at = column("holder"), column("expires_at")
    flapping, flapping_params = flapping_ids_sql(now, policy)
    duration, share = column("lease_duration_seconds"), 1_000_000 // EXPIRING_SOON_PARTS
    if connection.vendor == "postgresql":
        # An interval times the integer column: an integer product would overflow at 2^31
        # (a day-long lease), and a lease's duration is whatever a client wrote.
        soon_share = f"{expires_at} < %s + {duration} * INTERVAL '{share} microseconds'"
    else:
        # SQLite keeps times as text: Django's own function adds microseconds exactly, and
        # SQLite's integers have 64 bits.
        soon_share = f"{expires_at} < django_format_dtdelta('+', %s, {duration} * {share})"
    sql = (
        f"CASE WHEN {column('deleted_at')} IS NOT NULL THEN {Problem.NONE:d} "
        f"WHEN {holder} <> '' AND {expires_at} <= %s THEN {Problem.EXPIRED:d} "
        f"WHEN {column('fencing_reused_at')} > %s THEN {Problem.FENCING:d} "
        f"WHEN {column('id')} IN ({flapping}) THEN {Problem.FLAPPING:d} "
        f"WHEN {holder} <> '' AND ({expires_at} <= %s OR {soon_share}) "
        f"THEN {Problem.EXPIRING_SOON:d} ELSE {Problem.NONE:d} END"
    )
    params = [
        adapt(now),
        adapt(now - FENCING_ANOMALY_WINDOW),
        *flapping_params,
        adapt(now + EXPIRING_SOON),
        adapt(now),
    ]
    return sql, params


def with_problem_rank(
    leases: LeaseQuerySet, now: datetime, policy: FlapPolicy | None = None
) -> LeaseQuerySet:
    """`leases` with their `Problem` at `now` as RANK_FIELD (`problem_rank_sql`)."""
    sql, params = problem_rank_sql(now, policy or flap_policy())
    # Built from column names and placeholders only: every value is a parameter.
    rank = RawSQL(sql, tuple(params), output_field=IntegerField())  # noqa: S611
    return leases.annotate(**{RANK_FIELD: rank})


def _condition(sql: str, params: Sequence[Any]) -> RawSQL:
    # Built from column names and placeholders only: every value is a parameter.
    return RawSQL(  # noqa: S611
        f"({sql})", tuple(params), output_field=BooleanField()
    )


@dataclass(slots=True)
class KeysetPage:
    rows: list[Any]
    next_cursor: str | None
    previous_cursor: str | None


def adapted_cursor(cursor: Cursor) -> Cursor:
    # Times as the database compares them (SQLite stores naive UTC text).
    values = tuple(
        connection.ops.adapt_datetimefield_value(value) if isinstance(value, datetime) else value
        for value in cursor.values
    )
    return Cursor(cursor.direction, values)


def page_from_rows(
    rows: list[Any], cursor: Cursor | None, limit: int, cursor_of: Callable[[Any], str]
) -> KeysetPage:
    """A page from `limit + 1` rows fetched in the page's order (backwards before a cursor)."""
    more = len(rows) > limit
    rows = rows[:limit]
    if cursor is not None and cursor.direction == "before":
        rows.reverse()
        has_previous, has_more = more, True
    else:
        has_previous, has_more = cursor is not None, more
    return KeysetPage(
        rows=rows,
        next_cursor=cursor_of(rows[-1]) if rows and has_more else None,
        previous_cursor=cursor_of(rows[0]) if rows and has_previous else None,
    )


def keyset_page(
    leases: LeaseQuerySet,
    filters: LeaseFilters,
    cursor: Cursor | None,
    limit: int,
    fields: Sequence[str],
) -> KeysetPage:
    """One page of `leases` in the filters' order, fetching limit + 1 rows and no COUNT.

    Problems first needs the rank `filter_leases` annotates; other QuerySets are ranked at
    the present moment.
    """
    sort, descending = filters.sort_key, filters.descending
    if sort.computed and RANK_FIELD not in leases.query.annotations:
        leases = with_problem_rank(leases, timezone.now())
    columns = [column.field for column in sort.all_columns]
    wanted = list(dict.fromkeys([*fields, *columns, "id"]))
    backwards = cursor is not None and cursor.direction == "before"
    if cursor is not None:
        rank = leases.query.annotations.get(RANK_FIELD)

        def rank_or_column_sql(column: SortColumn) -> tuple[str, list[Any]]:
            # The ORM cannot name an annotation in a condition: the rank's SQL goes in.
            if column.computed and isinstance(rank, RawSQL):
                return f"({rank.sql})", list(rank.params)
            return column_sql(column)

        sql, params = keyset_sql(sort, descending, adapted_cursor(cursor), rank_or_column_sql)
        leases = leases.filter(_condition(sql, params))
    ordered = leases.order_by(*_order_by(sort, descending, backwards))
    rows = list(ordered.values(*wanted)[: limit + 1])

    def cursor_of(row: dict[str, Any]) -> str:
        return encode_cursor([row[name] for name in columns], row["id"], sort)

    return page_from_rows(rows, cursor, limit, cursor_of)


# What a row of the Leases table holds, in this order, followed by its recent holder changes.
TABLE_COLUMNS = (
    "id",
    "cluster_id",
    "namespace",
    "name",
    "lease_class",
    "holder",
    "renew_time",
    "expires_at",
    "lease_transitions",
    "deleted_at",
    "lease_duration_seconds",
    # Who leads: a token is leader-k8s's alone, so the library itself need not be read.
    "identity",
    "token",
    "foreign_writer",
    "fencing_reused_at",
)
# A table row's length: TABLE_COLUMNS and the holder changes.
TABLE_ROW_WIDTH = len(TABLE_COLUMNS) + 1


def table_page(
    filters: LeaseFilters,
    now: datetime,
    cluster_ids: Mapping[str, int],
    policy: FlapPolicy,
    cursor: Cursor | None,
    limit: int,
) -> KeysetPage:
    """One page of the Leases table as TABLE_COLUMNS tuples plus holder changes in the
    policy's window, in one statement.

    Polled every few seconds by every open browser: one SQL statement with no model
    instances and no ORM compilation, from the same conditions as `filter_leases`.
    """
    where = filter_sql(filters, now, cluster_ids, policy)
    if where is None:
        return KeysetPage([], None, None)
    conditions, params = where
    sort, descending = filters.sort_key, filters.descending
    backwards = cursor is not None and cursor.direction == "before"
    keyset: tuple[str, list[Any]] | None = None
    if cursor is not None and not sort.computed:
        keyset = keyset_sql(sort, descending, adapted_cursor(cursor), column_sql)
    changes, changes_params = recent_changes_sql(lease_column("id"), now, policy)
    selected = ", ".join(lease_column(name) for name in TABLE_COLUMNS)
    # Sort values a row does not show (the name key, the rank): selected last, for the
    # cursors, and cut off the rows before they are returned.
    extra = [column.field for column in sort.all_columns if column.field not in TABLE_COLUMNS]
    if sort.computed:
        # Imported here: problems first is built on this module's filters and rank.
        from leases.problems_first import page_column, ranked_statement

        statement, statement_params = ranked_statement(
            sort, descending, backwards, cursor, filters, conditions, params, now, policy, limit
        )
        selected_extra = "".join(f", {page_column(name)}" for name in extra)
        statement = f"SELECT {selected}, ({changes}){selected_extra} {statement}"
    else:
        if keyset is not None:
            conditions.append(f"({keyset[0]})")
            params += keyset[1]
        table = connection.ops.quote_name(Lease._meta.db_table)
        selected_extra = "".join(f", {lease_column(name)}" for name in extra)
        where_sql = " AND ".join(conditions) or "1 = 1"
        order, order_params = order_sql(sort, descending, backwards, column_sql)
        # Column names and placeholders only: every value is a parameter.
        statement = (
            f"SELECT {selected}, ({changes}){selected_extra} FROM {table} "  # noqa: S608
            f"WHERE {where_sql} ORDER BY {order} LIMIT %s"
        )
        statement_params = [*params, *order_params, limit + 1]
    with connection.cursor() as db:
        db.execute(statement, [*changes_params, *statement_params])
        rows = _converted(db.fetchall())
    # Positions in a fetched row: TABLE_COLUMNS, the holder changes, then the extra values.
    fetched = [*TABLE_COLUMNS, "", *extra]
    positions = [fetched.index(column.field) for column in sort.all_columns]

    def cursor_of(row: tuple[Any, ...]) -> str:
        return encode_cursor([row[index] for index in positions], row[0], sort)

    page = page_from_rows(rows, cursor, limit, cursor_of)
    if extra:
        page.rows = [row[:TABLE_ROW_WIDTH] for row in page.rows]
    return page


def _converted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows with each value as the ORM would return it (SQLite's times come back naive)."""
    converters = _table_converters()
    if not converters:
        return rows  # PostgreSQL: psycopg already returns aware datetimes
    converted = []
    for row in rows:
        values = list(row)
        for index, converter, column in converters:
            values[index] = converter(values[index], column, connection)
        converted.append(tuple(values))
    return converted


@cache
def _table_converters() -> tuple[tuple[int, Any, Any], ...]:
    """(position, converter, expression) of each TABLE_COLUMNS value the database returns
    as something else than the field's Python value, as the ORM applies them. Looked up
    once: asking the fields on every refresh cost more than the row values' conversion."""
    found = []
    for index, name in enumerate(TABLE_COLUMNS):
        field = Lease._meta.get_field(name)
        column = field.get_col(Lease._meta.db_table)
        for converter in connection.ops.get_db_converters(column) + field.get_db_converters(
            connection
        ):
            found.append((index, converter, column))
    return tuple(found)


def state_counts_by_cluster(now: datetime) -> dict[int, dict[str, int]]:
    """Live leases per cluster by state, plus the two alarming subsets, in one query
    (each lease judged once, by its joined cluster's as-of moment: leases.overview_queries)."""
    return counts_by_cluster(now, EXPIRING_SOON)


def namespaces() -> list[str]:
    """Namespaces that have leases, for the filter's suggestions (full page only).

    Read as a skip scan of the namespace index, one step per namespace: a DISTINCT read
    every lease (45 ms of the page at 100,000 leases), and a fleet has many leases in few
    namespaces.
    """
    table = connection.ops.quote_name(Lease._meta.db_table)
    # Names only, no value.
    statement = f"""
        WITH RECURSIVE found(namespace) AS (
            SELECT MIN(namespace) FROM {table} WHERE deleted_at IS NULL
            UNION ALL
            SELECT (
                SELECT MIN(later.namespace) FROM {table} AS later
                WHERE later.namespace > found.namespace AND later.deleted_at IS NULL
            ) FROM found WHERE found.namespace IS NOT NULL
        )
        SELECT namespace FROM found WHERE namespace IS NOT NULL
    """  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(statement)
        return [row[0] for row in cursor.fetchall()]
