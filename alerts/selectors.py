"""Read-side queries for the alerts pages, the badge, the API and metrics. Nothing writes.

Rows carry display strings computed here; every time is judged against one `now` passed in
by the caller, as in `leases.selectors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Count, Min, Prefetch, Q
from django.utils.dateparse import parse_datetime

from alerts.models import (
    AlertSubscription,
    DeliveryState,
    EvaluatorStatus,
    Incident,
    IncidentEvent,
    IncidentState,
    Notification,
    Rule,
    Severity,
    Silence,
    severity_rank,
)
from alerts.rules import RULE_SPECS
from dashboard.timefmt import When, api_time, format_duration, iso_js, when

RESOLVED_LIMIT = 50
RESOLVED_FILTERED_LIMIT = 200
API_LIMIT = 100
API_MAX_LIMIT = 500
ITEMS_ON_PAGE = 200

SEVERITY_PILLS = {Severity.CRITICAL: "pill-bad", Severity.WARNING: "pill-warn"}
DELIVERY_PILLS = {
    DeliveryState.PENDING: "pill-warn",
    DeliveryState.SENDING: "pill-warn",
    DeliveryState.SENT: "pill-ok",
    DeliveryState.FAILED: "pill-bad",
    DeliveryState.CANCELLED: "pill-quiet",
}


# --- The alerts page -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IncidentFilters:
    state: str = ""  # "" = open ones, then recent resolved ones
    rule: str = ""
    severity: str = ""
    cluster: str = ""
    q: str = ""

    @property
    def active(self) -> bool:
        return bool(self.state or self.rule or self.severity or self.cluster or self.q)

    def params(self) -> dict[str, str]:
        values = {
            "state": self.state,
            "rule": self.rule,
            "severity": self.severity,
            "cluster": self.cluster,
            "q": self.q,
        }
        return {key: value for key, value in values.items() if value}

    def query_string(self) -> str:
        params = self.params()
        return f"?{urlencode(params)}" if params else ""


@dataclass(slots=True)
class IncidentRow:
    id: int
    url: str
    key: str
    rule: str
    rule_label: str
    severity: str
    severity_pill: str
    state: str
    cluster: str
    title: str
    since: When
    opened: When | None
    last_seen: When
    resolved: When | None
    duration: str
    resolution: str
    acknowledged_by: str
    acknowledged: When | None
    silenced_until: When | None
    hold: str
    row_class: str


@dataclass(slots=True)
class EvaluatorInfo:
    last_run: When | None
    silent: bool
    last_error: str
    interval: int


@dataclass(slots=True)
class IncidentTables:
    open: list[IncidentRow]
    resolved: list[IncidentRow]
    resolved_limit: int
    clusters: list[str]
    evaluator: EvaluatorInfo
    server_now: str
    show_open: bool
    show_resolved: bool
    rules: list[tuple[str, str]] = field(default_factory=list)


def _silences_by_key(keys: set[str], now: datetime) -> dict[str, Silence]:
    if not keys:
        return {}
    silences: dict[str, Silence] = {}
    for silence in Silence.objects.active(now).filter(key__in=keys).order_by("ends_at"):
        silences[silence.key] = silence
    return silences


def incident_row(incident: Incident, now: datetime, silence: Silence | None) -> IncidentRow:
    since = when(incident.since, now)
    last_seen = when(incident.last_seen_at, now)
    assert since is not None and last_seen is not None  # required fields
    is_open = incident.state == IncidentState.FIRING
    if not is_open:
        row_class = "row-quiet"
    elif incident.acknowledged_at is None and incident.severity == Severity.CRITICAL:
        row_class = "row-bad"
    elif incident.acknowledged_at is None:
        row_class = "row-warn"
    else:
        row_class = ""
    return IncidentRow(
        id=incident.pk,
        url=incident.get_absolute_url(),
        key=incident.key,
        rule=incident.rule,
        rule_label=incident.get_rule_display(),
        severity=incident.severity,
        severity_pill=SEVERITY_PILLS.get(Severity(incident.severity), "pill-quiet"),
        state=incident.state,
        cluster=incident.cluster,
        title=incident.title,
        since=since,
        opened=when(incident.opened_at, now),
        last_seen=last_seen,
        resolved=when(incident.resolved_at, now),
        duration=format_duration(incident.duration(now).total_seconds()),
        resolution=incident.resolution,
        acknowledged_by=incident.acknowledged_by.get_username() if incident.acknowledged_by else "",
        acknowledged=when(incident.acknowledged_at, now),
        silenced_until=when(silence.ends_at, now) if silence else None,
        hold=incident.get_hold_display() if incident.hold else "",
        row_class=row_class,
    )


def _filtered(filters: IncidentFilters) -> Any:
    incidents = Incident.objects.select_related("acknowledged_by")
    if filters.rule:
        incidents = incidents.filter(rule=filters.rule)
    if filters.severity:
        incidents = incidents.filter(severity=filters.severity)
    if filters.cluster:
        incidents = incidents.filter(cluster=filters.cluster)
    if filters.q:
        incidents = incidents.filter(Q(title__icontains=filters.q) | Q(key__icontains=filters.q))
    return incidents


def evaluator_info(now: datetime) -> EvaluatorInfo:
    status = EvaluatorStatus.objects.filter(pk=1).first()
    interval = settings.ALERT_EVAL_SECONDS
    last = status.last_finished_at if status else None
    silent = last is None or now - last > timedelta(seconds=max(3 * interval, 30))
    return EvaluatorInfo(
        last_run=when(last, now),
        silent=silent,
        last_error=status.last_error if status else "",
        interval=interval,
    )


def incident_tables(filters: IncidentFilters, now: datetime) -> IncidentTables:
    """Open incidents (critical, then unacknowledged, then newest first); recent resolved."""
    incidents = _filtered(filters)
    show_open = filters.state in ("", "open")
    show_resolved = filters.state in ("", "resolved")
    open_incidents = list(incidents.filter(state=IncidentState.FIRING)) if show_open else []
    open_incidents.sort(key=lambda i: i.opened_at or i.since, reverse=True)
    open_incidents.sort(key=lambda i: (-severity_rank(i.severity), i.acknowledged_at is not None))
    limit = RESOLVED_FILTERED_LIMIT if filters.state == "resolved" else RESOLVED_LIMIT
    resolved = (
        list(incidents.filter(state=IncidentState.RESOLVED).order_by("-resolved_at", "-id")[:limit])
        if show_resolved
        else []
    )
    silences = _silences_by_key({i.key for i in open_incidents}, now)
    clusters = sorted(
        set(
            Incident.objects.exclude(cluster="")
            .exclude(state=IncidentState.PENDING)
            .values_list("cluster", flat=True)
            .distinct()
        )
    )
    return IncidentTables(
        open=[incident_row(i, now, silences.get(i.key)) for i in open_incidents],
        resolved=[incident_row(i, now, None) for i in resolved],
        resolved_limit=limit,
        clusters=clusters,
        evaluator=evaluator_info(now),
        server_now=iso_js(now),
        show_open=show_open,
        show_resolved=show_resolved,
        rules=[(rule.value, rule.label) for rule in RULE_SPECS],
    )


def incident_exists(incident_id: int) -> bool:
    """A shown incident (pending ones are not incidents yet)."""
    return Incident.objects.filter(pk=incident_id).exclude(state=IncidentState.PENDING).exists()


def subscription_of(user: Any) -> AlertSubscription | None:
    return AlertSubscription.objects.filter(user=user).first()


def open_incident_counts() -> dict[str, int]:
    """For the navigation badge: open incidents, critical ones, unacknowledged ones."""
    counts = Incident.objects.filter(state=IncidentState.FIRING).aggregate(
        count=Count("id"),
        critical=Count("id", filter=Q(severity=Severity.CRITICAL)),
        unacknowledged=Count("id", filter=Q(acknowledged_at__isnull=True)),
    )
    return {key: int(value or 0) for key, value in counts.items()}


# --- The incident page -----------------------------------------------------------------------


@dataclass(slots=True)
class FactRow:
    label: str
    text: str
    at: When | None


@dataclass(slots=True)
class NotificationRow:
    id: int
    kind: str
    subject: str
    recipients: list[str]
    state: str
    state_label: str
    pill: str
    attempts: int
    last_error: str
    created: When
    next_attempt: When | None
    sent: When | None


@dataclass(slots=True)
class TimelineEntry:
    at: When
    kind: str
    label: str
    text: str
    user: str
    notification: NotificationRow | None = None


@dataclass(slots=True)
class SilenceInfo:
    by: str
    until: When
    reason: str


@dataclass(slots=True)
class IncidentDetail:
    row: IncidentRow
    is_open: bool
    rule_summary: str
    facts: list[FactRow]
    items_label: str
    items: list[str]
    items_total: int
    items_more: int
    link: str
    silence: SilenceInfo | None
    timeline: list[TimelineEntry]
    notifications: list[NotificationRow]
    server_now: str


def notification_row(notification: Notification, now: datetime) -> NotificationRow:
    created = when(notification.created_at, now)
    assert created is not None
    waiting = notification.state == DeliveryState.PENDING
    return NotificationRow(
        id=notification.pk,
        kind=notification.kind,
        subject=notification.subject,
        recipients=list(notification.recipients),
        state=notification.state,
        state_label=notification.get_state_display(),
        pill=DELIVERY_PILLS.get(DeliveryState(notification.state), "pill-quiet"),
        attempts=notification.attempts,
        last_error=notification.last_error,
        created=created,
        next_attempt=when(notification.next_attempt_at, now) if waiting else None,
        sent=when(notification.sent_at, now),
    )


def _fact_rows(details: dict[str, Any], now: datetime) -> list[FactRow]:
    rows = []
    for item in details.get("facts", []):
        if not isinstance(item, dict):
            continue
        at = parse_datetime(str(item["at"])) if item.get("at") else None
        label, text = str(item.get("label", "")), str(item.get("text", ""))
        rows.append(FactRow(label=label, text=text, at=when(at, now)))
    return rows


def incident_detail(incident_id: int, now: datetime) -> IncidentDetail | None:
    incident = (
        Incident.objects.select_related("acknowledged_by")
        .exclude(state=IncidentState.PENDING)
        .filter(pk=incident_id)
        .first()
    )
    if incident is None:
        return None
    silence = _silences_by_key({incident.key}, now).get(incident.key)
    row = incident_row(incident, now, silence)
    notifications = [
        notification_row(notification, now)
        for notification in incident.notifications.order_by("created_at", "id")
    ]
    timeline = []
    for event in IncidentEvent.objects.filter(incident=incident).select_related("user"):
        at = when(event.at, now)
        assert at is not None
        timeline.append(
            TimelineEntry(
                at=at,
                kind=event.kind,
                label=event.get_kind_display(),
                text=event.text,
                user=event.user.get_username() if event.user else "",
            )
        )
    timeline += [
        TimelineEntry(
            at=notification.created,
            kind="notification",
            label=f"{notification.kind} mail #{notification.id}",
            text=notification.subject,
            user="",
            notification=notification,
        )
        for notification in notifications
    ]
    timeline.sort(key=lambda entry: entry.at.iso)
    details = incident.details or {}
    items = [str(item) for item in details.get("items", [])]
    total = int(details.get("items_total", len(items)) or 0)
    shown = items[:ITEMS_ON_PAGE]
    return IncidentDetail(
        row=row,
        is_open=incident.state == IncidentState.FIRING,
        rule_summary=RULE_SPECS[Rule(incident.rule)].summary,
        facts=_fact_rows(details, now),
        items_label=str(details.get("items_label", "")),
        items=shown,
        items_total=total,
        items_more=max(total - len(shown), 0),
        link=incident.link,
        silence=SilenceInfo(
            by=silence.created_by.get_username() if silence.created_by else "someone",
            until=when(silence.ends_at, now),  # type: ignore[arg-type]
            reason=silence.reason,
        )
        if silence
        else None,
        timeline=timeline,
        notifications=notifications,
        server_now=iso_js(now),
    )


# --- API -------------------------------------------------------------------------------------


def api_incidents(state: str, limit: int, now: datetime) -> list[dict[str, Any]]:
    incidents = Incident.objects.select_related("acknowledged_by").prefetch_related(
        Prefetch("notifications", queryset=Notification.objects.order_by("created_at", "id"))
    )
    if state == "open":
        incidents = incidents.filter(state=IncidentState.FIRING).order_by("-opened_at", "-id")
    elif state == "resolved":
        incidents = incidents.filter(state=IncidentState.RESOLVED).order_by("-resolved_at", "-id")
    else:
        incidents = incidents.exclude(state=IncidentState.PENDING).order_by("-opened_at", "-id")
    keys = set(incidents.values_list("key", flat=True)[:limit])
    silences = _silences_by_key(keys, now)
    return [
        {
            "id": incident.pk,
            "rule": incident.rule,
            "key": incident.key,
            "severity": incident.severity,
            "state": "open" if incident.state == IncidentState.FIRING else "resolved",
            "cluster": incident.cluster,
            "title": incident.title,
            "details": incident.details,
            "since": api_time(incident.since),
            "opened_at": api_time(incident.opened_at),
            "last_seen_at": api_time(incident.last_seen_at),
            "resolved_at": api_time(incident.resolved_at),
            "duration_seconds": round(incident.duration(now).total_seconds(), 3),
            "resolution": incident.resolution,
            "acknowledged_by": incident.acknowledged_by.get_username()
            if incident.acknowledged_by
            else None,
            "acknowledged_at": api_time(incident.acknowledged_at),
            "silenced_until": api_time(silences[incident.key].ends_at)
            if incident.key in silences
            else None,
            "url": f"{settings.DASHBOARD_URL}{incident.get_absolute_url()}",
            "notifications": [
                {
                    "id": notification.pk,
                    "kind": notification.kind,
                    "recipients": notification.recipients,
                    "state": notification.state,
                    "attempts": notification.attempts,
                    "created_at": api_time(notification.created_at),
                    "sent_at": api_time(notification.sent_at),
                    "next_attempt_at": api_time(notification.next_attempt_at)
                    if notification.state == DeliveryState.PENDING
                    else None,
                    "last_error": notification.last_error,
                }
                for notification in incident.notifications.all()
            ],
        }
        for incident in incidents[:limit]
    ]


# --- Metrics ---------------------------------------------------------------------------------


@dataclass(slots=True)
class AlertMetrics:
    open_incidents: dict[tuple[str, str], int]
    notifications: dict[str, int]
    evaluation_age_seconds: float | None
    oldest_unsent_seconds: float | None


def alert_metrics(now: datetime) -> AlertMetrics:
    open_counts = {(rule, severity): 0 for rule in Rule.values for severity in Severity.values}
    for row in (
        Incident.objects.filter(state=IncidentState.FIRING)
        .values("rule", "severity")
        .annotate(count=Count("id"))
        .order_by()
    ):
        open_counts[(row["rule"], row["severity"])] = row["count"]
    states = dict.fromkeys(DeliveryState.values, 0)
    for row in Notification.objects.values("state").annotate(count=Count("id")).order_by():
        states[row["state"]] = row["count"]
    oldest = Notification.objects.filter(
        state__in=[DeliveryState.PENDING, DeliveryState.SENDING]
    ).aggregate(oldest=Min("created_at"))["oldest"]
    status = EvaluatorStatus.objects.filter(pk=1).values_list("last_finished_at", flat=True).first()
    return AlertMetrics(
        open_incidents=open_counts,
        notifications=states,
        evaluation_age_seconds=(now - status).total_seconds() if status else None,
        oldest_unsent_seconds=(now - oldest).total_seconds() if oldest else None,
    )
