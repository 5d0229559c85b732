"""The Leases table's sort orders and the page cursors that carry a row's sort values.

Both come from URLs anyone can edit: a sort is one of a whitelist, and a cursor is checked
value by value before it reaches a query, so a bad one is a CursorError (a 400, or the first
page with a banner), never a database error.

Problems first (the Leases page's default) sorts by a rank the query computes from the clock
(`leases.queries.problem_rank_sql`). Its cursor carries the last row's rank like any other
sort value, and the next page is judged by its own clock: a lease whose rank changed between
two pages may be skipped or shown twice, as under the renewed or expires orders, whose values
also move. Every page, and every refresh of it, is in the order its clock says.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from django.db import connection
from django.utils.functional import Promise, lazy
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext

from leases.models import Lease

# Cursors carry the last row's sort values; a huge value (a 10 kB holder) would make a URL
# that proxies refuse, so such a cursor names the row instead.
MAX_CURSOR_CHARS = 512

ColumnKind = Literal["str", "int", "datetime", "rank"]

# The problems-first rank's values (leases.queries.Problem): 0 (expired) .. 4 (no problem).
RANK_VALUES = range(5)
RANK_FIELD = "problem_rank"


@dataclass(frozen=True, slots=True)
class SortColumn:
    """One sort value. `bytewise`: compared byte by byte whatever the database's collation
    (the natural name key: its byte order is the natural order, dashboard/natural.py).
    A "rank" is computed by the query from the clock, not read from a column: a cursor
    that names a row ("i.<id>") carries it, since it cannot be read back."""

    field: str
    kind: ColumnKind
    nullable: bool = False
    bytewise: bool = False

    @property
    def computed(self) -> bool:
        return self.kind == "rank"


@dataclass(frozen=True, slots=True)
class SortKey:
    """A whitelisted ordering. Rows are always ordered by the columns, then by id.

    `unique` says the columns alone identify a row (the unique constraint on cluster,
    namespace and name), so the id is not needed and the index serves the order as is.
    """

    param: str
    label: str | Promise  # translated when shown
    columns: tuple[SortColumn, ...]
    unique: bool = False

    @property
    def all_columns(self) -> tuple[SortColumn, ...]:
        return self.columns if self.unique else (*self.columns, SortColumn("id", "int"))

    @property
    def computed(self) -> bool:
        return any(column.computed for column in self.columns)


_CLUSTER = SortColumn("cluster_id", "int")
_NAMESPACE = SortColumn("namespace", "str")
_NAME = SortColumn("name", "str")
# Names in natural order (worker-2 before worker-10), then by the name itself: two names can
# share a key (node-01 and node-1).
_NATURAL_NAME = (SortColumn("name_key", "str", bytewise=True), _NAME)
PROBLEMS_SORT = "problems"
SORT_KEYS: dict[str, SortKey] = {
    key.param: key
    for key in (
        # Problems first: expired, fencing anomaly, flapping, expiring soon, then the rest,
        # each by name. The rank is computed from the clock, so no index holds it: the
        # statement ranks only the leases that may have a problem (found through their
        # expiry schedule, LeaseDeadline) and reads the rest, which all rank alike, from a
        # natural-name index a page at a time (leases.problems_first.ranked_statement).
        SortKey(
            PROBLEMS_SORT,
            _("Problems first"),
            (SortColumn(RANK_FIELD, "rank"), *_NATURAL_NAME, _NAMESPACE, _CLUSTER),
            unique=True,
        ),
        # By cluster means cluster, namespace, then names in natural order: served by the
        # indexes of migration 0006 (lease_cluster_natural, lease_namespace_natural), which
        # hold name_key byte by byte as these orders compare it.
        SortKey("cluster", _("Cluster"), (_CLUSTER, _NAMESPACE, *_NATURAL_NAME), unique=True),
        SortKey("namespace", _("Namespace"), (_NAMESPACE, *_NATURAL_NAME, _CLUSTER), unique=True),
        # Sorting by name has always sorted every row: natural order costs nothing more.
        SortKey("name", _("Name"), (*_NATURAL_NAME, _NAMESPACE, _CLUSTER), unique=True),
        SortKey(
            "class", _("Class"), (SortColumn("lease_class", "str"), _CLUSTER, _NAMESPACE, _NAME)
        ),
        SortKey("holder", _("Holder"), (SortColumn("holder", "str"),)),
        SortKey("renewed", _("Renewed"), (SortColumn("renew_time", "datetime", nullable=True),)),
        SortKey("expires", _("Expires"), (SortColumn("expires_at", "datetime", nullable=True),)),
        SortKey(
            "transitions",
            _("Transitions"),
            (SortColumn("lease_transitions", "int", nullable=True),),
        ),
    )
}
# A URL without `sort`: the Leases page shows problems first. API_DEFAULT_SORT is the order
# whose values never change, for readers that walk every lease once.
DEFAULT_SORT = PROBLEMS_SORT
API_DEFAULT_SORT = "cluster"


def _descending(label: str | Promise) -> str:
    return pgettext("sort order", "%(column)s, descending") % {"column": label}


# Translated when shown, in the reader's language, not once at import.
_descending_label = lazy(_descending, str)
SORT_CHOICES: list[tuple[str, str | Promise]] = [
    choice
    for key in SORT_KEYS.values()
    for choice in (
        (key.param, key.label),
        (f"-{key.param}", _descending_label(key.label)),
    )
]


class CursorError(ValueError):
    """A page link that does not decode (edited by hand, or from another sort order)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    direction: Literal["after", "before"]
    values: tuple[Any, ...]


def encode_cursor(values: Sequence[Any], row_id: int, sort: SortKey | None = None) -> str:
    """A cursor after (or before) a row with these sort values of `sort`'s columns.

    Too long, it names the row instead ("i.<id>"), followed by the values a row cannot give
    back: those the query computed from the clock ("i.<id>.<rank>").
    """
    payload = [value.isoformat() if isinstance(value, datetime) else value for value in values]
    token = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode()
    if len(token) > MAX_CURSOR_CHARS:
        carried = []
        if sort is not None:
            carried = [
                f".{value}"
                for column, value in zip(sort.all_columns, values, strict=True)
                if column.computed
            ]
        return f"i.{row_id}{''.join(carried)}"
    return f"v.{token}"


def decode_cursor(token: str, sort: SortKey) -> tuple[Any, ...]:
    """The sort values a cursor carries, or those of the row it names ("i.<id>").

    A cursor is a URL anyone can edit: everything in it is checked here, before it reaches
    a query, so that a bad one is a CursorError (a 400, or the first page with a banner),
    never a database error.
    """
    kind, _, body = token.partition(".")
    columns = sort.all_columns
    if kind == "i":
        row_part, *carried = body.split(".")
        row_id = _cursor_int(SortColumn("id", "int"), _row_id(row_part))
        stored = [column.field for column in columns if not column.computed]
        row = Lease.objects.filter(pk=row_id).values_list(*stored).first()
        if row is None:
            raise CursorError("the lease this page started at is gone")
        computed = [column for column in columns if column.computed]
        if len(carried) != len(computed):
            raise CursorError("the cursor belongs to another sort order")
        kept = iter(
            [
                _cursor_value(column, _row_id(text))
                for column, text in zip(computed, carried, strict=True)
            ]
        )
        read = iter(row)
        return tuple(next(kept) if column.computed else next(read) for column in columns)
    if kind != "v":
        raise CursorError("not a page cursor")
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise CursorError("not a page cursor") from exc
    if not isinstance(payload, list) or len(payload) != len(columns):
        raise CursorError("the cursor belongs to another sort order")
    return tuple(
        _cursor_value(column, value) for column, value in zip(columns, payload, strict=True)
    )


# Row ids are at most 64-bit: 19 digits. Longer digit strings are not ids, and Python
# refuses to parse more than 4,300 digits anyway (ValueError).
_MAX_ID_DIGITS = 19


def _row_id(body: str) -> int:
    # isdigit() alone accepts "²" and other Unicode digits that int() refuses.
    if not (body.isascii() and body.isdigit() and len(body) <= _MAX_ID_DIGITS):
        raise CursorError("not a page cursor")
    return int(body)


def _cursor_int(column: SortColumn, value: int) -> int:
    """The value, if the column's database type can hold it.

    SQLite's driver raises OverflowError on integers beyond 64 bits, and PostgreSQL's
    `integer` holds 32: the range comes from the database in use.
    """
    field = Lease._meta.get_field(column.field)
    target = field.target_field if field.is_relation else field
    low, high = connection.ops.integer_field_range(target.get_internal_type())
    if (low is not None and value < low) or (high is not None and value > high):
        raise CursorError(f"{column.field} is out of range")
    return value


def _cursor_value(column: SortColumn, value: Any) -> Any:
    if value is None:
        if not column.nullable:
            raise CursorError(f"{column.field} cannot be empty")
        return None
    if column.kind == "datetime":
        if not isinstance(value, str):
            raise CursorError(f"{column.field} must be a time")
        try:
            moment = datetime.fromisoformat(value)
        except ValueError as exc:
            raise CursorError(f"{column.field} must be a time") from exc
        if moment.tzinfo is None:
            raise CursorError(f"{column.field} must carry a time zone")
        # Databases store UTC: year 1 at +14:00 (or 9999 at -14:00) has no UTC datetime,
        # and SQLite's adapter would fail converting it inside the query.
        try:
            return moment.astimezone(UTC)
        except OverflowError as exc:
            raise CursorError(f"{column.field} is out of range") from exc
    expected = str if column.kind == "str" else int
    if not isinstance(value, expected) or isinstance(value, bool):
        raise CursorError(f"{column.field} has the wrong type")
    if column.kind == "rank":
        if value not in RANK_VALUES:
            raise CursorError(f"{column.field} is out of range")
        return value
    if column.kind == "int":
        return _cursor_int(column, value)
    # PostgreSQL text cannot hold NUL, and psycopg refuses to send it (DataError): no
    # value we wrote into a cursor ever has one.
    if "\x00" in value:
        raise CursorError(f"{column.field} holds a NUL character")
    return value


# A sort column as SQL in a statement, with the parameters that SQL holds (a rank computed
# from the clock has some; a plain column has none).
ColumnSql = Callable[[SortColumn], tuple[str, Sequence[Any]]]


def bytewise(sql: str) -> str:
    """`sql` compared byte by byte: PostgreSQL's "C" collation (SQLite compares bytes)."""
    return f'{sql} COLLATE "C"' if connection.vendor == "postgresql" else sql


def order_sql(
    sort: SortKey, descending: bool, backwards: bool, column: ColumnSql
) -> tuple[str, list[Any]]:
    """ORDER BY terms of `sort`, NULLs last (or, read `backwards` from a cursor, first).

    `column` names a sort column in the statement; the ORM ordering of `queries` and this
    one sort alike (tests walk both).
    """
    terms, params = [], []
    for sort_column in sort.all_columns:
        ascending = descending == backwards
        sql, column_params = column(sort_column)
        term = f"{sql} {'ASC' if ascending else 'DESC'}"
        if sort_column.nullable:
            term += " NULLS FIRST" if backwards else " NULLS LAST"
        terms.append(term)
        params += column_params
    return ", ".join(terms), params


def keyset_sql(
    sort: SortKey, descending: bool, cursor: Cursor, column: ColumnSql
) -> tuple[str, list[Any]]:
    """Rows strictly after (or before) the cursor in the sort order, as one SQL condition.

    Lexicographic: beyond in the first column, or equal there and beyond in the second...
    NULLs sort last, so nothing comes after a NULL and every value comes before one.
    """
    forward = cursor.direction == "after"
    alternatives: list[str] = []
    params: list[Any] = []
    equal_sql: list[str] = []
    equal_params: list[Any] = []
    for sort_column, value in zip(sort.all_columns, cursor.values, strict=True):
        name, name_params = column(sort_column)
        if value is None:
            if not forward:
                alternatives.append(" AND ".join([*equal_sql, f"{name} IS NOT NULL"]))
                params += [*equal_params, *name_params]
            equal_sql.append(f"{name} IS NULL")
            equal_params += name_params
            continue
        beyond = f"{name} {'<' if descending == forward else '>'} %s"
        beyond_params = [*name_params, value]
        if forward and sort_column.nullable:
            beyond = f"({beyond} OR {name} IS NULL)"
            beyond_params += name_params
        alternatives.append(" AND ".join([*equal_sql, beyond]))
        params += [*equal_params, *beyond_params]
        equal_sql.append(f"{name} = %s")
        equal_params += [*name_params, value]
    if not alternatives:
        return "1 = 0", []
    condition = " OR ".join(f"({alternative})" for alternative in alternatives)
    # A range on the leading column lets the index start at the cursor instead of filtering
    # every row before it.
    first, first_value = sort.all_columns[0], cursor.values[0]
    if first_value is not None and not first.nullable:
        name, name_params = column(first)
        condition = f"({condition}) AND {name} {'>=' if forward != descending else '<='} %s"
        params += [*name_params, first_value]
    return condition, params
