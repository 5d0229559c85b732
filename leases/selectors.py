"""Read-side queries for Leases: the table, the lease page, the overview, the API, metrics.

Nothing here writes. Pages get small row objects whose display strings are computed here:
Django's template filters cost 10-27 µs per cell, and the table partial is fetched every
few seconds by every open browser, so the template only prints ready strings.

Every function takes `now` from its caller: a lease's state is a matter of the clock
(`renewTime + leaseDurationSeconds`), and one request must judge all its rows by one clock.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import quote, urlencode

import orjson
from django.conf import settings
from django.db import connection
from django.db.models import Count, F, OrderBy, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse

from dashboard.timefmt import When, api_time, format_duration, iso_js, relative_text, when
from dashboard.timefmt import expiry_text as timefmt_expiry_text
from leases.models import (
    KubeCluster,
    Lease,
    LeaseCandidate,
    LeaseClass,
    LeaseQuerySet,
    LeaseState,
    LeaseTransition,
    lease_state,
)

PAGE_SIZE = 100
API_PAGE_SIZE = 500
# A lease whose holder changed this often within the window is flapping: its leader keeps
# losing it (overloaded API server, CPU starvation, network trouble). The same settings are
# the lease_flapping alert rule's defaults, so the page and the mails agree.
FLAP_WINDOW = timedelta(seconds=settings.ALERT_FLAP_WINDOW_SECONDS)
FLAP_THRESHOLD = settings.ALERT_FLAP_CHANGES
EXPIRING_SOON = timedelta(seconds=10)
# A candidate answers the API server's pings by renewing; one that has not renewed for a
# minute is not taking part in the election any more.
CANDIDATE_ALIVE_WITHIN = timedelta(minutes=1)
# Holders are whatever a client wrote, up to kilobytes: the table shows a prefix and the
# title attribute a longer one; the lease page shows it all.
HOLDER_DISPLAY_CHARS = 60
HOLDER_TITLE_CHARS = 1024
# A flapping lease can have thousands of transitions: the page and the API show the newest.
TIMELINE_LIMIT = 200
API_HISTORY_LIMIT = 1000
OVERVIEW_LIST_LIMIT = 10
OVERVIEW_FLAPPING_LIMIT = 50
# Cursors carry the last row's sort values; a huge value (a 10 kB holder) would make a URL
# that proxies refuse, so such a cursor names the row instead.
MAX_CURSOR_CHARS = 512
# Per-lease metrics only for classes with a handful of leases per cluster: node heartbeats
# would add one series per node.
PER_LEASE_METRIC_CLASSES = (LeaseClass.LEADER_ELECTION, LeaseClass.CONTROL_PLANE)

CLASS_LABELS: dict[str, str] = dict(LeaseClass.choices)
STATE_PILLS = {
    LeaseState.HELD: "pill-ok",
    LeaseState.EXPIRED: "pill-bad",
    LeaseState.RELEASED: "pill-quiet",
}


# --- Times -----------------------------------------------------------------------------------


# For rows read with .values(): the rule of Lease.state_at.
state_of = lease_state


def expiry_text(state: str, expires_at: datetime | None, now: datetime) -> str:
    # A released lease has no holder left to expire.
    return timefmt_expiry_text(None if state == LeaseState.RELEASED else expires_at, now)


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- URLs ------------------------------------------------------------------------------------


_URL_SAFE = re.compile(r"[A-Za-z0-9._~-]+")


def _path_segment(text: str) -> str:
    # Kubernetes names are always URL-safe; quote() only for whatever else a row holds.
    return text if _URL_SAFE.fullmatch(text) else quote(text, safe="")


def lease_url(prefix: str, cluster: str, namespace: str, name: str) -> str:
    """The lease page's URL, without a reverse() per row (about 15 µs each).

    `prefix` is reverse("leases:index"); tests check this agrees with reverse("leases:detail").
    """
    return f"{prefix}{_path_segment(cluster)}/{_path_segment(namespace)}/{_path_segment(name)}/"


def _leases_prefix() -> str:
    return reverse("leases:index")


# --- Filters, sorting and keyset pagination --------------------------------------------------

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


def flapping_lease_ids(now: datetime) -> Any:
    """Ids of leases with FLAP_THRESHOLD or more observed holder changes in FLAP_WINDOW.

    Only changes the watcher saw count: `missed` changes happened at unknown times while
    nobody watched, possibly days apart, so they say nothing about the last ten minutes.
    """
    return (
        LeaseTransition.objects.filter(observed_at__gt=now - FLAP_WINDOW)
        .values("lease_id")
        .annotate(changes=Count("id"))
        .filter(changes__gte=FLAP_THRESHOLD)
        .values("lease_id")
    )


def recent_changes(now: datetime) -> Coalesce:
    """Per lease row: holder changes in FLAP_WINDOW, as a correlated subquery.

    Evaluated only for the rows a page returns (an index probe each), in the same query.
    """
    changes = (
        LeaseTransition.objects.filter(lease_id=OuterRef("pk"), observed_at__gt=now - FLAP_WINDOW)
        .order_by()
        .values("lease_id")
        .annotate(changes=Count("id"))
        .values("changes")
    )
    return Coalesce(Subquery(changes), 0)


def flap_counts(lease_ids: Iterable[int], now: datetime) -> dict[int, int]:
    """Holder changes in FLAP_WINDOW for each of these leases, in one grouped query."""
    ids = list(lease_ids)
    if not ids:
        return {}
    rows = (
        LeaseTransition.objects.filter(lease_id__in=ids, observed_at__gt=now - FLAP_WINDOW)
        .values("lease_id")
        .annotate(changes=Count("id"))
        .values_list("lease_id", "changes")
    )
    return dict(rows)


def filter_leases(
    filters: LeaseFilters, now: datetime, cluster_ids: Mapping[str, int]
) -> LeaseQuerySet:
    """The leases matching the filters, unordered. `cluster_ids` maps names to ids."""
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
        leases = leases.filter(pk__in=flapping_lease_ids(now))
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


# --- Clusters --------------------------------------------------------------------------------


@dataclass(slots=True)
class ClusterStatus:
    """A watched cluster as the pages show it. Holds no kubeconfig, so none can leak."""

    id: int
    name: str
    enabled: bool
    source: str
    connected: bool
    stale: bool
    connected_since: When | None
    last_event: When | None
    last_flush: When | None
    last_list: When | None
    resource_version: str
    events_per_second: str
    events_total: int
    reconnects_total: int
    relists_total: int
    lag: str
    last_error: str
    last_error_at: When | None
    candidates_api: str
    data_age: str
    problem: str
    # Works, but an engineer should know (TLS verification off); from the kubeconfig check.
    config_warning: str
    # Objects stored without their NUL characters or skipped because the database refused them.
    skipped_objects_total: int


def _cluster_problem(cluster: KubeCluster, stale: bool, now: datetime) -> str:
    """Why this cluster's data must not be taken as current, in words; "" when it is fresh."""
    if not cluster.enabled:
        return (
            f"Cluster {cluster.name} is disabled: its leases are not watched, so what is shown "
            "is as it was when watching stopped."
        )
    if not stale:
        return ""
    error = cluster.last_error or "no error was recorded"
    if cluster.last_flush_at is None:
        return f"No data from cluster {cluster.name} yet — its watcher has not connected: {error}"
    age = format_duration((now - cluster.last_flush_at).total_seconds())
    if not cluster.connected:
        return (
            f"Data from cluster {cluster.name} is {age} old — its watcher is not connected: {error}"
        )
    return (
        f"Data from cluster {cluster.name} is {age} old — its watcher is connected but has "
        f"written nothing since: {error}"
    )


def cluster_status(cluster: KubeCluster, now: datetime) -> ClusterStatus:
    stale = cluster.is_stale(now)
    return ClusterStatus(
        id=cluster.pk,
        name=cluster.name,
        enabled=cluster.enabled,
        source=cluster.get_source_display(),
        connected=cluster.connected,
        stale=stale,
        connected_since=when(cluster.connected_since, now),
        last_event=when(cluster.last_event_at, now),
        last_flush=when(cluster.last_flush_at, now),
        last_list=when(cluster.last_list_at, now),
        resource_version=cluster.resource_version,
        events_per_second=f"{cluster.events_per_second:.1f}",
        events_total=cluster.events_total,
        reconnects_total=cluster.reconnects_total,
        relists_total=cluster.relists_total,
        lag=f"{cluster.lag_seconds:.2f} s",
        last_error=cluster.last_error,
        last_error_at=when(cluster.last_error_at, now),
        candidates_api=cluster.candidates_api,
        data_age=(
            format_duration((now - cluster.last_flush_at).total_seconds())
            if cluster.last_flush_at
            else "no data yet"
        ),
        problem=_cluster_problem(cluster, stale, now),
        config_warning=cluster.config_warning,
        skipped_objects_total=cluster.skipped_objects_total,
    )


def cluster_statuses(now: datetime) -> list[ClusterStatus]:
    # The kubeconfig is a secret: it is never even read by the pages.
    clusters = KubeCluster.objects.defer("kubeconfig").order_by("name")
    return [cluster_status(cluster, now) for cluster in clusters]


# --- The Leases table ------------------------------------------------------------------------

TABLE_FIELDS = (
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
)


@dataclass(slots=True)
class LeaseRow:
    url: str
    cluster: str
    cluster_stale: bool
    namespace: str
    name: str
    class_label: str
    holder: str
    holder_title: str
    renewed_js: str
    renewed_text: str
    expires_js: str
    expires_text: str
    transitions: str
    state: str
    pill: str
    row_class: str
    flaps: int
    flapping: bool
    deleted: bool


@dataclass(slots=True)
class SortLink:
    param: str
    label: str
    url: str
    current: Literal["ascending", "descending", ""]


@dataclass(slots=True)
class LeaseTable:
    rows: list[LeaseRow]
    clusters: list[ClusterStatus]
    problems: list[ClusterStatus]
    sort_links: dict[str, SortLink]
    next_url: str | None
    previous_url: str | None
    first_url: str | None
    server_now: str
    flap_window: str = field(default=format_duration(FLAP_WINDOW.total_seconds()))


def _sort_links(filters: LeaseFilters, base: str) -> dict[str, SortLink]:
    links = {}
    for key in SORT_KEYS.values():
        if filters.sort_key is key:
            current: Literal["ascending", "descending", ""] = (
                "descending" if filters.descending else "ascending"
            )
            toggled = key.param if filters.descending else f"-{key.param}"
        else:
            current, toggled = "", key.param
        query = replace(filters, sort=toggled).query_string()
        links[key.param] = SortLink(key.param, key.label, f"{base}?{query}", current)
    return links


def build_lease_row(
    row: Mapping[str, Any],
    now: datetime,
    cluster_names: Mapping[int, str],
    stale_clusters: set[int],
    prefix: str,
) -> LeaseRow:
    """A table row from a TABLE_FIELDS dict that also has "flaps" (see recent_changes)."""
    holder: str = row["holder"]
    expires_at: datetime | None = row["expires_at"]
    renew_time: datetime | None = row["renew_time"]
    state = state_of(holder, expires_at, now)
    flap_count: int = row["flaps"]
    deleted = row["deleted_at"] is not None
    if state == LeaseState.EXPIRED:
        row_class = "row-bad"
    elif flap_count >= FLAP_THRESHOLD:
        row_class = "row-warn"
    elif state == LeaseState.RELEASED or deleted:
        row_class = "row-quiet"
    else:
        row_class = ""
    cluster = cluster_names.get(row["cluster_id"], "?")
    truncated = len(holder) > HOLDER_DISPLAY_CHARS
    return LeaseRow(
        url=lease_url(prefix, cluster, row["namespace"], row["name"]),
        cluster=cluster,
        cluster_stale=row["cluster_id"] in stale_clusters,
        namespace=row["namespace"],
        name=row["name"],
        class_label=CLASS_LABELS.get(row["lease_class"], row["lease_class"]),
        holder=shorten(holder, HOLDER_DISPLAY_CHARS),
        holder_title=shorten(holder, HOLDER_TITLE_CHARS) if truncated else "",
        renewed_js=iso_js(renew_time) if renew_time else "",
        renewed_text=relative_text((now - renew_time).total_seconds()) if renew_time else "never",
        # Countdowns only tick for held leases: a released lease's expiry means nothing.
        expires_js=iso_js(expires_at) if expires_at and state != LeaseState.RELEASED else "",
        expires_text=expiry_text(state, expires_at, now),
        transitions="" if row["lease_transitions"] is None else str(row["lease_transitions"]),
        state=state.value,
        pill=STATE_PILLS[state],
        row_class=row_class,
        flaps=flap_count,
        flapping=flap_count >= FLAP_THRESHOLD,
        deleted=deleted,
    )


def lease_table(
    filters: LeaseFilters,
    now: datetime,
    cursor: Cursor | None = None,
    limit: int = PAGE_SIZE,
    clusters: list[ClusterStatus] | None = None,
) -> LeaseTable:
    """One page of the Leases table with its sort and page links (filters kept)."""
    if clusters is None:
        clusters = cluster_statuses(now)
    cluster_ids = {cluster.name: cluster.id for cluster in clusters}
    leases = filter_leases(filters, now, cluster_ids).annotate(flaps=recent_changes(now))
    page = keyset_page(leases, filters, cursor, limit, (*TABLE_FIELDS, "flaps"))
    prefix = _leases_prefix()
    cluster_names = {cluster.id: cluster.name for cluster in clusters}
    # A disabled cluster's data is as old as a stale one's.
    stale = {cluster.id for cluster in clusters if cluster.stale or not cluster.enabled}
    rows = [build_lease_row(row, now, cluster_names, stale, prefix) for row in page.rows]
    return LeaseTable(
        rows=rows,
        clusters=clusters,
        problems=[cluster for cluster in clusters if cluster.problem],
        sort_links=_sort_links(filters, prefix),
        next_url=(
            f"{prefix}?{filters.query_string(after=page.next_cursor)}" if page.next_cursor else None
        ),
        previous_url=(
            f"{prefix}?{filters.query_string(before=page.previous_cursor)}"
            if page.previous_cursor
            else None
        ),
        first_url=f"{prefix}?{filters.query_string()}" if cursor is not None else None,
        server_now=iso_js(now),
    )


def namespaces() -> list[str]:
    """Namespaces that have leases, for the filter's suggestions (full page only)."""
    return list(
        Lease.objects.live().order_by("namespace").values_list("namespace", flat=True).distinct()
    )


# --- One lease -------------------------------------------------------------------------------


@dataclass(slots=True)
class HolderPeriod:
    holder: str
    start: When | None
    end: When | None
    duration: str
    current: bool
    # Holder changes that happened unseen just before this period began.
    missed_before: int


@dataclass(slots=True)
class CandidateRow:
    namespace: str
    name: str
    binary_version: str
    emulation_version: str
    strategy: str
    renewed: When | None
    pinged: When | None
    alive: bool


@dataclass(slots=True)
class LeaseDetail:
    lease: Lease
    cluster: ClusterStatus
    state: str
    pill: str
    class_label: str
    acquired: When | None
    renewed: When | None
    expires: When | None
    expires_text: str
    created: When | None
    observed: When | None
    deleted: When | None
    flaps: int
    flapping: bool
    timeline: list[HolderPeriod]
    older_changes: int
    missed_total: int
    candidates: list[CandidateRow]
    labels: list[tuple[str, str]]
    raw_json: str
    server_now: str
    list_url: str
    time_zone: str
    flap_window: str = format_duration(FLAP_WINDOW.total_seconds())


def _change_time(transition: LeaseTransition) -> datetime:
    # The new holder's acquireTime is when the change happened; observed_at can be much
    # later (a relist after a reconnect). A future acquireTime (a skewed client) is ignored.
    if transition.acquire_time is not None and transition.acquire_time <= transition.observed_at:
        return transition.acquire_time
    return transition.observed_at


def holder_timeline(
    lease: Lease, transitions: Sequence[LeaseTransition], truncated: bool, now: datetime
) -> list[HolderPeriod]:
    """Each holder, from when to when, oldest first, from the observed transitions."""
    end_of_current = lease.deleted_at
    periods: list[HolderPeriod] = []

    def add(holder: str, start: datetime | None, end: datetime | None, missed: int) -> None:
        current = end is None
        until = end or end_of_current or now
        periods.append(
            HolderPeriod(
                holder=holder,
                start=when(start, now),
                end=when(end, now),
                duration=(
                    format_duration((until - start).total_seconds()) if start is not None else ""
                ),
                current=current and end_of_current is None,
                missed_before=missed,
            )
        )

    if not transitions:
        add(lease.holder, lease.acquire_time, None, 0)
        return periods
    first = transitions[0]
    # Who held it before the first change seen; nothing to say when nobody did and the
    # history is complete (a lease created by its first holder).
    if first.from_holder or truncated:
        add(first.from_holder, None, _change_time(first), 0)
    for index, transition in enumerate(transitions):
        following = transitions[index + 1] if index + 1 < len(transitions) else None
        add(
            transition.to_holder,
            _change_time(transition),
            _change_time(following) if following else None,
            transition.missed,
        )
    if transitions[-1].to_holder != lease.holder:
        # The watcher's latest write disagrees with the last transition row (it was written
        # by an older version, or the change was coalesced away): trust the lease.
        periods[-1].current = False
        add(lease.holder, lease.acquire_time, None, 0)
    return periods


def lease_detail(cluster: str, namespace: str, name: str, now: datetime) -> LeaseDetail | None:
    lease = (
        Lease.objects.select_related("cluster")
        .defer("cluster__kubeconfig")
        .filter(cluster__name=cluster, namespace=namespace, name=name)
        .first()
    )
    if lease is None:
        return None
    newest = list(lease.transitions.order_by("-observed_at", "-id")[: TIMELINE_LIMIT + 1])
    truncated = len(newest) > TIMELINE_LIMIT
    transitions = list(reversed(newest[:TIMELINE_LIMIT]))
    totals = lease.transitions.aggregate(changes=Count("id"), missed=Sum("missed"))
    state = lease.state_at(now)
    flaps = flap_counts([lease.pk], now).get(lease.pk, 0)
    return LeaseDetail(
        lease=lease,
        cluster=cluster_status(lease.cluster, now),
        state=state.value,
        pill=STATE_PILLS[state],
        class_label=CLASS_LABELS.get(lease.lease_class, lease.lease_class),
        acquired=when(lease.acquire_time, now),
        renewed=when(lease.renew_time, now),
        expires=when(lease.expires_at, now),
        expires_text=expiry_text(state, lease.expires_at, now),
        created=when(lease.created_at, now),
        observed=when(lease.observed_at, now),
        deleted=when(lease.deleted_at, now),
        flaps=flaps,
        flapping=flaps >= FLAP_THRESHOLD,
        timeline=holder_timeline(lease, transitions, truncated, now),
        older_changes=totals["changes"] - len(transitions),
        missed_total=totals["missed"] or 0,
        candidates=lease_candidates(lease, now),
        labels=sorted((str(key), str(value)) for key, value in (lease.labels or {}).items()),
        raw_json=json.dumps(lease.raw, indent=2, sort_keys=True, ensure_ascii=False),
        server_now=iso_js(now),
        list_url=f"{_leases_prefix()}?{urlencode({'cluster': cluster, 'namespace': namespace})}",
        time_zone=settings.TIME_ZONE,
    )


def lease_candidates(lease: Lease, now: datetime) -> list[CandidateRow]:
    candidates = LeaseCandidate.objects.filter(
        cluster_id=lease.cluster_id,
        namespace=lease.namespace,
        lease_name=lease.name,
        deleted_at__isnull=True,
    ).order_by("name")
    return [
        CandidateRow(
            namespace=candidate.namespace,
            name=candidate.name,
            binary_version=candidate.binary_version,
            emulation_version=candidate.emulation_version,
            strategy=candidate.strategy,
            renewed=when(candidate.renew_time, now),
            pinged=when(candidate.ping_time, now),
            alive=candidate.renew_time is not None
            and now - candidate.renew_time <= CANDIDATE_ALIVE_WITHIN,
        )
        for candidate in candidates
    ]


# --- The overview ----------------------------------------------------------------------------


@dataclass(slots=True)
class LeaseLink:
    url: str
    namespace: str
    name: str
    holder: str
    detail: str
    expires_js: str = ""


@dataclass(slots=True)
class TransitionRow:
    url: str
    namespace: str
    name: str
    from_holder: str
    to_holder: str
    seen: When
    missed: int


@dataclass(slots=True)
class ClusterOverview:
    status: ClusterStatus
    held: int
    expired: int
    released: int
    expiring_soon: int
    nodes_expired: int
    expiring_soon_leases: list[LeaseLink]
    expired_nodes: list[LeaseLink]
    flapping: list[LeaseLink]
    transitions: list[TransitionRow]
    links: dict[str, str]


@dataclass(slots=True)
class LeasesOverview:
    clusters: list[ClusterOverview]
    problems: list[ClusterStatus]
    server_now: str
    expiring_within: str = format_duration(EXPIRING_SOON.total_seconds())
    flap_window: str = format_duration(FLAP_WINDOW.total_seconds())


def _expired(now: datetime) -> Q:
    return ~Q(holder="") & Q(expires_at__lte=now)


def state_counts_by_cluster(now: datetime) -> dict[int, dict[str, int]]:
    """Live leases per cluster by state, plus the two alarming subsets, in one query."""
    expired = _expired(now)
    rows = (
        Lease.objects.live()
        .values("cluster_id")
        .annotate(
            released=Count("id", filter=Q(holder="")),
            expired=Count("id", filter=expired),
            total=Count("id"),
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
        held = row["total"] - row["released"] - row["expired"]
        counts[row["cluster_id"]] = {**row, "held": held}
    return counts


def _lease_links(
    leases: Iterable[Mapping[str, Any]],
    prefix: str,
    cluster: str,
    detail: Mapping[int, str] | None = None,
    now: datetime | None = None,
) -> list[LeaseLink]:
    links = []
    for row in leases:
        expires_at = row.get("expires_at")
        text = detail.get(row["id"], "") if detail else ""
        if not text and now is not None and expires_at is not None:
            text = expiry_text(state_of(row["holder"], expires_at, now), expires_at, now)
        links.append(
            LeaseLink(
                url=lease_url(prefix, cluster, row["namespace"], row["name"]),
                namespace=row["namespace"],
                name=row["name"],
                holder=shorten(row["holder"], HOLDER_DISPLAY_CHARS),
                detail=text,
                expires_js=iso_js(expires_at) if expires_at and not detail else "",
            )
        )
    return links


def recent_transitions(cluster_id: int, cluster: str, now: datetime) -> list[TransitionRow]:
    prefix = _leases_prefix()
    transitions = (
        LeaseTransition.objects.filter(lease__cluster_id=cluster_id)
        .select_related("lease")
        .only(
            "from_holder",
            "to_holder",
            "observed_at",
            "missed",
            "lease__namespace",
            "lease__name",
        )
        .order_by("-observed_at", "-id")[:OVERVIEW_LIST_LIMIT]
    )
    rows = []
    for transition in transitions:
        seen = when(transition.observed_at, now)
        assert seen is not None  # observed_at is required
        rows.append(
            TransitionRow(
                url=lease_url(prefix, cluster, transition.lease.namespace, transition.lease.name),
                namespace=transition.lease.namespace,
                name=transition.lease.name,
                from_holder=shorten(transition.from_holder, HOLDER_DISPLAY_CHARS),
                to_holder=shorten(transition.to_holder, HOLDER_DISPLAY_CHARS),
                seen=seen,
                missed=transition.missed,
            )
        )
    return rows


def _overview_links(prefix: str, cluster: str) -> dict[str, str]:
    """Leases-page links that show the rows behind each number of a cluster's card."""

    def filtered(**params: str) -> str:
        return f"{prefix}?{urlencode({'cluster': cluster, **params})}"

    return {
        "all": filtered(),
        "held": filtered(state=LeaseState.HELD),
        "expired": filtered(state=LeaseState.EXPIRED),
        "released": filtered(state=LeaseState.RELEASED),
        "expiring": filtered(state=LeaseState.HELD, sort="expires"),
        "nodes_expired": filtered(state=LeaseState.EXPIRED, **{"class": LeaseClass.NODE_HEARTBEAT}),
        "flapping": filtered(flapping="true"),
    }


def leases_overview(now: datetime) -> LeasesOverview:
    """Per cluster: counts by state and what needs a look now. A few queries per cluster."""
    statuses = cluster_statuses(now)
    counts = state_counts_by_cluster(now)
    prefix = _leases_prefix()
    link_fields = ("id", "cluster_id", "namespace", "name", "holder", "expires_at")

    flap_rows = dict(
        LeaseTransition.objects.filter(
            observed_at__gt=now - FLAP_WINDOW, lease__deleted_at__isnull=True
        )
        .values("lease_id")
        .annotate(changes=Count("id"))
        .filter(changes__gte=FLAP_THRESHOLD)
        .order_by("-changes")
        .values_list("lease_id", "changes")[:OVERVIEW_FLAPPING_LIMIT]
    )
    flapping_by_cluster: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in Lease.objects.filter(pk__in=flap_rows).values(*link_fields):
        flapping_by_cluster[row["cluster_id"]].append(row)

    window = format_duration(FLAP_WINDOW.total_seconds())
    overviews = []
    for status in statuses:
        count = counts.get(status.id, {})
        expiring: list[LeaseLink] = []
        if count.get("expiring_soon"):
            soon = (
                Lease.objects.live()
                .filter(cluster_id=status.id, expires_at__gt=now)
                .filter(expires_at__lte=now + EXPIRING_SOON)
                .exclude(holder="")
                .order_by("expires_at")
                .values(*link_fields)[:OVERVIEW_LIST_LIMIT]
            )
            expiring = _lease_links(soon, prefix, status.name, now=now)
        nodes: list[LeaseLink] = []
        if count.get("nodes_expired"):
            expired_nodes = (
                Lease.objects.live()
                .filter(_expired(now), cluster_id=status.id)
                .filter(lease_class=LeaseClass.NODE_HEARTBEAT)
                .order_by("-expires_at")
                .values(*link_fields)[:OVERVIEW_LIST_LIMIT]
            )
            nodes = _lease_links(expired_nodes, prefix, status.name, now=now)
        flapping_rows = sorted(
            flapping_by_cluster.get(status.id, []), key=lambda row: -flap_rows[row["id"]]
        )
        flapping = _lease_links(
            flapping_rows,
            prefix,
            status.name,
            detail={
                row["id"]: f"{flap_rows[row['id']]} changes in {window}" for row in flapping_rows
            },
        )
        overviews.append(
            ClusterOverview(
                status=status,
                held=count.get("held", 0),
                expired=count.get("expired", 0),
                released=count.get("released", 0),
                expiring_soon=count.get("expiring_soon", 0),
                nodes_expired=count.get("nodes_expired", 0),
                expiring_soon_leases=expiring,
                expired_nodes=nodes,
                flapping=flapping,
                transitions=recent_transitions(status.id, status.name, now),
                links=_overview_links(prefix, status.name),
            )
        )
    return LeasesOverview(
        clusters=overviews,
        problems=[status for status in statuses if status.problem],
        server_now=iso_js(now),
    )


# --- API -------------------------------------------------------------------------------------

API_FIELDS = (
    "id",
    "cluster_id",
    "namespace",
    "name",
    "lease_class",
    "holder",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "lease_transitions",
    "deleted_at",
)


def api_lease(row: Mapping[str, Any], cluster: str, now: datetime) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "namespace": row["namespace"],
        "name": row["name"],
        "class": row["lease_class"],
        "holder": row["holder"],
        "acquire_time": api_time(row["acquire_time"]),
        "renew_time": api_time(row["renew_time"]),
        "lease_duration_seconds": row["lease_duration_seconds"],
        "expires_at": api_time(row["expires_at"]),
        "state": state_of(row["holder"], row["expires_at"], now).value,
        "transitions": row["lease_transitions"],
        "deleted": row["deleted_at"] is not None,
    }


def api_lease_page(
    filters: LeaseFilters, now: datetime, cursor: Cursor | None, limit: int = API_PAGE_SIZE
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of leases as API dicts and the cursor of the next page (None: last page)."""
    names = dict(KubeCluster.objects.values_list("id", "name"))
    leases = filter_leases(filters, now, {name: pk for pk, name in names.items()})
    page = keyset_page(leases, filters, cursor, limit, API_FIELDS)
    results = [api_lease(row, names[row["cluster_id"]], now) for row in page.rows]
    return results, page.next_cursor


def api_lease_detail(
    cluster: str, namespace: str, name: str, now: datetime
) -> tuple[dict[str, Any], bool] | None:
    """The lease, its newest API_HISTORY_LIMIT holder changes (oldest first), candidates.

    The second value says whether older history was left out.
    """
    row = (
        Lease.objects.filter(cluster__name=cluster, namespace=namespace, name=name)
        .values(*API_FIELDS)
        .first()
    )
    if row is None:
        return None
    body = api_lease(row, cluster, now)
    newest = list(
        LeaseTransition.objects.filter(lease_id=row["id"])
        .order_by("-observed_at", "-id")
        .values("from_holder", "to_holder", "observed_at", "lease_transitions", "missed")[
            : API_HISTORY_LIMIT + 1
        ]
    )
    truncated = len(newest) > API_HISTORY_LIMIT
    body["history"] = [
        {
            "from_holder": change["from_holder"],
            "to_holder": change["to_holder"],
            "observed_at": api_time(change["observed_at"]),
            "lease_transitions": change["lease_transitions"],
            "missed": change["missed"],
        }
        for change in reversed(newest[:API_HISTORY_LIMIT])
    ]
    body["candidates"] = [
        {
            "name": candidate["name"],
            "binary_version": candidate["binary_version"],
            "emulation_version": candidate["emulation_version"],
            "strategy": candidate["strategy"],
            "renew_time": api_time(candidate["renew_time"]),
            "ping_time": api_time(candidate["ping_time"]),
        }
        for candidate in LeaseCandidate.objects.filter(
            cluster_id=row["cluster_id"],
            namespace=namespace,
            lease_name=name,
            deleted_at__isnull=True,
        )
        .order_by("name")
        .values(
            "name", "binary_version", "emulation_version", "strategy", "renew_time", "ping_time"
        )
    ]
    return body, truncated


# --- Metrics ---------------------------------------------------------------------------------


@dataclass(slots=True)
class WatchMetrics:
    cluster: str
    events_total: int
    reconnects_total: int
    relists_total: int
    lag_seconds: float
    connected: bool
    stale: bool
    last_event_age_seconds: float | None


def watch_metrics(now: datetime) -> list[WatchMetrics]:
    clusters = KubeCluster.objects.defer("kubeconfig").order_by("name")
    return [
        WatchMetrics(
            cluster=cluster.name,
            events_total=cluster.events_total,
            reconnects_total=cluster.reconnects_total,
            relists_total=cluster.relists_total,
            lag_seconds=cluster.lag_seconds,
            connected=cluster.connected,
            stale=cluster.is_stale(now),
            last_event_age_seconds=(
                (now - cluster.last_event_at).total_seconds() if cluster.last_event_at else None
            ),
        )
        for cluster in clusters
    ]


def lease_counts(now: datetime) -> dict[tuple[str, str, str], int]:
    """(cluster, class, state) -> number of live leases, zero-filled so series never vanish."""
    names = dict(KubeCluster.objects.values_list("id", "name"))
    expired = _expired(now)
    rows = (
        Lease.objects.live()
        .values("cluster_id", "lease_class")
        .annotate(
            total=Count("id"),
            released=Count("id", filter=Q(holder="")),
            expired=Count("id", filter=expired),
        )
        .order_by()
    )
    counts = {
        (cluster, lease_class, state): 0
        for cluster in names.values()
        for lease_class in LeaseClass.values
        for state in LeaseState.values
    }
    for row in rows:
        cluster = names.get(row["cluster_id"])
        if cluster is None:
            continue
        key = (cluster, row["lease_class"])
        counts[(*key, LeaseState.RELEASED.value)] = row["released"]
        counts[(*key, LeaseState.EXPIRED.value)] = row["expired"]
        counts[(*key, LeaseState.HELD.value)] = row["total"] - row["released"] - row["expired"]
    return counts


@dataclass(slots=True)
class LeaseMetric:
    cluster: str
    namespace: str
    name: str
    seconds_until_expiry: float | None
    transitions: int | None


def per_lease_metrics(now: datetime) -> list[LeaseMetric]:
    """Leader-election and control-plane leases only: a bounded number of series."""
    names = dict(KubeCluster.objects.values_list("id", "name"))
    rows = (
        Lease.objects.live()
        .filter(lease_class__in=PER_LEASE_METRIC_CLASSES)
        .order_by("cluster_id", "namespace", "name")
        .values_list("cluster_id", "namespace", "name", "holder", "expires_at", "lease_transitions")
    )
    return [
        LeaseMetric(
            cluster=names.get(cluster_id, "?"),
            namespace=namespace,
            name=name,
            # A released lease has no meaningful expiry.
            seconds_until_expiry=(
                (expires_at - now).total_seconds() if holder and expires_at else None
            ),
            transitions=transitions,
        )
        for cluster_id, namespace, name, holder, expires_at, transitions in rows
    ]
