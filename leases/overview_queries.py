"""The overview's reads of many leases, bounded: counts are aggregates, lists are pages.

Each lease's state is judged by its own cluster's lease data as-of moment, as
`leases.lease_states` judges it, but here the moment is read by joining the cluster row
(`cluster__leases_as_of`) rather than written into the query as one `OR` term per cluster:
the database compares each lease once, not once per cluster, and a fleet of 50 clusters
costs what one does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    Aggregate,
    BooleanField,
    Case,
    Count,
    DateTimeField,
    Exists,
    F,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Least, RowNumber

from leases.availability import ELECTION_CLASSES
from leases.freshness import stale_after
from leases.models import (
    EXPIRING_SOON,
    KubeCluster,
    Lease,
    LeaseClass,
    LeaseDeadline,
    LeaseHolderSpan,
    LeaseTransition,
)


def _judged_until(now: datetime) -> Least:
    # A lease is expired only when its expiry is before its cluster's as-of moment (and now).
    return Least(Value(now, output_field=DateTimeField()), F("cluster__leases_as_of"))


def _current_cluster(now: datetime) -> Any:
    """The lease's own cluster (`OuterRef("cluster_id")`) if it is enabled and its lease
    data is current at `now` (`leases.freshness.is_current`)."""
    return KubeCluster.objects.filter(
        pk=OuterRef("cluster_id"), enabled=True, leases_as_of__gte=now - stale_after()
    )


def expired_due(now: datetime) -> Q:
    """Held by someone, expired before its cluster's as-of moment (and now), in a current
    cluster (`leases.lease_states.expired_condition`), for a query of the scheduled leases
    (`due_by_schedule`), with the cluster's as-of moment (NULL unless current) looked up
    per lease by primary key. Joined instead, the planner puts the clusters outside (its
    statistics of a column every flush moves say few are current) and reads the scheduled
    leases once per cluster: 64,000 buffers for 1,000 expired leases of 20 clusters."""
    as_of = Subquery(_current_cluster(now).values("leases_as_of")[:1])
    return ~Q(holder="") & Q(expires_at__lte=Least(Value(now, output_field=DateTimeField()), as_of))


def expiring_soon_due(now: datetime, within: timedelta) -> Q:
    """Held, in a current cluster, and expiring in (now, now + within], for a query of the
    scheduled leases, as `expired_due`."""
    return (
        ~Q(holder="")
        & Q(expires_at__gt=now, expires_at__lte=now + within)
        & Q(Exists(_current_cluster(now)))
    )


@dataclass(slots=True)
class StateCounts:
    """Live leases of one (cluster, class) group by state at a moment (the rule of
    `leases.models.lease_state`), the two alarming subsets, and any extra aggregates."""

    total: int
    held: int
    released: int
    expired: int
    # Expired by the clock but after the cluster's as-of moment, or in a cluster whose data
    # is not current: nothing known says what they are now.
    unknown: int
    expiring_soon: int
    nodes_expired: int
    current: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, int]:
        return {
            "total": self.total,
            "held": self.held,
            "released": self.released,
            "expired": self.expired,
            "unknown": self.unknown,
            "expiring_soon": self.expiring_soon,
            "nodes_expired": self.nodes_expired,
        }


def lease_state_counts(
    now: datetime,
    within: timedelta,
    *,
    by_class: bool = False,
    extra: Mapping[str, Aggregate] | None = None,
) -> dict[tuple[int, str], StateCounts]:
    """Every live lease counted by state at `now`, per cluster (and per lease class with
    `by_class`; the key's class is "" without it), however many clusters. Without `extra`
    (and `within` at most EXPIRING_SOON) only the leases the expiry schedule says are due
    and the released ones are read, beside an index-only count of the live ones
    (`_counts_from_schedule`); otherwise one GROUP BY over every live lease.
    `expiring_soon`: held, expiring in (now, now + within];
    `nodes_expired`: expired node heartbeats. `extra`: more aggregates over the same rows
    (e.g. renewal ages), returned as they are in `StateCounts.extra`; they may read the
    cluster's as-of moment as `F("cluster__leases_as_of")`.

    Each lease is judged by its own cluster's as-of moment, joined (`cluster__leases_as_of`);
    whether the cluster's data is current at all (enabled, as-of within WATCH_STALE_SECONDS)
    is decided here from the same row: when it is not, every lease is unknown and the
    alarming subsets are 0. This is the one place the rule is written as a grouped count:
    the overview and the Leases page read it per cluster, /metrics can read it per class
    with its renewal-age aggregates as `extra`.
    """
    extra = dict(extra or {})
    if not extra and within <= EXPIRING_SOON:
        return _counts_from_schedule(now, within, by_class)
    return _counts_of_every_lease(now, within, by_class, extra)


def _counts_of_every_lease(
    now: datetime, within: timedelta, by_class: bool, extra: dict[str, Aggregate]
) -> dict[tuple[int, str], StateCounts]:
    """`lease_state_counts` as one GROUP BY over every live lease (for `extra` aggregates,
    which need every row, or a `within` longer than the expiry schedule looks ahead)."""
    held = ~Q(holder="")
    judged = _judged_until(now)
    aggregates: dict[str, Aggregate] = {
        "total": Count("id"),
        "released": Count("id", filter=Q(holder="")),
        "expired": Count("id", filter=held & Q(expires_at__lte=judged)),
        # Expired by the clock but after the as-of moment: nothing known says so yet.
        "late": Count(
            "id",
            filter=held & Q(expires_at__lte=now) & Q(expires_at__gt=F("cluster__leases_as_of")),
        ),
        "expiring_soon": Count(
            "id", filter=held & Q(expires_at__gt=now, expires_at__lte=now + within)
        ),
        "nodes_expired": Count(
            "id",
            filter=held & Q(expires_at__lte=judged) & Q(lease_class=LeaseClass.NODE_HEARTBEAT),
        ),
    }
    clash = set(extra) & set(aggregates)
    if clash:
        raise ValueError(f"extra aggregates reuse the names {sorted(clash)}")
    groups = ["cluster_id", "cluster__enabled", "cluster__leases_as_of"]
    if by_class:
        groups.append("lease_class")
    rows = Lease.objects.live().values(*groups).annotate(**aggregates, **extra).order_by()
    oldest_current = now - stale_after()
    counts: dict[tuple[int, str], StateCounts] = {}
    for row in rows:
        as_of = row["cluster__leases_as_of"]
        current = bool(row["cluster__enabled"]) and as_of is not None and as_of >= oldest_current
        total = row["total"]
        key = (row["cluster_id"], row["lease_class"] if by_class else "")
        values = {name: row[name] for name in extra}
        if not current:
            counts[key] = StateCounts(total, 0, 0, 0, total, 0, 0, False, values)
            continue
        unknown = row["late"]
        counts[key] = StateCounts(
            total=total,
            held=total - row["released"] - row["expired"] - unknown,
            released=row["released"],
            expired=row["expired"],
            unknown=unknown,
            expiring_soon=row["expiring_soon"],
            nodes_expired=row["nodes_expired"],
            current=True,
            extra=values,
        )
    return counts


def _counts_from_schedule(
    now: datetime, within: timedelta, by_class: bool
) -> dict[tuple[int, str], StateCounts]:
    """`lease_state_counts` without reading the held leases: every lease that is expired,
    expired after its cluster's as-of moment, or expiring within EXPIRING_SOON has come due
    by its expiry schedule (`due_by_schedule`, LeaseDeadline.soon_at <= now), released
    leases are few and have an index of their own, and the live leases per group are an
    index-only count (lease_live_class): held = total - released - expired - unknown.
    What is read beyond that count grows with the problems, not with the healthy leases."""
    groups = ["cluster_id", "lease_class"] if by_class else ["cluster_id"]

    def key(row: Mapping[str, Any]) -> tuple[int, str]:
        return (row["cluster_id"], row["lease_class"] if by_class else "")

    live = Lease.objects.live()
    # COUNT(*), not COUNT(id): the partial indexes answer it without the table's rows.
    totals = {key(row): row["n"] for row in live.values(*groups).annotate(n=Count("*")).order_by()}
    if not totals:
        return {}
    released = {
        key(row): row["n"]
        for row in live.filter(holder="").values(*groups).annotate(n=Count("*")).order_by()
    }
    oldest_current = now - stale_after()
    # The as-of moment of each current cluster, read once and written into the query of the
    # due leases: a lookup per lease and condition would cost 10,000 buffers for 1,000 due
    # leases; joined, the planner would read them once per cluster (`expired_due`).
    current = {
        row["id"]: row["leases_as_of"]
        for row in KubeCluster.objects.filter(
            pk__in={cluster for cluster, _ in totals},
            enabled=True,
            leases_as_of__gte=oldest_current,
        ).values("id", "leases_as_of")
    }
    problems: dict[tuple[int, str], Mapping[str, int]] = {}
    if current:
        as_of = Case(
            *(When(cluster_id=cluster, then=Value(moment)) for cluster, moment in current.items()),
            output_field=DateTimeField(),
        )
        judged = Least(Value(now, output_field=DateTimeField()), as_of)
        due = (
            # No condition on the cluster: with one, the planner may read the cluster's
            # every lease by its index. Groups of clusters not current are ignored below.
            live.filter(due_by_schedule(now))
            .exclude(holder="")
            .values(*groups)
            .annotate(
                expired=Count("id", filter=Q(expires_at__lte=judged)),
                late=Count("id", filter=Q(expires_at__lte=now) & Q(expires_at__gt=as_of)),
                expiring_soon=Count(
                    "id", filter=Q(expires_at__gt=now, expires_at__lte=now + within)
                ),
                nodes_expired=Count(
                    "id",
                    filter=Q(expires_at__lte=judged) & Q(lease_class=LeaseClass.NODE_HEARTBEAT),
                ),
            )
            .order_by()
        )
        problems = {key(row): row for row in due}
    counts: dict[tuple[int, str], StateCounts] = {}
    for group, total in totals.items():
        if group[0] not in current:
            counts[group] = StateCounts(total, 0, 0, 0, total, 0, 0, False)
            continue
        found = problems.get(group, {})
        free = released.get(group, 0)
        expired, unknown = found.get("expired", 0), found.get("late", 0)
        counts[group] = StateCounts(
            total=total,
            held=total - free - expired - unknown,
            released=free,
            expired=expired,
            unknown=unknown,
            expiring_soon=found.get("expiring_soon", 0),
            nodes_expired=found.get("nodes_expired", 0),
            current=True,
        )
    return counts


def counts_by_cluster(now: datetime, within: timedelta) -> dict[int, dict[str, int]]:
    """`lease_state_counts` per cluster, as plain dicts: `total`, `held`, `released`,
    `expired`, `unknown`, `expiring_soon`, `nodes_expired`."""
    return {
        cluster_id: found.as_dict()
        for (cluster_id, _), found in lease_state_counts(now, within).items()
    }


def due_by_schedule(now: datetime) -> RawSQL:
    """The lease's expiry schedule has come by `now` (LeaseDeadline.soon_at <= now): every
    held lease that is expiring soon or expired is one of them, a renewing one is not. A
    condition for a query of the lease table; what it reads grows with the problems, not
    with the leases.

    On PostgreSQL the ids are an array read first, in index order: every renewal moves
    `soon_at` forward, so between two ANALYZEs its statistics say every row is due, and a
    join (or `IN`) would be planned as a hash join against a scan of every lease. An
    array of unknown length is planned as a few lookups by primary key, which it is.
    """
    quote = connection.ops.quote_name
    lease_id = f"{quote(Lease._meta.db_table)}.{quote('id')}"
    deadline = quote(LeaseDeadline._meta.db_table)
    due = (
        f"SELECT {quote('lease_id')} FROM {deadline} "  # noqa: S608 (names only)
        f"WHERE {quote('soon_at')} <= %s ORDER BY {quote('soon_at')}"
    )
    if connection.vendor == "postgresql":
        sql = f"{lease_id} = ANY(ARRAY({due}))"
    else:
        sql = f"{lease_id} IN ({due})"
    # Names and placeholders only: the moment is a parameter.
    moment = connection.ops.adapt_datetimefield_value(now)
    return RawSQL(sql, [moment], output_field=BooleanField())  # noqa: S611


def soon_and_expired_nodes(
    now: datetime,
    within: timedelta,
    soon_clusters: Iterable[int],
    nodes_clusters: Iterable[int],
    limit: int,
    fields: Iterable[str],
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, list[dict[str, Any]]]]:
    """Per cluster, the first `limit` leases expiring soon (soonest first) and expired node
    heartbeats (newest expiry first), in one query: one read of the leases, however many
    clusters. A window function numbers each (cluster, list) part; only the pages come back."""
    soon_ids, nodes_ids = set(soon_clusters), set(nodes_clusters)
    if not soon_ids and not nodes_ids:
        return {}, {}
    soon = expiring_soon_due(now, within) & Q(cluster_id__in=soon_ids)
    nodes = expired_due(now) & Q(lease_class=LeaseClass.NODE_HEARTBEAT, cluster_id__in=nodes_ids)
    is_soon = Case(When(soon, then=Value(True)), default=Value(False))
    fields = [field for field in fields if field != "cluster_id"]
    rows = (
        Lease.objects.live()
        .filter(due_by_schedule(now))
        .filter(soon | nodes)
        .annotate(
            soon=is_soon,
            place=Window(
                RowNumber(),
                partition_by=[F("cluster_id"), is_soon],
                # Soonest first in the one part, newest expiry first in the other (its first
                # key is NULL throughout).
                order_by=[
                    Case(When(soon, then=F("expires_at"))).asc(),
                    F("expires_at").desc(),
                    F("id").asc(),
                ],
            ),
        )
        .filter(place__lte=limit)
        .order_by("cluster_id", "place")
        .values("cluster_id", "soon", *fields)
    )
    found_soon: dict[int, list[dict[str, Any]]] = {}
    found_nodes: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        (found_soon if row.pop("soon") else found_nodes).setdefault(row["cluster_id"], []).append(
            row
        )
    return found_soon, found_nodes


# The last holder changes are read first among this many newest changes of the fleet per
# row the cards show: the newest are where every busy cluster's last changes are.
RECENT_TRANSITIONS_READ = 5


def recent_transitions(cluster_ids: Iterable[int], limit: int) -> dict[int, list[LeaseTransition]]:
    """Per cluster, its last `limit` holder changes (newest first), with their leases'
    namespace and name: a window function numbers each cluster's changes and only the
    pages come back.

    Read first among the fleet's newest `RECENT_TRANSITIONS_READ` changes per row shown
    (by the observed_at index): what it reads does not grow with the fleet's history. A
    cluster with fewer changes than `limit` among them (a quiet one, or one with fewer
    changes in all, when the fleet has more than were read) is read again among all
    changes, those clusters only."""
    ids = list(cluster_ids)
    if not ids or limit <= 0:
        return {}
    newest = RECENT_TRANSITIONS_READ * limit * len(ids)
    found = _transition_pages(ids, limit, Q(_newest_transitions(newest)))
    # When the fleet has fewer changes than were read, every change was among them. Asked
    # every time (one index probe), so that a page reads as many queries whatever it shows.
    more = LeaseTransition.objects.order_by("-observed_at", "-id").values_list("id", flat=True)
    short = [cluster for cluster in ids if len(found.get(cluster, [])) < limit]
    if list(more[newest - 1 : newest]) and short:
        found.update(_transition_pages(short, limit, Q()))
    return found


def _newest_transitions(number: int) -> RawSQL:
    """The transition is one of the fleet's `number` newest (by the observed_at index). On
    PostgreSQL an array read first, as in `due_by_schedule`: as `IN`, it was planned as a
    hash join against a scan of every transition."""
    quote = connection.ops.quote_name
    table = quote(LeaseTransition._meta.db_table)
    newest = (
        f"SELECT {quote('id')} FROM {table} "  # noqa: S608 (names only)
        f"ORDER BY {quote('observed_at')} DESC, {quote('id')} DESC LIMIT %s"
    )
    column = f"{table}.{quote('id')}"
    if connection.vendor == "postgresql":
        sql = f"{column} = ANY(ARRAY({newest}))"
    else:
        sql = f"{column} IN ({newest})"
    return RawSQL(sql, [number], output_field=BooleanField())  # noqa: S611


def _transition_pages(ids: list[int], limit: int, among: Q) -> dict[int, list[LeaseTransition]]:
    rows = (
        LeaseTransition.objects.filter(among, lease__cluster_id__in=ids)
        .select_related("lease")
        .only(
            "from_holder",
            "to_holder",
            "from_identity",
            "to_identity",
            "fencing_reused",
            "observed_at",
            "missed",
            "lease__cluster_id",
            "lease__namespace",
            "lease__name",
        )
        .annotate(
            place=Window(
                RowNumber(),
                partition_by=[F("lease__cluster_id")],
                order_by=[F("observed_at").desc(), F("id").desc()],
            )
        )
        .filter(place__lte=limit)
        .order_by("lease__cluster_id", "place")
    )
    found: dict[int, list[LeaseTransition]] = {}
    for transition in rows:
        found.setdefault(transition.lease.cluster_id, []).append(transition)
    return found


# The Elections card computes availability for at most this many election leases: the ones
# with a holder change or a leaderless stretch in the window, most recently changed first.
# A lease held all the window by one span is 100 % available and has no gap: no news.
ELECTION_CANDIDATES = 200


def election_candidates(
    now: datetime, since: datetime, cluster_ids: Iterable[int]
) -> tuple[list[Lease], int]:
    """Election leases (live, or deleted since `since`) that may have had a leaderless
    moment since `since`, most
    recently changed first (at most ELECTION_CANDIDATES), and how many there are in all.

    A lease is left out only when one span covers the whole stretch: its holder span began
    before `since` and is still open, no span began or ended since, it is held and its expiry
    is still ahead. Such a lease had a valid holder from `since` to now, so it has no gap and
    an availability of 100 % over any window inside it (leases.availability).
    """
    spans = LeaseHolderSpan.objects.filter(lease_id=OuterRef("pk"))
    changed = spans.filter(Q(started_at__gt=since) | Q(ended_at__gt=since))
    open_span = spans.filter(ended_at__isnull=True)
    leaderless = Q(holder="") | Q(expires_at__isnull=True) | Q(expires_at__lte=now)
    # Deleted since `since`: its deletion is a gap (recent_gaps reads such leases too).
    deleted = Q(deleted_at__isnull=False)
    candidates = (
        Lease.objects.filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=since))
        .filter(lease_class__in=ELECTION_CLASSES, cluster_id__in=list(cluster_ids))
        .filter(Exists(changed) | ~Exists(open_span) | leaderless | deleted)
    )
    total = candidates.count()
    latest = spans.order_by("-started_at", "-id").values("started_at")[:1]
    page = list(
        candidates.annotate(changed_at=Subquery(latest))
        .order_by(F("changed_at").desc(nulls_first=True), "id")
        .only("id", "cluster_id", "namespace", "name", "created_at", "deleted_at", "expires_at")[
            :ELECTION_CANDIDATES
        ]
    )
    return page, total
