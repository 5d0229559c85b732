"""One incident's page: its facts, the items it lists, its silence, and a timeline that
interleaves what happened to it with the mail sent about it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext

from alerts.models import (
    DeliveryState,
    Incident,
    IncidentEvent,
    IncidentState,
    Notification,
    NotificationKind,
    Rule,
)
from alerts.presenters.incident_links import incident_links
from alerts.presenters.incident_list import IncidentRow, incident_row
from alerts.queries import active_silences
from alerts.rules import RULE_SPECS
from dashboard.timefmt import When, iso_js, when

ITEMS_ON_PAGE = 200


@dataclass(slots=True)
class FactRow:
    label: str
    text: str
    at: When | None
    token: str = ""  # a leader-k8s fencing token, beside the holder's identity


@dataclass(slots=True)
class NotificationRow:
    id: int
    kind: str
    subject: str
    recipients: list[str]
    state: str
    state_label: str
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
class ListedItem:
    text: str
    url: str = ""  # a node's page, when the item is a node that exists


@dataclass(slots=True)
class IncidentDetail:
    row: IncidentRow
    is_open: bool
    rule_summary: str
    facts: list[FactRow]
    items_label: str
    items: list[ListedItem]
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
        state_label=str(notification.get_state_display()),
        attempts=notification.attempts,
        last_error=notification.last_error,
        created=created,
        next_attempt=when(notification.next_attempt_at, now) if waiting else None,
        sent=when(notification.sent_at, now),
    )


def _fact_rows(facts: list[dict[str, str]], now: datetime) -> list[FactRow]:
    rows = []
    for item in facts:
        at = parse_datetime(item["at"]) if item.get("at") else None
        rows.append(
            FactRow(
                label=item["label"],
                text=item["text"],
                at=when(at, now),
                token=item.get("token", ""),
            )
        )
    return rows


def _kind_label(kind: str) -> str:
    try:
        return str(NotificationKind(kind).label)
    except ValueError:
        return kind


def incident_detail(incident_id: int, now: datetime) -> IncidentDetail | None:
    incident = (
        Incident.objects.select_related("acknowledged_by")
        .exclude(state=IncidentState.PENDING)
        .filter(pk=incident_id)
        .first()
    )
    if incident is None:
        return None
    silence = active_silences(now, [incident.key]).get(incident.key)
    row = incident_row(incident, now, silence, incident_links([incident])[incident.pk])
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
                label=str(event.get_kind_display()),
                text=event.display_text,
                user=event.user.get_username() if event.user else "",
            )
        )
    timeline += [
        TimelineEntry(
            at=notification.created,
            kind="notification",
            label=gettext("%(kind)s mail #%(id)s")
            % {"kind": _kind_label(notification.kind), "id": notification.id},
            text=notification.subject,
            user="",
            notification=notification,
        )
        for notification in notifications
    ]
    timeline.sort(key=lambda entry: entry.at.iso)
    details = incident.details or {}
    shown = incident.display_items(ITEMS_ON_PAGE)
    raw = [str(item) for item in details.get("items", [])][:ITEMS_ON_PAGE]
    node_urls = {link.name: link.url for link in row.links if link.kind == "node"}
    total = int(details.get("items_total", len(details.get("items", []))) or 0)
    return IncidentDetail(
        row=row,
        is_open=incident.state == IncidentState.FIRING,
        rule_summary=str(RULE_SPECS[Rule(incident.rule)].summary),
        facts=_fact_rows(incident.display_facts(), now),
        items_label=incident.display_items_label,
        items=[
            ListedItem(text, node_urls.get(raw[index], "") if index < len(raw) else "")
            for index, text in enumerate(shown)
        ],
        items_total=total,
        items_more=max(total - len(shown), 0),
        link=incident.link,
        silence=SilenceInfo(
            by=silence.created_by.get_username() if silence.created_by else gettext("someone"),
            until=when(silence.ends_at, now),  # type: ignore[arg-type]
            reason=silence.reason,
        )
        if silence
        else None,
        timeline=timeline,
        notifications=notifications,
        server_now=iso_js(now),
    )
