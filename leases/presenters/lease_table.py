"""The Leases table: one page of rows with their sort and page links (filters kept).

The region is fetched every few seconds by every open browser, so rows carry ready strings
(times already relative, holders already shortened) and the template only prints them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache, lru_cache
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from django.db import connection
from django.utils.translation import get_language, gettext, ngettext

from dashboard.flapping import FlapPolicy, flap_policy, policy_query
from dashboard.links import lease_url
from dashboard.timefmt import TimeWords, format_duration, iso_js, time_words
from leases.cursors import SORT_KEYS, Cursor
from leases.models import LeaseState, lease_state
from leases.presenters.display import (
    CLASS_LABELS,
    HOLDER_DISPLAY_CHARS,
    HOLDER_TITLE_CHARS,
    leases_prefix,
    shorten,
)
from leases.presenters.watchers import (
    ClusterStatus,
    cluster_status,
    cluster_statuses,
    clusters_from_rows,
    watched_clusters_sql,
)
from leases.queries import (
    EXPIRING_SOON,
    EXPIRING_SOON_PARTS,
    FENCING_ANOMALY_WINDOW,
    TABLE_COLUMNS,
    LeaseFilters,
    ProblemBounds,
    table_page,
)

PAGE_SIZE = 100
DURATION = TABLE_COLUMNS.index("lease_duration_seconds")
# Plain text: the template escapes a `str` on a fast path that an enum member misses.
STATE_TEXT: dict[LeaseState, str] = {state: state.value for state in LeaseState}


class LeaseRow(NamedTuple):
    """One row, in the order of its cells: the template unpacks it in its `for`, so that
    every cell is a local name rather than a lookup call (a third of the render)."""

    row_class: str
    state: str
    cluster: str
    cluster_stale: bool
    namespace: str
    url: str
    name: str
    class_label: str
    # The holder in human terms (leader-k8s: its node id), shortened; the title has the raw
    # holderIdentity when it differs or was cut.
    holder: str
    holder_title: str
    # leader-k8s's fencing token, shown muted beside its identity ("" for other libraries).
    token: str
    # A leader-k8s lease whose holder is no token of leader-k8s: written by something else.
    foreign_writer: bool
    renewed_js: str
    renewed_text: str
    expires_js: str
    expires_text: str
    flaps: int
    flapping: bool
    # The flapping pill's tooltip ("" unless flapping), in the reader's language.
    flap_title: str
    # How long ago a fencing token came back ("" unless within FENCING_ANOMALY_WINDOW).
    fencing_reused: str
    expiring_soon: bool
    deleted: bool
    transitions: str


@dataclass(frozen=True, slots=True)
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
    sort_links: Mapping[str, SortLink]
    next_url: str | None
    previous_url: str | None
    first_url: str | None
    server_now: str
    flap_window: str
    flap_changes: int
    problems_legend: str
    # "0 s ago", in the reader's language, until the browser's clock takes over.
    updated_text: str


# The same few filter combinations are refreshed over and over; their links never change.
@lru_cache(maxsize=256)
def _sort_links(filters: LeaseFilters, base: str) -> Mapping[str, SortLink]:
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
    return MappingProxyType(links)


def build_lease_row(
    row: tuple[Any, ...],
    bounds: ProblemBounds,
    cluster_names: Mapping[int, str],
    stale_clusters: set[int],
    prefix: str,
    policy: FlapPolicy,
    words: RowWords | None = None,
    as_of: Mapping[int, datetime | None] | None = None,
) -> LeaseRow:
    """A table row from a `table_page` row: TABLE_COLUMNS, then recent holder changes,
    judged at `bounds.now` by its cluster's data as-of moment (`as_of`, by cluster id; a
    cluster missing from it has no data that judges anything). `words`: the texts every row
    shares, in the active language (looked up once per table, not once per row)."""
    if words is None:
        words = row_words(policy)
    (
        _,
        cluster_id,
        namespace,
        name,
        lease_class,
        holder,
        renew_time,
        expires_at,
        transitions,
        deleted_at,
        duration,
        identity,
        token,
        foreign_writer,
        fencing_reused_at,
        flap_count,
    ) = row
    now, time = bounds.now, words.time
    state = lease_state(holder, expires_at, now, as_of.get(cluster_id) if as_of else None)
    flapping = policy.is_flapping(flap_count)
    deleted = deleted_at is not None
    # The problems of `Problem` as `fencing_anomaly` and `expiring_soon` judge them (and
    # problem_rank_sql): a deleted lease has none.
    fencing = (
        fencing_reused_at is not None and not deleted and fencing_reused_at > bounds.fencing_since
    )
    soon = (
        state is LeaseState.HELD
        and expires_at is not None
        and not deleted
        and (
            expires_at <= bounds.soon_floor
            or (bool(duration) and expires_at < bounds.share_ends[duration])
        )
    )
    # `is`: enum members are singletons, and a hundred rows make the cheaper test count.
    if state is LeaseState.EXPIRED or fencing:
        row_class = "row-bad"
    elif flapping:
        row_class = "row-warn"
    elif state is LeaseState.RELEASED or deleted:
        row_class = "row-quiet"
    else:
        row_class = ""
    cluster = cluster_names.get(cluster_id, "?")
    if token and not foreign_writer and identity != token:
        shown, title, token_shown = _leader_k8s_cells(holder, identity, token)
    elif len(holder) > HOLDER_DISPLAY_CHARS:
        shown, title, token_shown = (
            shorten(holder, HOLDER_DISPLAY_CHARS),
            shorten(holder, HOLDER_TITLE_CHARS),
            "",
        )
    else:
        shown, title, token_shown = holder, "", ""
    return LeaseRow(
        row_class,
        STATE_TEXT[state],
        cluster,
        cluster_id in stale_clusters,
        namespace,
        lease_url(prefix, cluster, namespace, name),
        name,
        words.class_labels.get(lease_class, lease_class),
        shown,
        title,
        token_shown,
        foreign_writer,
        iso_js(renew_time) if renew_time else "",
        time.relative((now - renew_time).total_seconds()) if renew_time else words.never,
        # Countdowns only tick for held leases: a released lease's expiry means nothing.
        iso_js(expires_at) if expires_at and state is not LeaseState.RELEASED else "",
        # A released lease has no holder left to expire.
        (
            words.not_confirmed % {"ago": time.duration((now - expires_at).total_seconds())}
            if state is LeaseState.UNKNOWN and expires_at is not None and expires_at <= now
            else time.countdown(None if state is LeaseState.RELEASED else expires_at, now)
        ),
        flap_count,
        flapping,
        # Only flapping rows, a handful, pay for the plural.
        words.flap_title(flap_count) if flapping else "",
        time.relative((now - fencing_reused_at).total_seconds()) if fencing else "",
        soon,
        deleted,
        "" if transitions is None else str(transitions),
    )


def _leader_k8s_cells(holder: str, identity: str, token: str) -> tuple[str, str, str]:
    """The holder cell of a lease leader-k8s holds: its text, its title, the token beside it.

    Only leader-k8s writes a token (Lease.token), a fresh random one at every acquisition:
    the cell names the node behind it (its identity), the token muted beside it, the raw
    holder in the title. A foreign writer's holder is shown as written instead: the
    annotations that would name a node were written by leader-k8s, not by whoever holds
    the lease now.
    """
    return shorten(identity, HOLDER_DISPLAY_CHARS), shorten(holder, HOLDER_TITLE_CHARS), token


def _clusters_and_policy(now: datetime) -> tuple[list[ClusterStatus], FlapPolicy]:
    """The watchers' status line and the flapping policy in force, in one statement: the
    clusters as the Clusters page reads them, each row with the admin's flapping values
    beside it, read afresh on every refresh (the table's first round trip, not its third)."""
    statement = _clusters_and_policy_sql()
    if statement is None:
        return cluster_statuses(now), flap_policy()
    with connection.cursor() as cursor:
        cursor.execute(*statement)
        rows = cursor.fetchall()
    if not rows:
        return [], flap_policy()  # no cluster row to carry the values: ask on their own
    # The statement's last two columns: the rule's threshold and window.
    policy = FlapPolicy.configured(*rows[0][-2:])
    return [cluster_status(cluster, now) for cluster in clusters_from_rows(rows)], policy


@cache
def _clusters_and_policy_sql() -> tuple[str, tuple[object, ...]] | None:
    # The provider's statement, compiled once like the clusters': only its names and its
    # one parameter (the rule's name) are in it. Joined on nothing: at most one row.
    query = policy_query()
    if query is None:
        return None
    policy_sql, params = query
    quote = connection.ops.quote_name
    sql = (
        f"SELECT clusters.*, policy.{quote('threshold')} AS flap_changes, "  # noqa: S608
        f"policy.{quote('window_seconds')} AS flap_window_seconds "
        f"FROM ({watched_clusters_sql()}) AS clusters LEFT JOIN ({policy_sql}) AS policy "
        f"ON 1 = 1 ORDER BY clusters.{quote('name')}"
    )
    return sql, params


def lease_table(
    filters: LeaseFilters,
    now: datetime,
    cursor: Cursor | None = None,
    limit: int = PAGE_SIZE,
    clusters: list[ClusterStatus] | None = None,
) -> LeaseTable:
    """One page of the Leases table with its sort and page links (filters kept)."""
    # Asked once: the filter, the counts and the rows judge flapping by the same policy.
    if clusters is None:
        clusters, policy = _clusters_and_policy(now)
    else:
        policy = flap_policy()
    cluster_ids = {cluster.name: cluster.id for cluster in clusters}
    page = table_page(filters, now, cluster_ids, policy, cursor, limit)
    prefix = leases_prefix()
    cluster_names = {cluster.id: cluster.name for cluster in clusters}
    # A disabled cluster's data is as old as a stale one's.
    stale = {cluster.id for cluster in clusters if cluster.stale or not cluster.enabled}
    bounds = ProblemBounds.at(now, (row[DURATION] for row in page.rows))
    words = row_words(policy)
    as_of = {cluster.id: cluster.as_of for cluster in clusters}
    rows = [
        build_lease_row(row, bounds, cluster_names, stale, prefix, policy, words, as_of)
        for row in page.rows
    ]
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
        flap_window=format_duration(policy.window.total_seconds()),
        flap_changes=policy.changes,
        problems_legend=problems_legend(get_language()),
        updated_text=words.time.relative(0),
    )


@dataclass(frozen=True, slots=True)
class RowWords:
    """What every row of one table says alike, in the language active when it was made."""

    class_labels: Mapping[str, str]
    never: str
    # An expiry past the data's as-of moment: "not known: due %(ago)s ago, …".
    not_confirmed: str
    flap_window: str
    time: TimeWords

    def flap_title(self, changes: int) -> str:
        return ngettext(
            "%(changes)d holder change in the last %(window)s",
            "%(changes)d holder changes in the last %(window)s",
            changes,
        ) % {"changes": changes, "window": self.flap_window}


def row_words(policy: FlapPolicy) -> RowWords:
    return RowWords(
        # The labels are lazy: resolved here once, not once per row.
        class_labels={value: str(label) for value, label in CLASS_LABELS.items()},
        never=gettext("never"),
        not_confirmed=gettext("not known: due %(ago)s ago, after the data's last confirmed moment"),
        flap_window=format_duration(policy.window.total_seconds()),
        time=time_words(),
    )


@lru_cache(maxsize=8)
def problems_legend(language: str | None) -> str:
    """What problems first means, in the words of `Problem` and its thresholds; per
    language, since a table is drawn every few seconds and the legend never changes."""
    return gettext(
        "expired, then a fencing token reused in the last %(fencing)s, flapping, expiring "
        "soon (within %(soon)s or the last 1/%(parts)s of its duration), then the rest; by "
        "name within each. Deleted leases are never problems"
    ) % {
        "fencing": format_duration(FENCING_ANOMALY_WINDOW.total_seconds()),
        "soon": format_duration(EXPIRING_SOON.total_seconds()),
        "parts": EXPIRING_SOON_PARTS,
    }
