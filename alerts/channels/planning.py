"""Channel messages planned beside the mail: which incidents each channel is told about.

A channel's filter (rules, minimum severity, clusters) picks its incidents; then the mail's
rules apply to it alone: the first message about a cluster goes out at once, later ones wait
for the end of ALERT_GROUP_SECONDS counted from this channel's last message (not the mail's),
held incidents (silenced, inhibited) are not announced, a silenced resolution is not posted,
and reminders skip acknowledged incidents. What a channel was already told is read from its
own rows (an incident in one of its "opened" messages was announced there), so the mail's
notices on the incident stay the mail's.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone, translation
from django.utils.translation import gettext_noop

from alerts.channels import payloads
from alerts.events import incident_event
from alerts.grouping import groups_due
from alerts.mail import clean_header_text, render_notification
from alerts.models import (
    AlertChannel,
    Incident,
    IncidentEvent,
    IncidentState,
    Notification,
    NotificationKind,
    Silence,
    severity_rank,
)

# A group name no cluster can have (cluster names are DNS labels): the admin's test message,
# kept out of the grouping windows and out of storm summaries.
TEST_GROUP = "#test"

QUEUED = {
    NotificationKind.OPENED: gettext_noop(
        "opened message #%(id)s queued for the channel %(channel)s"
    ),
    NotificationKind.RESOLVED: gettext_noop(
        "resolved message #%(id)s queued for the channel %(channel)s"
    ),
    NotificationKind.REMINDER: gettext_noop(
        "reminder message #%(id)s queued for the channel %(channel)s"
    ),
}


def enabled_channels() -> list[AlertChannel]:
    return list(AlertChannel.objects.filter(enabled=True).order_by("name"))


def channel_profile(channel: AlertChannel) -> tuple[str, str]:
    """The channel's language and zone, or the alert mail's defaults."""
    languages = {code for code, _ in settings.LANGUAGES}
    language = channel.language if channel.language in languages else ""
    time_zone = channel.time_zone
    if time_zone:
        try:
            zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            time_zone = ""
    return language or settings.ALERT_EMAIL_LANGUAGE, time_zone or settings.TIME_ZONE


@contextmanager
def rendering_for(channel: AlertChannel) -> Iterator[tuple[str, str]]:
    """The channel's language and zone active (payloads are rendered in them)."""
    language, time_zone = channel_profile(channel)
    with translation.override(language), timezone.override(zoneinfo.ZoneInfo(time_zone)):
        yield language, time_zone


def matches(channel: AlertChannel, incident: Incident) -> bool:
    """The channel's filter: its rules (none: all), its minimum severity, its clusters."""
    if channel.rules and incident.rule not in channel.rules:
        return False
    if severity_rank(incident.severity) < severity_rank(channel.min_severity):
        return False
    return not channel.clusters or incident.cluster in channel.clusters


def _already(channel: AlertChannel, kind: str, ids: Iterable[int]) -> set[int]:
    """Which of these incidents are in one of the channel's messages of this kind."""
    through = Notification.incidents.through
    return set(
        through.objects.filter(
            notification__channel=channel, notification__kind=kind, incident_id__in=list(ids)
        ).values_list("incident_id", flat=True)
    )


def plan_channel(
    channel: AlertChannel,
    now: datetime,
    *,
    unresolved: Sequence[Incident],
    silences: dict[str, Silence],
    created: list[Notification],
    events: list[IncidentEvent],
) -> None:
    """Plan this channel's messages (inside plan_notifications' transaction)."""
    open_incidents = [
        i for i in unresolved if i.state == IncidentState.FIRING and matches(channel, i)
    ]
    announced = _already(channel, NotificationKind.OPENED, [i.pk for i in open_incidents])
    announce = [i for i in open_incidents if not i.hold and i.pk not in announced]

    # Resolutions: only of what this channel announced, within the retry horizon (an older
    # one is history, not news), and not of a silenced key.
    horizon = now - timedelta(hours=settings.ALERT_RETRY_HOURS)
    told = Notification.incidents.through.objects.filter(
        notification__channel=channel, notification__kind=NotificationKind.OPENED
    ).values("incident_id")
    done = Notification.incidents.through.objects.filter(
        notification__channel=channel, notification__kind=NotificationKind.RESOLVED
    ).values("incident_id")
    resolved = [
        incident
        for incident in Incident.objects.filter(
            state=IncidentState.RESOLVED, resolved_at__gte=horizon, pk__in=told
        )
        .exclude(pk__in=done)
        .order_by("resolved_at", "id")
        if incident.key not in silences
    ]
    _plan_grouped(channel, now, NotificationKind.RESOLVED, resolved, created, events)
    _plan_grouped(channel, now, NotificationKind.OPENED, announce, created, events)
    _plan_reminders(channel, now, open_incidents, announced, created, events)


def _plan_grouped(
    channel: AlertChannel,
    now: datetime,
    kind: NotificationKind,
    incidents: Sequence[Incident],
    created: list[Notification],
    events: list[IncidentEvent],
) -> None:
    # A cluster still in the channel's window is collected into one message when it ends.
    for group, members in groups_due(kind, incidents, now, channel):
        _create(channel, now, kind, group, members, created, events)


def _plan_reminders(
    channel: AlertChannel,
    now: datetime,
    open_incidents: Sequence[Incident],
    announced: set[int],
    created: list[Notification],
    events: list[IncidentEvent],
) -> None:
    """The mail's reminder digest, timed by this channel's own last message about each."""
    if not settings.ALERT_REMIND_HOURS:
        return
    interval = timedelta(hours=settings.ALERT_REMIND_HOURS)
    candidates = [
        i for i in open_incidents if i.pk in announced and i.acknowledged_at is None and not i.hold
    ]
    if not candidates:
        return
    last = dict(
        Notification.incidents.through.objects.filter(
            notification__channel=channel, incident_id__in=[i.pk for i in candidates]
        )
        .values("incident_id")
        .annotate(at=Max("notification__created_at"))
        .values_list("incident_id", "at")
    )
    if not any(last[i.pk] <= now - interval for i in candidates if i.pk in last):
        return
    digest = [i for i in candidates if i.pk in last and last[i.pk] <= now - interval / 2]
    _create(channel, now, NotificationKind.REMINDER, "", digest, created, events)


def _create(
    channel: AlertChannel,
    now: datetime,
    kind: NotificationKind,
    group: str,
    incidents: Sequence[Incident],
    created: list[Notification],
    events: list[IncidentEvent],
) -> None:
    with rendering_for(channel) as (language, time_zone):
        payload = payloads.build(channel.kind, kind, incidents, now)
    # The mail's subject names it in the admin's list, in the same language as the message.
    subject = render_notification(kind, incidents, now, language=language, time_zone=time_zone)
    notification = Notification.objects.create(
        kind=kind,
        group=group,
        channel=channel,
        recipients=[],
        subject=clean_header_text(subject.subject, 300),
        body_text="",
        body_html="",
        payload=payload,
        language=language,
        time_zone=time_zone,
        created_at=now,
        next_attempt_at=now,
    )
    notification.incidents.add(*incidents)
    created.append(notification)
    for incident in incidents:
        events.append(
            incident_event(
                incident,
                IncidentEvent.Kind.MAIL,
                QUEUED[kind],
                now,
                args={"id": notification.pk, "channel": channel.name},
            )
        )


@transaction.atomic
def queue_test_message(channel: AlertChannel, now: datetime | None = None) -> Notification:
    """The admin's "send test message": a row in the outbox like any alert, sent by a task."""
    now = now or timezone.now()
    with rendering_for(channel) as (language, time_zone):
        payload = payloads.probe_message(channel.kind, channel.name, now)
        subject = str(payload.get("text", ""))
    notification = Notification.objects.create(
        kind=NotificationKind.OPENED,
        group=TEST_GROUP,
        channel=channel,
        recipients=[],
        subject=clean_header_text(subject, 300),
        body_text="",
        body_html="",
        payload=payload,
        language=language,
        time_zone=time_zone,
        created_at=now,
        next_attempt_at=now,
    )
    # Imported here: alerts.notifications plans channels with this module (a cycle at import).
    from alerts.notifications import dispatch_notifications

    transaction.on_commit(lambda: dispatch_notifications([notification.pk]))
    return notification
