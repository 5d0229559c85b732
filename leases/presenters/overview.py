"""The overview's Leases part: per cluster, counts by state and what needs a look now."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, Window
from django.utils.translation import ngettext

from dashboard.flapping import flap_policy
from dashboard.links import lease_url
from dashboard.timefmt import When, format_duration, iso_js, when
from leases.availability import (
    RECENT_GAPS_WINDOW,
    WINDOWS,
    availability_for_leases,
    recent_gaps,
)
from leases.flapping import most_flapping
from leases.groups import GroupStatus, group_summaries, leader_groups
from leases.leader_k8s import is_token
from leases.models import (
    Lease,
    LeaseClass,
    LeaseState,
    LeaseTransition,
    lease_state,
)
from leases.overview_queries import (
    due_by_schedule,
    election_candidates,
    expired_due,
    recent_transitions,
    soon_and_expired_nodes,
)
from leases.presenters.display import (
    HOLDER_DISPLAY_CHARS,
    expiry_text,
    leases_prefix,
    shorten,
)
from leases.presenters.groups import group_url, size_text
from leases.presenters.watchers import ClusterStatus, cluster_statuses
from leases.queries import EXPIRING_SOON, state_counts_by_cluster

OVERVIEW_LIST_LIMIT = 10
# Each cluster card's lists (expired node heartbeats, expiring soon, last holder changes)
# share this many rows across the fleet, but never fewer than OVERVIEW_LIST_MIN each: a
# fleet of 50 clusters shows 3 of each per cluster, not 10, and the page stays the size
# one screen of cards needs, whatever the fleet. Every count links to all the rows.
OVERVIEW_ROW_BUDGET = 100
OVERVIEW_LIST_MIN = 3
OVERVIEW_FLAPPING_LIMIT = 50
# The Elections card lists this many of each: what needs a look first, not a report.
ELECTIONS_LIMIT = 5


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
    # The holders in human terms (leader-k8s's node ids), with the fencing tokens apart.
    from_holder: str
    to_holder: str
    seen: When
    missed: int
    from_token: str = ""
    to_token: str = ""
    fencing_reused: bool = False


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
class GroupLink:
    url: str
    cluster: str
    namespace: str
    name: str
    status: GroupStatus
    held: int
    size: str


@dataclass(slots=True)
class AvailabilityLink:
    url: str
    cluster: str
    namespace: str
    name: str
    ratio: float
    percent: str
    gaps: int
    longest_gap: str


@dataclass(slots=True)
class GapRow:
    url: str
    cluster: str
    namespace: str
    name: str
    started: When
    ended: When | None  # None: still leaderless
    length: str  # its observed part


@dataclass(slots=True)
class ElectionsOverview:
    """Leader elections at a glance: groups short of slots, the leases that were leaderless
    longest in the last 24 h, and the newest leaderless gaps."""

    groups: int
    understaffed: list[GroupLink]
    understaffed_total: int
    lowest: list[AvailabilityLink]
    gaps: list[GapRow]
    # Election leases whose history was read (a bounded page), of those that changed or
    # were leaderless in the last RECENT_GAPS_WINDOW: the rest are one link away.
    judged: int = 0
    judged_total: int = 0
    elections_url: str = ""

    @property
    def more(self) -> int:
        return self.judged_total - self.judged


def elections_overview(now: datetime, cluster_names: Mapping[int, str]) -> ElectionsOverview:
    """A fixed number of queries, however many groups, leases and gaps there are; the
    history is read only for a bounded page of election leases (`election_candidates`)."""
    # Every group's status from one aggregate row each (already unstaffed, then degraded and
    # unknown, first); the slots are read only for the few groups the card names.
    summaries = group_summaries(now, enabled_only=True)
    short = [summary for summary in summaries if summary.status != GroupStatus.STAFFED]
    named = leader_groups(now, enabled_only=True, keys=[s.key for s in short[:ELECTIONS_LIMIT]])
    by_key = {(group.cluster_id, group.namespace, group.name): group for group in named}
    understaffed = [
        GroupLink(
            url=group_url(group.cluster, group.namespace, group.name),
            cluster=group.cluster,
            namespace=group.namespace,
            name=group.name,
            status=group.status,
            held=group.held,
            size=size_text(group),
        )
        for group in (
            by_key[summary.key] for summary in short[:ELECTIONS_LIMIT] if summary.key in by_key
        )
    ]
    prefix = leases_prefix()
    # The gaps look back RECENT_GAPS_WINDOW (longer than the 24 h of the ratios): leases
    # that changed in it are a superset of those that changed in the last 24 h.
    candidates, candidates_total = election_candidates(
        now, now - WINDOWS[RECENT_GAPS_WINDOW], cluster_names
    )
    leases = [lease for lease in candidates if lease.deleted_at is None]
    figures = availability_for_leases(leases, now, "24h")
    # Leases with a leaderless stretch only: a full 100 % is no news.
    scored: list[tuple[float, Lease]] = []
    for lease in leases:
        ratio = figures[lease.pk].ratio if lease.pk in figures else None
        # Never observed, or held all the observed time: no news.
        if ratio is not None and ratio < 1.0:
            scored.append((ratio, lease))
    scored.sort(key=lambda pair: (pair[0], pair[1].pk))
    lowest = []
    for ratio, lease in scored[:ELECTIONS_LIMIT]:
        cluster = cluster_names[lease.cluster_id]
        found = figures[lease.pk]
        lowest.append(
            AvailabilityLink(
                url=lease_url(prefix, cluster, lease.namespace, lease.name),
                cluster=cluster,
                namespace=lease.namespace,
                name=lease.name,
                ratio=ratio,
                percent=f"{ratio * 100:.2f} %",
                gaps=found.gaps,
                longest_gap=format_duration(found.longest_gap_seconds),
            )
        )
    gaps = []
    for gap in recent_gaps(now, limit=ELECTIONS_LIMIT, leases=candidates):
        started = when(gap.started_at, now)
        assert started is not None
        cluster = cluster_names[gap.lease.cluster_id]
        gaps.append(
            GapRow(
                url=lease_url(prefix, cluster, gap.lease.namespace, gap.lease.name),
                cluster=cluster,
                namespace=gap.lease.namespace,
                name=gap.lease.name,
                started=started,
                ended=when(gap.ended_at, now),
                length=format_duration(gap.seconds),
            )
        )
    return ElectionsOverview(
        groups=len(summaries),
        understaffed=understaffed,
        understaffed_total=len(short),
        lowest=lowest,
        gaps=gaps,
        judged=len(candidates),
        judged_total=candidates_total,
        elections_url=f"{prefix}?{urlencode({'class': LeaseClass.LEADER_ELECTION})}",
    )


@dataclass(slots=True)
class LeasesOverview:
    clusters: list[ClusterOverview]
    problems: list[ClusterStatus]
    server_now: str
    flap_window: str
    flap_changes: int
    elections: ElectionsOverview

    @property
    def expiring_within(self) -> str:
        # In the reader's language: worked out when shown, not once at import.
        return format_duration(EXPIRING_SOON.total_seconds())


def _lease_links(
    leases: Iterable[Mapping[str, Any]],
    prefix: str,
    cluster: str,
    detail: Mapping[int, str] | None = None,
    now: datetime | None = None,
    as_of: datetime | None = None,
) -> list[LeaseLink]:
    links = []
    for row in leases:
        expires_at = row.get("expires_at")
        text = detail.get(row["id"], "") if detail else ""
        if not text and now is not None and expires_at is not None:
            state = lease_state(row["holder"], expires_at, now, as_of)
            text = expiry_text(state, expires_at, now)
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


def overview_list_limit(clusters: int) -> int:
    """How many rows each of a cluster card's lists shows, with `clusters` cards."""
    return max(OVERVIEW_LIST_MIN, min(OVERVIEW_LIST_LIMIT, OVERVIEW_ROW_BUDGET // max(clusters, 1)))


def transition_rows(
    transitions: Iterable[LeaseTransition], cluster: str, now: datetime
) -> list[TransitionRow]:
    prefix = leases_prefix()
    rows = []
    for transition in transitions:
        seen = when(transition.observed_at, now)
        assert seen is not None  # observed_at is required
        rows.append(
            TransitionRow(
                url=lease_url(prefix, cluster, transition.lease.namespace, transition.lease.name),
                namespace=transition.lease.namespace,
                name=transition.lease.name,
                from_holder=shorten(
                    transition.from_identity or transition.from_holder, HOLDER_DISPLAY_CHARS
                ),
                to_holder=shorten(
                    transition.to_identity or transition.to_holder, HOLDER_DISPLAY_CHARS
                ),
                seen=seen,
                missed=transition.missed,
                from_token=_token_apart(transition.from_holder, transition.from_identity),
                to_token=_token_apart(transition.to_holder, transition.to_identity),
                fencing_reused=transition.fencing_reused,
            )
        )
    return rows


def _token_apart(holder: str, identity: str) -> str:
    """The fencing token to show beside a holder's identity; "" when the identity is the
    holder itself (a plain lease, or leader-k8s with no node id)."""
    return holder if is_token(holder) and identity and identity != holder else ""


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


def leases_overview(now: datetime, statuses: list[ClusterStatus] | None = None) -> LeasesOverview:
    """Per cluster: counts by state and what needs a look now. One grouped count, a page of
    each list for every cluster at once, and the last holder changes of every cluster.
    `statuses`: `cluster_statuses(now)`, when the page has read them already."""
    statuses = cluster_statuses(now) if statuses is None else statuses
    counts = state_counts_by_cluster(now)
    prefix = leases_prefix()
    link_fields = ("id", "cluster_id", "namespace", "name", "holder", "expires_at")
    limit = overview_list_limit(len(statuses))

    policy = flap_policy()
    flap_rows = most_flapping(now, OVERVIEW_FLAPPING_LIMIT, policy)
    flapping_by_cluster: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in Lease.objects.filter(pk__in=flap_rows).values(*link_fields):
        flapping_by_cluster[row["cluster_id"]].append(row)

    window = format_duration(policy.window.total_seconds())
    # Two lists for every cluster in one query (a page of each cluster's rows), and only
    # for the clusters whose counts say they have any.
    soon_by_cluster, nodes_by_cluster = soon_and_expired_nodes(
        now,
        EXPIRING_SOON,
        [cluster_id for cluster_id, count in counts.items() if count.get("expiring_soon")],
        [cluster_id for cluster_id, count in counts.items() if count.get("nodes_expired")],
        limit,
        link_fields,
    )
    transitions = recent_transitions([status.id for status in statuses], limit)
    overviews = []
    for status in statuses:
        count = counts.get(status.id, {})
        expiring = _lease_links(
            soon_by_cluster.get(status.id, []), prefix, status.name, now=now, as_of=status.as_of
        )
        nodes = _lease_links(
            nodes_by_cluster.get(status.id, []), prefix, status.name, now=now, as_of=status.as_of
        )
        flapping_rows = sorted(
            flapping_by_cluster.get(status.id, []), key=lambda row: -flap_rows[row["id"]]
        )
        flapping = _lease_links(
            flapping_rows,
            prefix,
            status.name,
            detail={
                row["id"]: ngettext(
                    "%(changes)d change in %(window)s", "%(changes)d changes in %(window)s", changes
                )
                % {"changes": changes, "window": window}
                for row in flapping_rows
                for changes in (flap_rows[row["id"]],)
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
                transitions=transition_rows(transitions.get(status.id, []), status.name, now),
                links=_overview_links(prefix, status.name),
            )
        )
    return LeasesOverview(
        clusters=overviews,
        problems=[status for status in statuses if status.problem],
        server_now=iso_js(now),
        flap_window=window,
        flap_changes=policy.changes,
        elections=elections_overview(
            now, {status.id: status.name for status in statuses if status.enabled}
        ),
    )


# The overview's top list of leases in trouble: enough to act on at 3 a.m.; the rest are one
# link away (the Leases page filtered to the same state), so every lease counted is reachable.
PROBLEM_LIST_LIMIT = 10


@dataclass(slots=True)
class ProblemLease:
    url: str
    cluster: str
    namespace: str
    name: str
    holder: str
    detail: str
    expires_js: str = ""


@dataclass(slots=True)
class LeaseProblems:
    """Expired and flapping leases of every cluster, worst first, and the watchers in trouble."""

    expired: list[ProblemLease]
    expired_total: int
    expired_url: str
    flapping: list[ProblemLease]
    flapping_total: int
    flapping_url: str
    problems: list[ClusterStatus]
    server_now: str
    flap_window: str
    flap_changes: int

    @property
    def any(self) -> bool:
        return bool(self.expired_total or self.flapping_total)


def lease_problems(now: datetime, statuses: list[ClusterStatus] | None = None) -> LeaseProblems:
    """A fixed number of queries: the watchers, one count, one list each, whatever the size.
    `statuses`: `cluster_statuses(now)`, when the page has read them already."""
    prefix = leases_prefix()
    statuses = cluster_statuses(now) if statuses is None else statuses
    # The total rides along with the page (a window count): one read of the leases, not two.
    expired_rows = list(
        Lease.objects.live()
        .filter(due_by_schedule(now))
        .filter(expired_due(now))
        .annotate(total=Window(Count("id")))
        # Newest expiry first: what just broke is what someone is being paged about.
        .order_by("-expires_at", "id")
        .values("id", "namespace", "name", "holder", "expires_at", "cluster__name", "total")[
            :PROBLEM_LIST_LIMIT
        ]
    )
    expired_total = expired_rows[0]["total"] if expired_rows else 0
    expired = [
        ProblemLease(
            url=lease_url(prefix, row["cluster__name"], row["namespace"], row["name"]),
            cluster=row["cluster__name"],
            namespace=row["namespace"],
            name=row["name"],
            holder=shorten(row["holder"], HOLDER_DISPLAY_CHARS),
            detail=expiry_text(LeaseState.EXPIRED, row["expires_at"], now),
            expires_js=iso_js(row["expires_at"]),
        )
        for row in expired_rows
    ]
    policy = flap_policy()
    window = format_duration(policy.window.total_seconds())
    flap_rows = most_flapping(now, OVERVIEW_FLAPPING_LIMIT, policy)
    listed = sorted(flap_rows.items(), key=lambda pair: (-pair[1], pair[0]))[:PROBLEM_LIST_LIMIT]
    found = {
        row["id"]: row
        for row in Lease.objects.filter(pk__in=[pk for pk, _ in listed]).values(
            "id", "namespace", "name", "holder", "cluster__name"
        )
    }
    flapping = [
        ProblemLease(
            url=lease_url(prefix, row["cluster__name"], row["namespace"], row["name"]),
            cluster=row["cluster__name"],
            namespace=row["namespace"],
            name=row["name"],
            holder=shorten(row["holder"], HOLDER_DISPLAY_CHARS),
            detail=ngettext(
                "%(changes)d change in %(window)s", "%(changes)d changes in %(window)s", changes
            )
            % {"changes": changes, "window": window},
        )
        for pk, changes in listed
        if (row := found.get(pk)) is not None
    ]
    return LeaseProblems(
        expired=expired,
        expired_total=expired_total,
        expired_url=f"{prefix}?{urlencode({'state': LeaseState.EXPIRED})}",
        flapping=flapping,
        flapping_total=len(flap_rows),
        flapping_url=f"{prefix}?{urlencode({'flapping': 'true'})}",
        problems=[status for status in statuses if status.problem],
        server_now=iso_js(now),
        flap_window=window,
        flap_changes=policy.changes,
    )
