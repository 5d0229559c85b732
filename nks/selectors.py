"""Read-side queries for NKS: the pages, the overview, the API. Nothing here writes.

Pages get small row objects with display strings computed here. Every function takes ``now``
from its caller, so one request judges every row (ages, staleness) by one clock. A cluster is
never shown as healthy unless both NKS's health data (FRESH) and the dashboard's own poll of
it are current: see ``NksCluster.effective_health``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import F, QuerySet
from django.urls import reverse
from django.utils import timezone

from dashboard.links import lease_url
from dashboard.timefmt import (
    When,
    api_time,
    format_duration,
    iso_js,
    iso_utc,
    local_moment_text,
    when,
)
from leases.models import KubeCluster, Lease, LeaseClass, LeaseState, lease_state
from nks.models import (
    HEALTH_RANK,
    IN_FLIGHT_STATES,
    EventState,
    Freshness,
    Health,
    HealthSample,
    NksAccount,
    NksCluster,
    NksEvent,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
    stale_after,
)

TIMELINE_HOURS = 24
TIMELINE_BUCKETS = 144  # 10 minutes each
EVENTS_SHOWN = 20
PERIODS_SHOWN = 20
RESIZES_SHOWN = 20
AUDIT_PAGE_SIZE = 200
OVERVIEW_LIST_LIMIT = 10

HEALTH_PILLS = {
    Health.HEALTHY: "pill-ok",
    Health.DEGRADED: "pill-warn",
    Health.DOWN: "pill-bad",
    Health.UNKNOWN: "pill-quiet",
}
HEALTH_ROWS = {
    Health.HEALTHY: "",
    Health.DEGRADED: "row-warn",
    Health.DOWN: "row-bad",
    Health.UNKNOWN: "row-warn",
}
FRESHNESS_PILLS = {
    Freshness.FRESH: "pill-ok",
    Freshness.STALE: "pill-warn",
    Freshness.ROTTEN: "pill-bad",
    Freshness.UNKNOWN: "pill-quiet",
}
STATE_PILLS = {
    ResizeState.PENDING: "pill-quiet",
    ResizeState.SUBMITTING: "pill-warn",
    ResizeState.SUBMITTED: "pill-warn",
    ResizeState.IN_PROGRESS: "pill-warn",
    ResizeState.UNCERTAIN: "pill-warn",
    ResizeState.SUCCEEDED: "pill-ok",
    ResizeState.FAILED: "pill-bad",
}
EVENT_PILLS = {
    EventState.SUCCESS: "pill-ok",
    EventState.FAIL: "pill-bad",
    EventState.IN_PROGRESS: "pill-warn",
    EventState.UNKNOWN: "pill-quiet",
}


# --- Small display helpers ---------------------------------------------------------------


def status_pill(status: str) -> str:
    """A Heat-style status (CREATE_COMPLETE, UPDATE_IN_PROGRESS, UPDATE_FAILED...)."""
    upper = status.upper()
    if upper.endswith("_FAILED"):
        return "pill-bad"
    if upper.endswith("_IN_PROGRESS"):
        return "pill-warn"
    if upper.endswith("_COMPLETE"):
        return "pill-ok"
    return "pill-quiet"


def api_status_pill(api_status: str) -> str:
    upper = api_status.upper()
    if upper == "NORMAL":
        return "pill-ok"
    if upper == "K8S_API_NOT_WORKING":
        return "pill-bad"
    if upper in ("STALED_DATA", "ROTTEN_DATA"):
        return "pill-warn"
    return "pill-quiet"


def node_status_pill(node_status: str) -> str:
    upper = node_status.upper()
    if upper == "NORMAL":
        return "pill-ok"
    if upper == "ALL_NODES_NOT_READY":
        return "pill-bad"
    if upper in ("NOT_READY_NODE_EXIST", "STALED_DATA", "ROTTEN_DATA"):
        return "pill-warn"
    return "pill-quiet"


def nodegroup_health(
    node_status: str, ready: int | None, not_ready: int | None, freshness: str
) -> Health:
    """A nodegroup's verdict from one health report (its line and the cluster's freshness)."""
    if freshness != Freshness.FRESH:
        return Health.UNKNOWN
    upper = node_status.upper()
    if upper == "NORMAL":
        return Health.HEALTHY
    if upper == "NOT_READY_NODE_EXIST":
        return Health.DEGRADED
    if upper == "ALL_NODES_NOT_READY":
        return Health.DOWN
    if upper or ready is None or not_ready is None:
        return Health.UNKNOWN
    if not_ready == 0:
        return Health.HEALTHY
    return Health.DOWN if ready == 0 else Health.DEGRADED


def age_text(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    return f"{format_duration((now - moment).total_seconds())} ago"


@dataclass(frozen=True, slots=True)
class Banner:
    level: str  # error, warning, info
    text: str


@dataclass(frozen=True, slots=True)
class ReadyBar:
    """Ready and not-ready node counts as percentages of a bar."""

    ready: int | None
    not_ready: int | None
    ready_pct: float
    not_ready_pct: float
    text: str
    known: bool


def ready_bar(ready: int | None, not_ready: int | None) -> ReadyBar:
    if ready is None or not_ready is None:
        return ReadyBar(ready, not_ready, 0.0, 0.0, "unknown", False)
    total = ready + not_ready
    if total == 0:
        return ReadyBar(ready, not_ready, 0.0, 0.0, "0 nodes", True)
    return ReadyBar(
        ready,
        not_ready,
        round(100 * ready / total, 1),
        round(100 * not_ready / total, 1),
        f"{ready}:{not_ready}",
        True,
    )


# --- Accounts ------------------------------------------------------------------------------


def account_banners(accounts: Iterable[NksAccount], now: datetime) -> list[Banner]:
    """What is wrong with polling, per account: old data must never pass as current."""
    banners = []
    for account in accounts:
        if not account.enabled:
            banners.append(
                Banner("warning", f"Account {account.name} is disabled: it is not polled.")
            )
            continue
        if account.last_poll_at is None:
            banners.append(
                Banner(
                    "warning",
                    f"Account {account.name} has not been polled yet. Polls run on the Celery "
                    "beat and default worker (`make run` starts both; "
                    "`python manage.py poll_nks` polls once now).",
                )
            )
            continue
        data_age = age_text(account.last_success_at, now)
        if account.consecutive_failures:
            banners.append(
                Banner(
                    "error",
                    f"Polling account {account.name} failed "
                    f"{account.consecutive_failures} time"
                    f"{'s' if account.consecutive_failures != 1 else ''} in a row (last "
                    f"{age_text(account.last_error_at, now)}): {account.last_error} "
                    f"The clusters below show what was polled {data_age}.",
                )
            )
        elif account.is_stale(now):
            banners.append(
                Banner(
                    "error",
                    f"No poll of account {account.name} for {data_age.removesuffix(' ago')}: "
                    "is the Celery beat or worker down? Its clusters are shown as unknown.",
                )
            )
    return banners


# --- Clusters page -------------------------------------------------------------------------


@dataclass(slots=True)
class ClusterRow:
    id: int
    uuid: str
    url: str
    name: str
    account: str
    status: str
    status_pill: str
    health: str
    health_pill: str
    health_note: str
    health_status: str
    freshness: str
    freshness_pill: str
    health_timestamp: When | None
    api_status: str
    api_pill: str
    node_status: str
    node_pill: str
    nodes_text: str
    ready: ReadyBar
    kube_version: str
    polled: When | None
    stale: bool
    gone: bool
    last_error: str
    row_class: str
    rank: tuple[Any, ...] = field(default=(), repr=False)


def _health_note(cluster: NksCluster, effective: Health, now: datetime) -> str:
    if cluster.gone_at is not None:
        return f"gone from NKS {age_text(cluster.gone_at, now)}"
    if effective != cluster.health:
        age = age_text(cluster.polled_at, now).removesuffix(" ago")
        return f"the dashboard's data is {age} old"
    if effective == Health.UNKNOWN:
        if cluster.freshness != Freshness.FRESH:
            shown = cluster.health_status or "missing"
            return f"NKS health data is {shown}, so it cannot be trusted"
        if cluster.health_problem:
            return cluster.health_problem
        return "NKS did not say whether the API and nodes are fine"
    return ""


def cluster_row(cluster: NksCluster, now: datetime) -> ClusterRow:
    effective = cluster.effective_health(now)
    gone = cluster.gone_at is not None
    stale = cluster.is_stale(now)
    freshness = Freshness(cluster.freshness)
    total = cluster.node_count
    if cluster.nodes_ready is not None:
        nodes_text = f"{cluster.nodes_ready}/{total if total is not None else '?'}"
    else:
        nodes_text = f"?/{total}" if total is not None else "unknown"
    row_class = "row-quiet" if gone else HEALTH_ROWS[effective]
    return ClusterRow(
        id=cluster.pk,
        uuid=cluster.uuid,
        url=reverse("nks:cluster", args=[cluster.uuid]),
        name=cluster.name,
        account=cluster.account.name,
        status=cluster.status or "unknown",
        status_pill=status_pill(cluster.status),
        health=effective.label,
        health_pill=HEALTH_PILLS[effective],
        health_note=_health_note(cluster, effective, now),
        health_status=cluster.health_status or "missing",
        freshness=freshness.value,
        freshness_pill=FRESHNESS_PILLS[freshness],
        health_timestamp=when(cluster.health_timestamp, now),
        api_status=cluster.api_status or cluster.api or "unknown",
        api_pill=api_status_pill(cluster.api_status)
        if cluster.api_status
        else {True: "pill-ok", False: "pill-bad"}.get(cluster.api_ok, "pill-quiet"),
        node_status=cluster.node_status or "unknown",
        node_pill=node_status_pill(cluster.node_status),
        nodes_text=nodes_text,
        ready=ready_bar(cluster.nodes_ready, cluster.nodes_not_ready),
        kube_version=cluster.kube_version or "—",
        polled=when(cluster.polled_at, now),
        stale=stale,
        gone=gone,
        last_error=cluster.last_error,
        row_class=row_class,
        rank=(
            gone,
            HEALTH_RANK[effective],
            0 if status_pill(cluster.status) == "pill-bad" else 1,
            cluster.name.lower(),
        ),
    )


@dataclass(slots=True)
class ClustersPage:
    accounts: list[NksAccount]
    banners: list[Banner]
    rows: list[ClusterRow]
    counts: dict[str, int]
    server_now: str
    stale_after: str


def clusters_page(now: datetime, *, include_gone: bool = True) -> ClustersPage:
    accounts = list(NksAccount.objects.defer("password", "token"))
    clusters = NksCluster.objects.select_related("account").defer(
        "account__password", "account__token", "node_readiness", "node_addresses"
    )
    if not include_gone:
        clusters = clusters.filter(gone_at__isnull=True)
    rows = sorted((cluster_row(cluster, now) for cluster in clusters), key=lambda row: row.rank)
    counts = {health.label: 0 for health in HEALTH_RANK}
    for row in rows:
        if not row.gone:
            counts[row.health] += 1
    return ClustersPage(
        accounts=accounts,
        banners=account_banners(accounts, now),
        rows=rows,
        counts=counts,
        server_now=iso_js(now),
        stale_after=format_duration(stale_after().total_seconds()),
    )


# --- Health timeline -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StripSegment:
    x: int
    width: int
    css: str
    title: str


@dataclass(frozen=True, slots=True)
class Period:
    health: str
    pill: str
    start: When
    end: When | None
    duration: str
    start_text: str
    end_text: str


@dataclass(slots=True)
class Timeline:
    segments: list[StripSegment]
    buckets: int
    periods: list[Period]
    current: Period | None
    start_label: str
    samples: int


def _local(moment: datetime) -> str:
    return f"{timezone.localtime(moment):%H:%M}"


def build_timeline(
    points: Sequence[tuple[datetime, Health]], now: datetime, *, hours: int = TIMELINE_HOURS
) -> Timeline:
    """The 24 h strip (worst verdict per 10-minute bucket, gaps shown as "no data") and the
    periods that were not healthy, newest first, with how long each lasted."""
    start = now - timedelta(hours=hours)
    bucket_seconds = hours * 3600 / TIMELINE_BUCKETS
    worst: list[Health | None] = [None] * TIMELINE_BUCKETS
    for taken_at, health in points:
        if taken_at < start:
            continue
        index = min(TIMELINE_BUCKETS - 1, int((taken_at - start).total_seconds() / bucket_seconds))
        current = worst[index]
        if current is None or HEALTH_RANK[health] < HEALTH_RANK[current]:
            worst[index] = health
    segments: list[StripSegment] = []
    index = 0
    while index < TIMELINE_BUCKETS:
        health = worst[index]
        end = index
        while end + 1 < TIMELINE_BUCKETS and worst[end + 1] == health:
            end += 1
        begin_at = start + timedelta(seconds=index * bucket_seconds)
        end_at = start + timedelta(seconds=(end + 1) * bucket_seconds)
        label = health.label if health is not None else "no data"
        segments.append(
            StripSegment(
                x=index,
                width=end - index + 1,
                css=f"h-{health.value if health is not None else 'none'}",
                title=f"{_local(begin_at)}-{_local(end_at)}: {label}",
            )
        )
        index = end + 1

    # Runs of equal verdicts between consecutive samples; a silence longer than three polls
    # is a period of its own ("no data"), never folded into the ones around it.
    gap = stale_after()
    runs: list[list[Any]] = []  # [health or None, start, end or None while it lasts]
    previous_at: datetime | None = None
    for taken_at, health in points:
        if previous_at is not None and taken_at - previous_at > gap:
            runs[-1][2] = previous_at
            runs.append([None, previous_at, taken_at])
        if not runs or runs[-1][2] is not None or runs[-1][0] != health:
            if runs and runs[-1][2] is None:
                runs[-1][2] = taken_at
            runs.append([health, taken_at, None])
        previous_at = taken_at
    if previous_at is not None and now - previous_at > gap:
        runs[-1][2] = previous_at
        runs.append([None, previous_at, None])

    def period(health: Health | None, begin: datetime, end: datetime | None) -> Period:
        begin_when = when(begin, now)
        assert begin_when is not None
        length = ((end or now) - begin).total_seconds()
        return Period(
            health=health.label if health is not None else "no data",
            pill=HEALTH_PILLS[health] if health is not None else "pill-quiet",
            start=begin_when,
            end=when(end, now),
            duration=format_duration(length) + ("" if end else " so far"),
            start_text=local_moment_text(begin),
            end_text=local_moment_text(end),
        )

    periods = [
        period(health, begin, end)
        for health, begin, end in reversed(runs)
        if health != Health.HEALTHY and (end is None or end >= start)
    ]
    current = period(*runs[-1]) if runs else None
    return Timeline(
        segments=segments,
        buckets=TIMELINE_BUCKETS,
        periods=periods[:PERIODS_SHOWN],
        current=current,
        start_label=_local(start),
        samples=len(points),
    )


def cluster_timeline(cluster_id: int, now: datetime) -> Timeline:
    points = [
        (taken_at, Health(health))
        for taken_at, health in HealthSample.objects.filter(
            cluster_id=cluster_id, taken_at__gte=now - timedelta(hours=TIMELINE_HOURS)
        )
        .order_by("taken_at", "id")
        .values_list("taken_at", "health")
    ]
    return build_timeline(points, now)


# --- Cluster page ----------------------------------------------------------------------------


@dataclass(slots=True)
class NodegroupRow:
    url: str
    name: str
    role: str
    status: str
    status_pill: str
    status_reason: str
    node_count: str
    min_max: str
    autoscaler: str
    ready: ReadyBar
    node_status: str
    node_pill: str
    health: str
    health_pill: str
    gone: bool
    row_class: str


def nodegroup_url(cluster_uuid: str, name: str) -> str:
    return reverse("nks:nodegroup", args=[cluster_uuid, name])


def _count(value: int | None) -> str:
    return "—" if value is None else str(value)


def nodegroup_row(group: NksNodegroup, cluster: NksCluster, now: datetime) -> NodegroupRow:
    gone = group.gone_at is not None
    verdict = (
        nodegroup_health(group.node_status, group.ready, group.not_ready, cluster.freshness)
        if group.is_worker
        else None
    )
    if verdict is not None and cluster.effective_health(now) == Health.UNKNOWN:
        verdict = Health.UNKNOWN
    autoscaler = {True: "on", False: "off", None: "unknown"}[group.autoscaler_enabled]
    if group.autoscaler_enabled and (group.autoscaler_min or group.autoscaler_max):
        autoscaler += f" ({group.autoscaler_min or '?'}-{group.autoscaler_max or '?'})"
    if gone:
        row_class = "row-quiet"
    elif status_pill(group.status) == "pill-bad" or verdict == Health.DOWN:
        row_class = "row-bad"
    elif verdict in (Health.DEGRADED, Health.UNKNOWN) or group.in_progress:
        row_class = "row-warn"
    else:
        row_class = ""
    return NodegroupRow(
        url=nodegroup_url(cluster.uuid, group.name),
        name=group.name,
        role=group.role or "—",
        status=group.status or "unknown",
        status_pill=status_pill(group.status),
        status_reason=group.status_reason,
        node_count=str(group.node_count) if group.node_count is not None else "?",
        min_max=f"{_count(group.min_node_count)} / {_count(group.max_node_count)}",
        autoscaler=autoscaler,
        ready=ready_bar(group.ready, group.not_ready),
        node_status=group.node_status or ("—" if not group.is_worker else "unknown"),
        node_pill=node_status_pill(group.node_status),
        health=verdict.label if verdict is not None else "—",
        health_pill=HEALTH_PILLS[verdict] if verdict is not None else "pill-quiet",
        gone=gone,
        row_class=row_class,
    )


@dataclass(slots=True)
class EventRow:
    type: str
    state: str
    pill: str
    resource: str
    started: When | None
    finished: When | None
    duration: str
    contents: str


def event_rows(events: Iterable[NksEvent], now: datetime) -> list[EventRow]:
    rows = []
    for event in events:
        state = EventState(event.state)
        duration = event.duration
        if duration is not None:
            length = format_duration(duration.total_seconds())
        elif state == EventState.IN_PROGRESS and event.nks_created_at:
            length = format_duration((now - event.nks_created_at).total_seconds()) + " so far"
        else:
            length = "—"
        rows.append(
            EventRow(
                type=event.type or "unknown",
                state=event.raw_state or state.value,
                pill=EVENT_PILLS[state],
                resource=f"{event.resource_type or '?'} {event.resource_name}".strip(),
                started=when(event.nks_created_at, now),
                finished=when(event.nks_updated_at, now) if event.finished else None,
                duration=length,
                contents=event.contents,
            )
        )
    return rows


@dataclass(slots=True)
class NodeLeaseRow:
    name: str
    url: str
    state: str
    pill: str
    renewed: When | None
    nks_ready: str


@dataclass(slots=True)
class LeasesPanel:
    """Node heartbeat Leases of the Kubernetes cluster behind an NKS cluster."""

    kube_cluster: KubeCluster
    watcher_stale: bool
    rows: list[NodeLeaseRow]
    held: int
    expired: int
    list_url: str
    expired_names: set[str]


def node_leases(
    kube_cluster: KubeCluster | None, now: datetime, readiness: dict[str, Any] | None = None
) -> LeasesPanel | None:
    if kube_cluster is None:
        return None
    prefix = reverse("leases:index")
    leases = (
        Lease.objects.live()
        .filter(cluster=kube_cluster, lease_class=LeaseClass.NODE_HEARTBEAT)
        .order_by("name")
        .values("namespace", "name", "holder", "expires_at", "renew_time")
    )
    rows = []
    held = expired = 0
    expired_names: set[str] = set()
    for lease in leases:
        state = lease_state(lease["holder"], lease["expires_at"], now)
        if state == LeaseState.EXPIRED:
            expired += 1
            expired_names.add(lease["name"])
        elif state == LeaseState.HELD:
            held += 1
        ready = (readiness or {}).get(lease["name"])
        rows.append(
            NodeLeaseRow(
                name=lease["name"],
                url=lease_url(prefix, kube_cluster.name, lease["namespace"], lease["name"]),
                state=state.value,
                pill={"held": "pill-ok", "expired": "pill-bad"}.get(state.value, "pill-quiet"),
                renewed=when(lease["renew_time"], now),
                nks_ready={True: "Ready", False: "NotReady"}.get(ready, "—"),
            )
        )
    return LeasesPanel(
        kube_cluster=kube_cluster,
        watcher_stale=kube_cluster.is_stale(now),
        rows=rows,
        held=held,
        expired=expired,
        list_url=f"{prefix}?"
        + urlencode({"cluster": kube_cluster.name, "class": LeaseClass.NODE_HEARTBEAT.value}),
        expired_names=expired_names,
    )


@dataclass(slots=True)
class ClusterDetail:
    cluster: NksCluster
    row: ClusterRow
    banners: list[Banner]
    timeline: Timeline
    nodegroups: list[NodegroupRow]
    events: list[EventRow]
    leases: LeasesPanel | None
    health_fields: list[tuple[str, str]]
    resizes: list[ResizeRow]
    server_now: str


def _banners_for(cluster: NksCluster, now: datetime) -> list[Banner]:
    banners = account_banners([cluster.account], now)
    if cluster.gone_at is not None:
        banners.append(
            Banner(
                "warning",
                f"NKS stopped listing this cluster {age_text(cluster.gone_at, now)}: it is "
                "gone. What the dashboard last saw is kept below.",
            )
        )
    elif cluster.last_error:
        banners.append(
            Banner(
                "error",
                f"The last poll could not fetch everything about this cluster "
                f"({age_text(cluster.last_error_at, now)}): {cluster.last_error} Parts not "
                f"fetched are as of {age_text(cluster.refreshed_at, now)}.",
            )
        )
    elif cluster.is_stale(now) and not cluster.account.is_stale(now):
        banners.append(
            Banner(
                "error",
                f"This cluster's data is {age_text(cluster.refreshed_at, now)}: shown as unknown.",
            )
        )
    return banners


def get_cluster(uuid: str) -> NksCluster | None:
    return (
        NksCluster.objects.select_related("account", "kube_cluster")
        .defer("account__password", "account__token", "kube_cluster__kubeconfig")
        .filter(uuid=uuid)
        .first()
    )


def cluster_detail(uuid: str, now: datetime) -> ClusterDetail | None:
    from nks.services import linked_kube_cluster

    cluster = get_cluster(uuid)
    if cluster is None:
        return None
    groups = sorted(
        cluster.nodegroups.all(), key=lambda group: (group.gone_at is not None, group.name)
    )
    events = NksEvent.objects.filter(cluster=cluster).order_by("-nks_created_at", "-pk")[
        :EVENTS_SHOWN
    ]
    row = cluster_row(cluster, now)
    health_fields = [
        ("Health (dashboard's verdict)", row.health),
        ("health_status", cluster.health_status or "missing"),
        (
            "Health data refreshed by NKS",
            iso_utc(cluster.health_timestamp) if cluster.health_timestamp else "unknown",
        ),
        ("api", cluster.api or "—"),
        ("cluster.api_status", cluster.api_status or "—"),
        ("cluster.node_status", cluster.node_status or "—"),
        ("Nodes ready", row.nodes_text),
        (
            "Kubernetes",
            f"{cluster.kube_version or '?'} ({cluster.kube_version_status or 'status unknown'})",
        ),
        ("Platform version", cluster.platform_version or "—"),
        ("Availability zone", cluster.availability_zone or "—"),
        ("API address", cluster.api_address or "—"),
        ("UUID", cluster.uuid),
    ]
    return ClusterDetail(
        cluster=cluster,
        row=row,
        banners=_banners_for(cluster, now),
        timeline=cluster_timeline(cluster.pk, now),
        nodegroups=[nodegroup_row(group, cluster, now) for group in groups],
        events=event_rows(events, now),
        leases=node_leases(linked_kube_cluster(cluster), now, cluster.node_readiness),
        health_fields=health_fields,
        resizes=resize_rows(
            ResizeRequest.objects.filter(cluster=cluster).select_related("cluster")[:RESIZES_SHOWN],
            now,
        ),
        server_now=iso_js(now),
    )


# --- Nodegroup page ------------------------------------------------------------------------


def get_nodegroup(cluster_uuid: str, name: str) -> NksNodegroup | None:
    """The nodegroup of that name: the live one, else the one NKS listed last."""
    return (
        NksNodegroup.objects.select_related("cluster__account", "cluster__kube_cluster")
        .defer(
            "cluster__account__password",
            "cluster__account__token",
            "cluster__kube_cluster__kubeconfig",
        )
        .filter(cluster__uuid=cluster_uuid, name=name)
        .order_by(F("gone_at").asc(nulls_first=True), "-polled_at", "-pk")
        .first()
    )


@dataclass(slots=True)
class NodeRow:
    name: str
    address: str
    uuid: str
    ready: str
    ready_pill: str
    lease: str
    lease_pill: str


@dataclass(slots=True)
class HistoryChange:
    at: When
    ready: str
    node_status: str
    health: str
    pill: str


@dataclass(slots=True)
class NodegroupDetail:
    cluster: NksCluster
    nodegroup: NksNodegroup
    row: NodegroupRow
    banners: list[Banner]
    nodes: list[NodeRow]
    timeline: Timeline
    changes: list[HistoryChange]
    resizes: list[ResizeRow]
    leases: LeasesPanel | None
    server_now: str
    # NKS counts NotReady nodes but neither per-node keys nor expired Leases name them.
    unnamed_not_ready: bool


def nodegroup_history(
    cluster_id: int, name: str, now: datetime
) -> tuple[Timeline, list[HistoryChange]]:
    samples = HealthSample.objects.filter(
        cluster_id=cluster_id, taken_at__gte=now - timedelta(hours=TIMELINE_HOURS)
    ).order_by("taken_at", "id")
    points: list[tuple[datetime, Health]] = []
    changes: list[HistoryChange] = []
    last: tuple[Any, ...] | None = None
    for taken_at, freshness, groups in samples.values_list("taken_at", "freshness", "nodegroups"):
        line = (groups or {}).get(name)
        if line is None:
            continue
        verdict = nodegroup_health(
            line.get("node_status") or "", line.get("ready"), line.get("not_ready"), freshness
        )
        points.append((taken_at, verdict))
        signature = (line.get("ready"), line.get("not_ready"), line.get("node_status"), verdict)
        if signature != last:
            moment = when(taken_at, now)
            assert moment is not None
            changes.append(
                HistoryChange(
                    at=moment,
                    ready=ready_bar(line.get("ready"), line.get("not_ready")).text,
                    node_status=line.get("node_status") or "—",
                    health=verdict.label,
                    pill=HEALTH_PILLS[verdict],
                )
            )
            last = signature
    changes.reverse()
    return build_timeline(points, now), changes[:PERIODS_SHOWN]


def nodegroup_detail(nodegroup: NksNodegroup, now: datetime) -> NodegroupDetail:
    from nks.services import linked_kube_cluster

    cluster = nodegroup.cluster
    leases = node_leases(linked_kube_cluster(cluster), now, cluster.node_readiness)
    lease_states = {row.name: row for row in leases.rows} if leases else {}
    nodes = []
    for node in nodegroup.nodes:
        ready = node.get("ready")
        lease = lease_states.get(node.get("name") or "")
        nodes.append(
            NodeRow(
                name=node.get("name") or "—",
                address=node.get("address") or "—",
                uuid=node.get("uuid") or "—",
                ready={True: "Ready", False: "NotReady"}.get(ready, "unknown"),
                ready_pill={True: "pill-ok", False: "pill-bad"}.get(ready, "pill-quiet"),
                lease=lease.state if lease else ("not watched" if leases is None else "no lease"),
                lease_pill=lease.pill if lease else "pill-quiet",
            )
        )
    if not nodes:
        nodes = [
            NodeRow("—", address, "—", "unknown", "pill-quiet", "—", "pill-quiet")
            for address in nodegroup.node_addresses
        ]
    timeline, changes = nodegroup_history(cluster.pk, nodegroup.name, now)
    requests = resize_rows(
        ResizeRequest.objects.filter(nodegroup=nodegroup).select_related("cluster")[:RESIZES_SHOWN],
        now,
    )
    banners = _banners_for(cluster, now)
    if nodegroup.gone_at is not None and cluster.gone_at is None:
        banners.append(
            Banner(
                "warning",
                f"NKS stopped listing this nodegroup {age_text(nodegroup.gone_at, now)}.",
            )
        )
    return NodegroupDetail(
        cluster=cluster,
        nodegroup=nodegroup,
        row=nodegroup_row(nodegroup, cluster, now),
        banners=banners,
        nodes=nodes,
        timeline=timeline,
        changes=changes,
        resizes=requests,
        leases=leases,
        server_now=iso_js(now),
        unnamed_not_ready=bool(nodegroup.not_ready)
        and not any(row.ready == "NotReady" or row.lease == "expired" for row in nodes),
    )


# --- Resize requests -------------------------------------------------------------------------


@dataclass(slots=True)
class ResizeRow:
    id: int
    url: str
    cluster: str
    cluster_url: str
    nodegroup: str
    nodegroup_url: str
    change: str
    nodes_to_remove: list[str]
    username: str
    source: str
    reason: str
    state: str
    state_label: str
    pill: str
    in_flight: bool
    created: When
    finished: When | None
    error: str


def resize_rows(requests: Iterable[ResizeRequest], now: datetime) -> list[ResizeRow]:
    rows = []
    for request in requests:
        state = ResizeState(request.state)
        created = when(request.created_at, now)
        assert created is not None
        rows.append(
            ResizeRow(
                id=request.pk,
                url=reverse("nks:resize_detail", args=[request.pk]),
                cluster=request.cluster.name,
                cluster_url=reverse("nks:cluster", args=[request.cluster.uuid]),
                nodegroup=request.nodegroup_name,
                nodegroup_url=nodegroup_url(request.cluster.uuid, request.nodegroup_name),
                change=f"{request.from_count} → {request.to_count}",
                nodes_to_remove=list(request.nodes_to_remove or []),
                username=request.username,
                source=request.get_source_display(),
                reason=request.reason,
                state=state.value,
                state_label=state.label,
                pill=STATE_PILLS[state],
                in_flight=state in IN_FLIGHT_STATES,
                created=created,
                finished=when(request.finished_at, now),
                error=request.error,
            )
        )
    return rows


# A finished request stays in the nodegroup page's progress box this long.
RECENT_OUTCOME = timedelta(hours=1)


def latest_resize_row(nodegroup: NksNodegroup, now: datetime) -> ResizeRow | None:
    """The nodegroup's request in flight, else its last one if it finished within an hour."""
    request = (
        ResizeRequest.objects.filter(nodegroup=nodegroup)
        .select_related("cluster")
        .order_by("-created_at", "-pk")
        .first()
    )
    if request is None:
        return None
    if not request.is_in_flight and (
        request.finished_at is None or now - request.finished_at > RECENT_OUTCOME
    ):
        return None
    return resize_rows([request], now)[0]


@dataclass(frozen=True, slots=True)
class Step:
    label: str
    done: bool
    failed: bool
    current: bool
    at: When | None
    note: str


@dataclass(slots=True)
class ResizeDetail:
    request: ResizeRequest
    row: ResizeRow
    steps: list[Step]
    event: EventRow | None
    nodegroup: NodegroupRow
    removal_names: list[str]
    server_now: str
    explanation: str


STATE_EXPLANATIONS = {
    ResizeState.PENDING: "Queued: a worker will send it to NKS in a moment.",
    ResizeState.SUBMITTING: "A worker is checking the nodegroup and sending the resize to NKS.",
    ResizeState.SUBMITTED: "NKS accepted the resize; waiting for it to start.",
    ResizeState.IN_PROGRESS: "NKS is resizing the nodegroup.",
    ResizeState.UNCERTAIN: "The call to NKS failed in a way that may still have reached it. "
    "The dashboard is watching the nodegroup and its events to find out; it will not send the "
    "resize again.",
    ResizeState.SUCCEEDED: "NKS resized the nodegroup.",
    ResizeState.FAILED: "The resize did not happen (or NKS reported it failed).",
}


def resize_detail(request: ResizeRequest, now: datetime) -> ResizeDetail:
    (row,) = resize_rows([request], now)
    state = ResizeState(request.state)
    failed = state == ResizeState.FAILED
    sent = request.nks_called_at is not None
    started = request.started_at is not None
    finished = state in (ResizeState.SUCCEEDED, ResizeState.FAILED)
    accepted = state in (ResizeState.SUBMITTED, ResizeState.IN_PROGRESS, ResizeState.SUCCEEDED)
    accepted = accepted or started
    steps = [
        Step(
            "Queued", True, False, state == ResizeState.PENDING, when(request.created_at, now), ""
        ),
        Step(
            "Sent to NKS",
            sent,
            failed and not sent,
            state == ResizeState.SUBMITTING,
            when(request.nks_called_at, now),
            "once" if sent else ("nothing was sent" if failed else ""),
        ),
        Step(
            "Accepted by NKS",
            accepted,
            (failed and sent and not accepted) or state == ResizeState.UNCERTAIN,
            state in (ResizeState.SUBMITTED, ResizeState.UNCERTAIN),
            None,
            "answer unclear: following up" if state == ResizeState.UNCERTAIN else "",
        ),
        Step(
            "In progress",
            started,
            False,
            state == ResizeState.IN_PROGRESS,
            when(request.started_at, now),
            "nodegroup UPDATE_IN_PROGRESS or event IN_PROGRESS",
        ),
        Step(
            "Failed" if failed else "Succeeded",
            finished,
            failed,
            finished,
            when(request.finished_at, now),
            "",
        ),
    ]
    event = event_rows([request.event], now)[0] if request.event_id else None
    names = {node.get("uuid"): node.get("name") for node in request.nodegroup.nodes}
    return ResizeDetail(
        request=request,
        row=row,
        steps=steps,
        event=event,
        nodegroup=nodegroup_row(request.nodegroup, request.cluster, now),
        removal_names=[
            f"{names.get(uuid) or '?'} ({uuid})" for uuid in request.nodes_to_remove or []
        ],
        server_now=iso_js(now),
        explanation=STATE_EXPLANATIONS[state],
    )


def resize_queryset(filters: dict[str, str]) -> QuerySet[ResizeRequest]:
    requests = ResizeRequest.objects.select_related("cluster")
    if filters.get("cluster"):
        requests = requests.filter(cluster__uuid=filters["cluster"])
    if filters.get("user"):
        requests = requests.filter(username=filters["user"])
    outcome = filters.get("outcome")
    if outcome == "in_flight":
        requests = requests.filter(state__in=IN_FLIGHT_STATES)
    elif outcome:
        requests = requests.filter(state=outcome)
    return requests.order_by("-created_at", "-pk")


@dataclass(slots=True)
class AuditPage:
    rows: list[ResizeRow]
    total: int
    clusters: list[tuple[str, str]]
    users: list[str]
    truncated: bool
    server_now: str


def resize_audit(filters: dict[str, str], now: datetime) -> AuditPage:
    requests = resize_queryset(filters)
    total = requests.count()
    rows = resize_rows(requests[:AUDIT_PAGE_SIZE], now)
    clusters = list(
        NksCluster.objects.filter(resizes__isnull=False)
        .order_by("name")
        .values_list("uuid", "name")
        .distinct()
    )
    users = list(
        ResizeRequest.objects.order_by("username").values_list("username", flat=True).distinct()
    )
    return AuditPage(
        rows=rows,
        total=total,
        clusters=clusters,
        users=users,
        truncated=total > AUDIT_PAGE_SIZE,
        server_now=iso_js(now),
    )


# --- Overview --------------------------------------------------------------------------------


@dataclass(slots=True)
class NksOverview:
    accounts: int
    banners: list[Banner]
    counts: list[tuple[str, int, str]]
    attention: list[ClusterRow]
    more: int
    in_flight: list[ResizeRow]
    server_now: str


def nks_overview(now: datetime) -> NksOverview:
    page = clusters_page(now, include_gone=False)
    attention = [row for row in page.rows if row.health != Health.HEALTHY.label]
    return NksOverview(
        accounts=len(page.accounts),
        banners=page.banners,
        counts=[
            (health.label, page.counts[health.label], HEALTH_PILLS[health])
            for health in HEALTH_RANK
        ],
        attention=attention[:OVERVIEW_LIST_LIMIT],
        more=max(0, len(attention) - OVERVIEW_LIST_LIMIT),
        in_flight=resize_rows(
            ResizeRequest.objects.filter(state__in=IN_FLIGHT_STATES).select_related("cluster"),
            now,
        ),
        server_now=iso_js(now),
    )


# --- API -------------------------------------------------------------------------------------


def api_clusters(now: datetime) -> list[dict[str, Any]]:
    clusters = (
        NksCluster.objects.select_related("account")
        .defer("account__password", "account__token")
        .prefetch_related("nodegroups")
        .order_by("account__name", "name", "uuid")
    )
    results = []
    for cluster in clusters:
        results.append(
            {
                "account": cluster.account.name,
                "uuid": cluster.uuid,
                "name": cluster.name,
                "status": cluster.status or None,
                "health": cluster.effective_health(now).value,
                "health_status": cluster.health_status or None,
                "api_status": cluster.api_status or None,
                "node_status": cluster.node_status or None,
                "health_timestamp": api_time(cluster.health_timestamp),
                "stale": cluster.is_stale(now),
                "gone": cluster.gone_at is not None,
                "polled_at": api_time(cluster.polled_at),
                "last_error": cluster.last_error or None,
                "nodegroups": [
                    {
                        "uuid": group.uuid,
                        "name": group.name,
                        "role": group.role or None,
                        "status": group.status or None,
                        "node_count": group.node_count,
                        "min_node_count": group.min_node_count,
                        "max_node_count": group.max_node_count,
                        "ready": group.ready,
                        "not_ready": group.not_ready,
                        "node_status": group.node_status or None,
                        "autoscaler_enabled": group.autoscaler_enabled,
                        "gone": group.gone_at is not None,
                    }
                    for group in sorted(cluster.nodegroups.all(), key=lambda group: group.name)
                ],
            }
        )
    return results


def api_resize_request(request: ResizeRequest) -> dict[str, Any]:
    return {
        "id": request.pk,
        "url": reverse("nks:resize_detail", args=[request.pk]),
        "api_url": reverse("api:nks_resize_request", args=[request.pk]),
        "state": request.state,
        "in_flight": request.is_in_flight,
        "cluster": {"uuid": request.cluster.uuid, "name": request.cluster.name},
        "nodegroup": request.nodegroup_name,
        "from_count": request.from_count,
        "to_count": request.to_count,
        "nodes_to_remove": list(request.nodes_to_remove or []),
        "reason": request.reason,
        "user": request.username,
        "source": request.source,
        "created_at": api_time(request.created_at),
        "nks_called_at": api_time(request.nks_called_at),
        "started_at": api_time(request.started_at),
        "finished_at": api_time(request.finished_at),
        "error": request.error or None,
        "event": (
            {
                "uuid": request.event.uuid,
                "type": request.event.type,
                "state": request.event.raw_state,
                "contents": request.event.contents or None,
            }
            if request.event_id and request.event is not None
            else None
        ),
    }


def expired_lease_names(nodegroup: NksNodegroup, now: datetime) -> set[str]:
    """Names of nodes of the nodegroup's cluster whose heartbeat Lease has expired."""
    from nks.services import linked_kube_cluster

    kube_cluster = linked_kube_cluster(nodegroup.cluster)
    if kube_cluster is None:
        return set()
    names = [node["name"] for node in nodegroup.nodes if node.get("name")]
    return set(
        Lease.objects.live()
        .filter(
            cluster=kube_cluster,
            lease_class=LeaseClass.NODE_HEARTBEAT,
            name__in=names,
            expires_at__lte=now,
        )
        .exclude(holder="")
        .values_list("name", flat=True)
    )


def poll_interval_text() -> str:
    return format_duration(settings.NKS_POLL_SECONDS)
