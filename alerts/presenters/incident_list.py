"""The alerts page: open incidents first, then recent resolved ones, and the evaluator's pulse.

Rows carry display strings computed here (CSS classes are the template's: `alerts_css`);
every time is judged against one `now` passed in by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Case, F, Value
from django.db.models import When as CaseWhen
from django.db.models.functions import Coalesce

from alerts import deadman
from alerts.models import (
    SEVERITY_RANK,
    EvaluatorStatus,
    Incident,
    IncidentState,
    Silence,
)
from alerts.presenters.incident_links import ObjectLink, incident_links
from alerts.queries import IncidentFilters, active_silences, filter_incidents
from alerts.rules import RULE_SPECS
from dashboard.timefmt import When, format_duration, iso_js, when

RESOLVED_LIMIT = 50
# Open incidents shown at once; the count says how many more the filters would narrow down.
OPEN_LIMIT = 100
# Critical first, then the unacknowledged, then the newest (opened, or its condition began).
OPEN_ORDER = (
    Case(
        *(CaseWhen(severity=level, then=Value(rank)) for level, rank in SEVERITY_RANK.items()),
        default=Value(0),
    ).desc(),
    Case(CaseWhen(acknowledged_at__isnull=True, then=Value(0)), default=Value(1)).asc(),
    Coalesce("opened_at", "since").desc(),
    F("id").desc(),
)
RESOLVED_FILTERED_LIMIT = 200
COMPACT_NODES = 3  # node links in a list row; the incident page has them all


@dataclass(slots=True)
class IncidentRow:
    id: int
    url: str
    key: str
    rule: str
    rule_label: str
    severity: str
    severity_label: str
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
    silenced_by: str
    hold: str
    links: list[ObjectLink] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.state == IncidentState.FIRING

    @property
    def object_links(self) -> list[ObjectLink]:
        """The incident page's links; its nodes are linked in the list of items instead."""
        return [link for link in self.links if link.kind != "node"]

    @property
    def anchor(self) -> str:
        """The row's id on the list: actions come back to it (focused, tabindex=-1)."""
        return f"incident-{self.id}"

    @property
    def compact_links(self) -> list[ObjectLink]:
        """The list's links: every kind, but only the first few of many nodes."""
        nodes = [link for link in self.links if link.kind == "node"][:COMPACT_NODES]
        return [link for link in self.links if link.kind != "node" or link in nodes]

    @property
    def more_links(self) -> int:
        return len(self.links) - len(self.compact_links)


@dataclass(slots=True)
class DeadmanInfo:
    """The dead-man's switch's last ping, never its URL."""

    last: When | None
    ok: bool
    # Our own words for what went wrong ("HTTP 503 Service Unavailable"), "" when it was ok.
    problem: str


@dataclass(slots=True)
class EvaluatorInfo:
    last_run: When | None
    silent: bool
    last_error: str
    interval: int
    # None while the switch is off (no DEADMAN_URL).
    deadman: DeadmanInfo | None = None


@dataclass(slots=True)
class IncidentTables:
    open: list[IncidentRow]
    open_total: int
    resolved: list[IncidentRow]
    resolved_limit: int
    evaluator: EvaluatorInfo
    server_now: str
    show_open: bool
    show_resolved: bool
    rules: list[tuple[str, str]] = field(default_factory=list)


def incident_row(
    incident: Incident,
    now: datetime,
    silence: Silence | None,
    links: list[ObjectLink] | None = None,
) -> IncidentRow:
    since = when(incident.since, now)
    last_seen = when(incident.last_seen_at, now)
    assert since is not None and last_seen is not None  # required fields
    return IncidentRow(
        id=incident.pk,
        url=incident.get_absolute_url(),
        key=incident.key,
        rule=incident.rule,
        rule_label=str(incident.get_rule_display()),
        severity=incident.severity,
        severity_label=str(incident.get_severity_display()),
        state=incident.state,
        cluster=incident.cluster,
        # In the reader's language; the English as written for rows without message ids.
        title=incident.display_title,
        since=since,
        opened=when(incident.opened_at, now),
        last_seen=last_seen,
        resolved=when(incident.resolved_at, now),
        duration=format_duration(incident.duration(now).total_seconds()),
        resolution=incident.display_resolution,
        acknowledged_by=incident.acknowledged_by.get_username() if incident.acknowledged_by else "",
        acknowledged=when(incident.acknowledged_at, now),
        silenced_until=when(silence.ends_at, now) if silence else None,
        # Who set it (active_silences reads its author with it); "" for a deleted account.
        silenced_by=silence.created_by.get_username() if silence and silence.created_by else "",
        hold=str(incident.get_hold_display()) if incident.hold else "",
        links=links or [],
    )


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
        deadman=deadman_info(now),
    )


def deadman_info(now: datetime) -> DeadmanInfo | None:
    if not deadman.enabled():
        return None
    ping = deadman.last_ping()
    if ping is None:
        return DeadmanInfo(last=None, ok=False, problem="")
    moment = datetime.fromtimestamp(ping.at, UTC)
    return DeadmanInfo(last=when(moment, now), ok=ping.ok, problem="" if ping.ok else ping.text)


def incident_tables(filters: IncidentFilters, now: datetime) -> IncidentTables:
    """Open incidents (critical, then unacknowledged, then newest first); recent resolved."""
    incidents = filter_incidents(filters).select_related("acknowledged_by")
    show_open = filters.state in ("", "open")
    show_resolved = filters.state in ("", "resolved")
    open_incidents: list[Incident] = []
    open_total = 0
    if show_open:
        firing = incidents.filter(state=IncidentState.FIRING)
        # Sorted in SQL so only a page is read: a storm of incidents costs one page.
        open_incidents = list(firing.order_by(*OPEN_ORDER)[:OPEN_LIMIT])
        open_total = firing.count() if len(open_incidents) == OPEN_LIMIT else len(open_incidents)
    limit = RESOLVED_FILTERED_LIMIT if filters.state == "resolved" else RESOLVED_LIMIT
    resolved = (
        list(incidents.filter(state=IncidentState.RESOLVED).order_by("-resolved_at", "-id")[:limit])
        if show_resolved
        else []
    )
    # A resolved incident's key may still be silenced (the silence outlives it): shown too.
    silences = active_silences(now, {i.key for i in [*open_incidents, *resolved]})
    links = incident_links([*open_incidents, *resolved])
    return IncidentTables(
        open=[incident_row(i, now, silences.get(i.key), links[i.pk]) for i in open_incidents],
        open_total=open_total,
        resolved=[incident_row(i, now, silences.get(i.key), links[i.pk]) for i in resolved],
        resolved_limit=limit,
        evaluator=evaluator_info(now),
        server_now=iso_js(now),
        show_open=show_open,
        show_resolved=show_resolved,
        rules=[(rule.value, str(rule.label)) for rule in RULE_SPECS],
    )
