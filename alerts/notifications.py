"""Alert planning: which incidents are mailed to whom, and posted to which channel, now.

`plan_notifications` runs after every evaluation: who gets what, grouped per cluster, held
back by silences and inhibition, reminders as a digest. Each mail is rendered in its
recipients' language and time zone (one row per language, zone and set of incidents); each
alert channel (Dooray!, Slack, webhook) gets its own rows, planned alike by
`alerts.channels.planning`. The rows are committed before any task is queued, so a lost task
message delays an alert, never loses it: the `send_due_notifications` sweep finds every due
row (`alerts.delivery` sends them).
"""

from __future__ import annotations

import functools
import logging
import zoneinfo
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils.translation import gettext_noop

from alerts.channels import planning as channel_planning
from alerts.conditions import RuleConfig
from alerts.events import incident_event
from alerts.grouping import groups_due
from alerts.mail import render_notification
from alerts.models import (
    AlertSubscription,
    Hold,
    Incident,
    IncidentEvent,
    IncidentState,
    Notice,
    Notification,
    NotificationKind,
    Rule,
    Silence,
    severity_rank,
    split_addresses,
)
from alerts.queries import active_silences
from alerts.rules import load_rule_configs
from dashboard.timefmt import mail_moment_text

logger = logging.getLogger(__name__)

# Mail about these is held back while the cluster's API is down (a cluster_unhealthy
# incident with api_down): one mail about the cause, not one per symptom.
# A group's slots go unheld when its pods cannot reach the API: the same symptom.
INHIBITED_BY_API_DOWN = frozenset(
    {
        Rule.NODE_HEARTBEATS_EXPIRED,
        Rule.NODEGROUP_NOT_READY,
        Rule.LEADER_GROUP_UNSTAFFED,
        Rule.LEADER_GROUP_DEGRADED,
    }
)


# A recipient's language and time zone: what their mail is rendered in.
Profile = tuple[str, str]


def mail_profile(language: str = "", time_zone: str = "") -> Profile:
    """A saved choice, or the alert mail defaults for what was not chosen (or is no longer
    valid: a language since removed from LANGUAGES, a zone the system no longer knows)."""
    languages = {code for code, _ in settings.LANGUAGES}
    if language not in languages:
        language = settings.ALERT_EMAIL_LANGUAGE
    if time_zone:
        try:
            zoneinfo.ZoneInfo(time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            time_zone = ""
    return language, time_zone or settings.TIME_ZONE


@dataclass(frozen=True, slots=True)
class Audience:
    """Who may get mail: ALERT_EMAIL_TO, and users subscribed on their profile page.

    A subscriber's mail is in their saved language and zone; every other address (ALERT_EMAIL_TO,
    a rule's recipients) gets ALERT_EMAIL_LANGUAGE and TIME_ZONE. An address that is both a
    subscriber's and in a list is one person: their own choice wins.
    """

    default: tuple[str, ...]
    subscribers: tuple[tuple[str, int], ...]
    profiles: dict[str, Profile] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Audience:
        rows = (
            # Only a confirmed address: anyone may type any address on the form.
            AlertSubscription.objects.filter(
                enabled=True, user__is_active=True, confirmed_email=F("user__email")
            )
            .exclude(user__email="")
            .values_list(
                "user__email",
                "min_severity",
                "user__preference__language",
                "user__preference__time_zone",
            )
        )
        subscribers = []
        profiles: dict[str, Profile] = {}
        for email, minimum, language, time_zone in rows:
            subscribers.append((email, severity_rank(minimum)))
            profiles[email.strip().lower()] = mail_profile(language or "", time_zone or "")
        return cls(
            default=tuple(settings.ALERT_EMAIL_TO),
            subscribers=tuple(subscribers),
            profiles=profiles,
        )

    def recipients_for(self, incident: Incident, config: RuleConfig) -> list[str]:
        addresses = list(config.recipients)
        if config.mail_default_recipients:
            addresses += self.default
        rank = severity_rank(incident.severity)
        addresses += [email for email, minimum in self.subscribers if rank >= minimum]
        return split_addresses(",".join(addresses))

    def profile_of(self, address: str) -> Profile:
        return self.profiles.get(address.lower()) or mail_profile()


@dataclass(slots=True)
class _Plan:
    now: datetime
    configs: dict[Rule, RuleConfig]
    audience: Audience
    created: list[Notification] = field(default_factory=list)
    events: list[IncidentEvent] = field(default_factory=list)


def inhibiting_incidents(incidents: Iterable[Incident]) -> dict[str, Incident]:
    """Group name -> the unresolved cluster_unhealthy incident whose API-down inhibits it."""
    inhibitors: dict[str, Incident] = {}
    for incident in incidents:
        if incident.rule != Rule.CLUSTER_UNHEALTHY or not incident.details.get("api_down"):
            continue
        for name in {incident.cluster, *incident.details.get("aliases", [])}:
            inhibitors[str(name)] = incident
    return inhibitors


# Timeline texts are message ids with values (alerts.events.incident_event), so each reader
# sees them in their language; the values are data and times, never translated.
SILENCED_BY = gettext_noop("mail held back: silenced by %(who)s until %(until)s")
SILENCED = gettext_noop("mail held back: silenced until %(until)s")
INHIBITED = gettext_noop(
    "mail held back: the cluster's API is down (%(cause)s); it is mailed if it outlasts that"
)
UNHELD = gettext_noop("mail no longer held back")
NO_RESOLVE_SILENCED = gettext_noop("no resolve mail: silenced")
QUEUED = {
    NotificationKind.OPENED: gettext_noop(
        "opened mail #%(id)s queued (recipients: %(count)s, language: %(language)s)"
    ),
    NotificationKind.RESOLVED: gettext_noop(
        "resolved mail #%(id)s queued (recipients: %(count)s, language: %(language)s)"
    ),
    NotificationKind.REMINDER: gettext_noop(
        "reminder mail #%(id)s queued (recipients: %(count)s, language: %(language)s)"
    ),
}
NOBODY = {
    NotificationKind.OPENED: gettext_noop(
        "no opened mail: no recipients (set ALERT_EMAIL_TO, a rule's recipients in admin, "
        "or subscribe at /alerts/subscription/)"
    ),
    NotificationKind.RESOLVED: gettext_noop(
        "no resolved mail: no recipients (set ALERT_EMAIL_TO, a rule's recipients in admin, "
        "or subscribe at /alerts/subscription/)"
    ),
    NotificationKind.REMINDER: gettext_noop(
        "no reminder mail: no recipients (set ALERT_EMAIL_TO, a rule's recipients in admin, "
        "or subscribe at /alerts/subscription/)"
    ),
}


def _hold_for(
    incident: Incident, silences: dict[str, Silence], inhibitors: dict[str, Incident]
) -> tuple[str, str, dict[str, object]]:
    """Whether mail about `incident` is held back now, and the timeline's message and values."""
    silence = silences.get(incident.key)
    if silence is not None:
        until = mail_moment_text(silence.ends_at)
        if silence.created_by is None:
            return Hold.SILENCED, SILENCED, {"until": until}
        return (
            Hold.SILENCED,
            SILENCED_BY,
            {"who": silence.created_by.get_username(), "until": until},
        )
    inhibitor = inhibitors.get(incident.cluster)
    if incident.rule in INHIBITED_BY_API_DOWN and inhibitor is not None:
        # The cause's title as a message: each reader sees it in their language.
        return Hold.INHIBITED, INHIBITED, {"cause": inhibitor.full_title_message}
    return Hold.NONE, UNHELD, {}


@transaction.atomic
def plan_notifications(now: datetime, *, dispatch: bool = True) -> list[int]:
    """Create the notifications that are due now; returns their ids.

    Grouping: the first mail about a cluster goes out at once; incidents of that cluster
    opened (or resolved) within ALERT_GROUP_SECONDS after it wait for the window to end and
    then share one mail. So a burst is one mail (plus at most one per window), and the first
    word of trouble is never delayed (Alertmanager's group_wait would hold it for 30 s).
    """
    plan = _Plan(now=now, configs=load_rule_configs(), audience=Audience.load())
    silences = active_silences(now)
    unresolved = list(
        Incident.objects.select_for_update()
        .filter(resolved_at__isnull=True)
        .order_by("opened_at", "id")
    )
    open_incidents = [i for i in unresolved if i.state == IncidentState.FIRING]
    # A pending API-down inhibits too: the cause is known, only not yet past its grace, and
    # the symptoms' mail should not race ahead of it. If it clears, the symptoms are mailed.
    inhibitors = inhibiting_incidents(unresolved)
    for incident in open_incidents:
        hold, message, args = _hold_for(incident, silences, inhibitors)
        if hold != incident.hold:
            incident.hold = hold
            Incident.objects.filter(pk=incident.pk).update(hold=hold)
            plan.events.append(
                incident_event(incident, IncidentEvent.Kind.HELD, message, now, args=args)
            )

    resolved = []
    for incident in Incident.objects.select_for_update().filter(
        state=IncidentState.RESOLVED, resolve_notice=Notice.WAITING
    ):
        if incident.key in silences:
            incident.resolve_notice = Notice.SKIPPED
            incident.save(update_fields=["resolve_notice"])
            plan.events.append(
                incident_event(incident, IncidentEvent.Kind.HELD, NO_RESOLVE_SILENCED, now, args={})
            )
        else:
            resolved.append(incident)
    _plan_grouped(plan, NotificationKind.RESOLVED, resolved)

    announce = [i for i in open_incidents if i.open_notice == Notice.WAITING and not i.hold]
    _plan_grouped(plan, NotificationKind.OPENED, announce)

    _plan_reminders(plan, open_incidents)
    # Chat and webhook channels: the same incidents, holds and windows, counted per channel.
    for channel in channel_planning.enabled_channels():
        channel_planning.plan_channel(
            channel,
            now,
            unresolved=unresolved,
            silences=silences,
            created=plan.created,
            events=plan.events,
        )
    IncidentEvent.objects.bulk_create(plan.events)
    ids = [notification.pk for notification in plan.created]
    if dispatch and ids:
        transaction.on_commit(functools.partial(dispatch_notifications, ids))
    return ids


def _plan_grouped(plan: _Plan, kind: NotificationKind, incidents: Sequence[Incident]) -> None:
    # A cluster still in its window is collected into one mail when the window ends.
    for group, members in groups_due(kind, incidents, plan.now):
        _create_notifications(plan, kind, group, members)


def _plan_reminders(plan: _Plan, open_incidents: Sequence[Incident]) -> None:
    """A digest of what is still open, unacknowledged and mailed, every ALERT_REMIND_HOURS.

    When one incident is due, those mailed more than half an interval ago come along, so
    the digests of incidents opened at different times align instead of trickling in.
    """
    if not settings.ALERT_REMIND_HOURS:
        return
    interval = timedelta(hours=settings.ALERT_REMIND_HOURS)
    candidates = [
        incident
        for incident in open_incidents
        if incident.open_notice == Notice.MAILED
        and incident.acknowledged_at is None
        and not incident.hold
        and incident.last_mailed_at is not None
    ]
    if not any(i.last_mailed_at <= plan.now - interval for i in candidates):  # type: ignore[operator]
        return
    digest = [i for i in candidates if i.last_mailed_at <= plan.now - interval / 2]  # type: ignore[operator]
    _create_notifications(plan, NotificationKind.REMINDER, "", digest)


def _create_notifications(
    plan: _Plan, kind: NotificationKind, group: str, incidents: Sequence[Incident]
) -> None:
    """One notification per language, time zone and distinct set of incidents."""
    wanted: dict[str, set[int]] = {}
    spelling: dict[str, str] = {}
    nobody = []
    for incident in incidents:
        addresses = plan.audience.recipients_for(incident, plan.configs[Rule(incident.rule)])
        if not addresses:
            nobody.append(incident)
        for address in addresses:
            spelling.setdefault(address.lower(), address)
            wanted.setdefault(address.lower(), set()).add(incident.pk)
    by_set: dict[tuple[Profile, frozenset[int]], list[str]] = defaultdict(list)
    for address, ids in wanted.items():
        by_set[(plan.audience.profile_of(address), frozenset(ids))].append(spelling[address])
    by_id = {incident.pk: incident for incident in incidents}
    for ((language, time_zone), ids), recipients in sorted(
        by_set.items(), key=lambda item: (item[0][0], sorted(item[0][1]))
    ):
        members = [by_id[pk] for pk in sorted(ids)]
        rendered = render_notification(
            kind, members, plan.now, language=language, time_zone=time_zone
        )
        notification = Notification.objects.create(
            kind=kind,
            group=group,
            recipients=sorted(recipients, key=str.lower),
            subject=rendered.subject,
            body_text=rendered.text,
            body_html=rendered.html,
            language=language,
            time_zone=time_zone,
            created_at=plan.now,
            next_attempt_at=plan.now,
        )
        notification.incidents.add(*members)
        plan.created.append(notification)
        for incident in members:
            plan.events.append(
                incident_event(
                    incident,
                    IncidentEvent.Kind.MAIL,
                    QUEUED[kind],
                    plan.now,
                    args={"id": notification.pk, "count": len(recipients), "language": language},
                )
            )
    mailed = [incident.pk for incident in incidents if incident not in nobody]
    skipped = [incident.pk for incident in nobody]
    for incident in nobody:
        plan.events.append(
            incident_event(incident, IncidentEvent.Kind.HELD, NOBODY[kind], plan.now, args={})
        )
    if kind == NotificationKind.OPENED:
        Incident.objects.filter(pk__in=mailed).update(
            open_notice=Notice.MAILED, last_mailed_at=plan.now
        )
        Incident.objects.filter(pk__in=skipped).update(open_notice=Notice.SKIPPED)
    elif kind == NotificationKind.RESOLVED:
        Incident.objects.filter(pk__in=mailed).update(resolve_notice=Notice.MAILED)
        Incident.objects.filter(pk__in=skipped).update(resolve_notice=Notice.SKIPPED)
    else:
        Incident.objects.filter(pk__in=[*mailed, *skipped]).update(last_mailed_at=plan.now)


def dispatch_notifications(ids: Sequence[int]) -> None:
    """Queue a send task per notification. A broker outage only delays: the sweep sends."""
    from kombu.exceptions import OperationalError

    from alerts.tasks import send_notification

    for notification_id in ids:
        try:
            send_notification.delay(notification_id)
        except OperationalError:
            logger.warning("alerts: broker unreachable; notification %s waits for the sweep", ids)
            return
