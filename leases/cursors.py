"""The Leases table's sort orders and the page cursors that carry a row's sort values.

Both come from URLs anyone can edit: a sort is one of a whitelist, and a cursor is checked
value by value before it reaches a query, so a bad one is a CursorError (a 400, or the first
page with a banner), never a database error.
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

from leases.models import Lease

# Cursors carry the last row's sort values; a huge value (a 10 kB holder) would make a URL
# that proxies refuse, so such a cursor names the row instead.
MAX_CURSOR_CHARS = 512

ColumnKind = Literal["str", "int", "datetime"]


@dataclass(frozen=True, slots=True)
class SortColumn:
    field: str
    kind: ColumnKind
    nullable: bool = False


@dataclass(frozen=True, slots=True)
class SortKey:
    """A whitelisted ordering. Rows are always ordered by the columns, then by id.

    `unique` says the columns alone identify a row (the unique constraint on cluster,
    namespace and name), so the id is not needed and the index serves the order as is.
    """

    param: str
    label: str
    columns: tuple[SortColumn, ...]
    unique: bool = False

    @property
    def all_columns(self) -> tuple[SortColumn, ...]:
        return self.columns if self.unique else (*self.columns, SortColumn("id", "int"))


_CLUSTER = SortColumn("cluster_id", "int")
_NAMESPACE = SortColumn("namespace", "str")
_NAME = SortColumn("name", "str")
SORT_KEYS: dict[str, SortKey] = {
    key.param: key
    for key in (
        # By cluster means cluster, namespace, name: the unique index serves it directly.
        SortKey("cluster", "Cluster", (_CLUSTER, _NAMESPACE, _NAME), unique=True),
        SortKey("namespace", "Namespace", (_NAMESPACE, _NAME, _CLUSTER), unique=True),
        SortKey("name", "Name", (_NAME, _NAMESPACE, _CLUSTER), unique=True),
        SortKey("class", "Class", (SortColumn("lease_class", "str"), _CLUSTER, _NAMESPACE, _NAME)),
        SortKey("holder", "Holder", (SortColumn("holder", "str"),)),
        SortKey("renewed", "Renewed", (SortColumn("renew_time", "datetime", nullable=True),)),
        SortKey("expires", "Expires", (SortColumn("expires_at", "datetime", nullable=True),)),
        SortKey(
            "transitions",
            "Transitions",
            (SortColumn("lease_transitions", "int", nullable=True),),
        ),
    )
}
DEFAULT_SORT = "cluster"
SORT_CHOICES: list[tuple[str, str]] = [
    choice
    for key in SORT_KEYS.values()
    for choice in ((key.param, key.label), (f"-{key.param}", f"{key.label}, descending"))
]


class CursorError(ValueError):
    """A page link that does not decode (edited by hand, or from another sort order)."""


@dataclass(frozen=True, slots=True)
class Cursor:
    direction: Literal["after", "before"]
    values: tuple[Any, ...]


def encode_cursor(values: Sequence[Any], row_id: int) -> str:
    payload = [value.isoformat() if isinstance(value, datetime) else value for value in values]
    token = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode()
    if len(token) > MAX_CURSOR_CHARS:
        return f"i.{row_id}"
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
        row_id = _cursor_int(SortColumn("id", "int"), _row_id(body))
        row = Lease.objects.filter(pk=row_id).values_list(*(c.field for c in columns)).first()
        if row is None:
            raise CursorError("the lease this page started at is gone")
        return tuple(row)
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
    expected = int if column.kind == "int" else str
    if not isinstance(value, expected) or isinstance(value, bool):
        raise CursorError(f"{column.field} has the wrong type")
    if column.kind == "int":
        return _cursor_int(column, value)
    # PostgreSQL text cannot hold NUL, and psycopg refuses to send it (DataError): no
    # value we wrote into a cursor ever has one.
    if "\x00" in value:
        raise CursorError(f"{column.field} holds a NUL character")
    return value


def order_sql(
    sort: SortKey, descending: bool, backwards: bool, column: Callable[[str], str]
) -> str:
    """ORDER BY terms of `sort`, NULLs last (or, read `backwards` from a cursor, first).

    `column` names a field's column in the statement; the ORM ordering of `queries` and this
    one sort alike (tests walk both).
    """
    terms = []
    for sort_column in sort.all_columns:
        ascending = descending == backwards
        term = f"{column(sort_column.field)} {'ASC' if ascending else 'DESC'}"
        if sort_column.nullable:
            term += " NULLS FIRST" if backwards else " NULLS LAST"
        terms.append(term)
    return ", ".join(terms)


def keyset_sql(
    sort: SortKey, descending: bool, cursor: Cursor, column: Callable[[str], str]
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
        name = column(sort_column.field)
        if value is None:
            if not forward:
                alternatives.append(" AND ".join([*equal_sql, f"{name} IS NOT NULL"]))
                params += equal_params
            equal_sql.append(f"{name} IS NULL")
            continue
        beyond = f"{name} {'<' if descending == forward else '>'} %s"
        if forward and sort_column.nullable:
            beyond = f"({beyond} OR {name} IS NULL)"
        alternatives.append(" AND ".join([*equal_sql, beyond]))
        params += [*equal_params, value]
        equal_sql.append(f"{name} = %s")
        equal_params.append(value)
    if not alternatives:
        return "1 = 0", []
    condition = " OR ".join(f"({alternative})" for alternative in alternatives)
    # A range on the leading column lets the index start at the cursor instead of filtering
    # every row before it.
    first, first_value = sort.all_columns[0], cursor.values[0]
    if first_value is not None and not first.nullable:
        condition = (
            f"({condition}) AND {column(first.field)} {'>=' if forward != descending else '<='} %s"
        )
        params.append(first_value)
    return condition, params
