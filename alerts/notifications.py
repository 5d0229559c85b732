"""Mail planning: which incidents are mailed to whom, now, as `Notification` rows.

`plan_notifications` runs after every evaluation: who gets what, grouped per cluster, held
back by silences and inhibition, reminders as a digest. The rows are committed before any
task is queued, so a lost task message delays mail, never loses it: the
`send_due_notifications` sweep finds every due row (`alerts.delivery` sends them).
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from alerts.conditions import RuleConfig
from alerts.events import incident_event
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


@dataclass(frozen=True, slots=True)
class Audience:
    """Who may get mail: ALERT_EMAIL_TO, and users subscribed on their profile page."""

    default: tuple[str, ...]
    subscribers: tuple[tuple[str, int], ...]

    @classmethod
    def load(cls) -> Audience:
        rows = (
            AlertSubscription.objects.filter(enabled=True, user__is_active=True)
            .exclude(user__email="")
            .values_list("user__email", "min_severity")
        )
        return cls(
            default=tuple(settings.ALERT_EMAIL_TO),
            subscribers=tuple((email, severity_rank(minimum)) for email, minimum in rows),
        )

    def recipients_for(self, incident: Incident, config: RuleConfig) -> list[str]:
        addresses = list(config.recipients)
        if config.mail_default_recipients:
            addresses += self.default
        rank = severity_rank(incident.severity)
        addresses += [email for email, minimum in self.subscribers if rank >= minimum]
        return split_addresses(",".join(addresses))


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


def _hold_for(
    incident: Incident, silences: dict[str, Silence], inhibitors: dict[str, Incident]
) -> tuple[str, str]:
    silence = silences.get(incident.key)
    if silence is not None:
        who = silence.created_by.get_username() if silence.created_by else "someone"
        return (
            Hold.SILENCED,
            f"mail held back: silenced by {who} until {mail_moment_text(silence.ends_at)}",
        )
    inhibitor = inhibitors.get(incident.cluster)
    if incident.rule in INHIBITED_BY_API_DOWN and inhibitor is not None:
        return Hold.INHIBITED, (
            f"mail held back: the cluster's API is down ({inhibitor.title}); "
            "it is mailed if it outlasts that"
        )
    return Hold.NONE, "mail no longer held back"


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
        hold, text = _hold_for(incident, silences, inhibitors)
        if hold != incident.hold:
            incident.hold = hold
            Incident.objects.filter(pk=incident.pk).update(hold=hold)
            plan.events.append(incident_event(incident, IncidentEvent.Kind.HELD, text, now))

    resolved = []
    for incident in Incident.objects.select_for_update().filter(
        state=IncidentState.RESOLVED, resolve_notice=Notice.WAITING
    ):
        if incident.key in silences:
            incident.resolve_notice = Notice.SKIPPED
            incident.save(update_fields=["resolve_notice"])
            plan.events.append(
                incident_event(incident, IncidentEvent.Kind.HELD, "no resolve mail: silenced", now)
            )
        else:
            resolved.append(incident)
    _plan_grouped(plan, NotificationKind.RESOLVED, resolved)

    announce = [i for i in open_incidents if i.open_notice == Notice.WAITING and not i.hold]
    _plan_grouped(plan, NotificationKind.OPENED, announce)

    _plan_reminders(plan, open_incidents)
    IncidentEvent.objects.bulk_create(plan.events)
    ids = [notification.pk for notification in plan.created]
    if dispatch and ids:
        transaction.on_commit(functools.partial(dispatch_notifications, ids))
    return ids


def _plan_grouped(plan: _Plan, kind: NotificationKind, incidents: Sequence[Incident]) -> None:
    by_group: dict[str, list[Incident]] = defaultdict(list)
    for incident in incidents:
        by_group[incident.cluster].append(incident)
    window = timedelta(seconds=settings.ALERT_GROUP_SECONDS)
    for group, members in by_group.items():
        if (
            window
            and Notification.objects.filter(
                kind=kind, group=group, created_at__gt=plan.now - window
            ).exists()
        ):
            continue  # collected into one mail when the window since the last one ends
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
    """One notification per distinct set of incidents a recipient should get."""
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
    by_set: dict[frozenset[int], list[str]] = defaultdict(list)
    for address, ids in wanted.items():
        by_set[frozenset(ids)].append(spelling[address])
    by_id = {incident.pk: incident for incident in incidents}
    for ids, recipients in by_set.items():
        members = [by_id[pk] for pk in sorted(ids)]
        rendered = render_notification(kind, members, plan.now)
        notification = Notification.objects.create(
            kind=kind,
            group=group,
            recipients=sorted(recipients, key=str.lower),
            subject=rendered.subject,
            body_text=rendered.text,
            body_html=rendered.html,
            created_at=plan.now,
            next_attempt_at=plan.now,
        )
        notification.incidents.add(*members)
        plan.created.append(notification)
        count = len(recipients)
        for incident in members:
            plan.events.append(
                incident_event(
                    incident,
                    IncidentEvent.Kind.MAIL,
                    f"{kind} mail #{notification.pk} queued for {count} "
                    f"recipient{'s' if count != 1 else ''}",
                    plan.now,
                )
            )
    mailed = [incident.pk for incident in incidents if incident not in nobody]
    skipped = [incident.pk for incident in nobody]
    for incident in nobody:
        plan.events.append(
            incident_event(
                incident,
                IncidentEvent.Kind.HELD,
                f"no {kind} mail: no recipients (set ALERT_EMAIL_TO, a rule's recipients in "
                "admin, or subscribe at /alerts/subscription/)",
                plan.now,
            )
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
