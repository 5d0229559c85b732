"""Alert domain functions: evaluate rules into incidents, plan e-mails, deliver them, act.

Evaluation (`run_evaluation`, every ALERT_EVAL_SECONDS from beat, or `check_alerts`):

1. each rule's outcome (`alerts.rules`) is applied to its unresolved incidents in one
   transaction per rule: open (or keep pending until the grace passes), update, resolve,
   or leave frozen. A partial unique index allows one unresolved incident per key; an
   insert that loses a race against another evaluation catches the IntegrityError and
   updates the winner's row. A short lock in caches["locks"] keeps evaluations from running
   side by side at all, so grouping decisions are made by one process at a time.
2. `plan_notifications` turns incidents into `Notification` rows: who gets what, grouped
   per cluster, held back by silences and inhibition, reminders as a digest. The rows are
   committed before any task is queued, so a lost task message delays mail, never loses it:
   the `send_due_notifications` sweep finds every due row.

Delivery (`deliver_notification`) claims a row with a conditional update before it talks
to SMTP; its docstring says why a crash costs at most one duplicate and never a lost mail.
"""

from __future__ import annotations

import functools
import logging
import random
import smtplib
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from hashlib import sha256

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from alerts.conditions import Condition, RuleConfig, RuleContext, RuleOutcome
from alerts.lease_rules import stale_kube_cluster_names
from alerts.mail import build_message, render_notification
from alerts.models import (
    AlertSubscription,
    DeliveryState,
    EvaluatorStatus,
    Hold,
    Incident,
    IncidentEvent,
    IncidentState,
    Notice,
    Notification,
    NotificationKind,
    Rule,
    Severity,
    Silence,
    severity_rank,
    split_addresses,
)
from alerts.rules import RULE_SPECS, load_rule_configs
from dashboard.locks import ExpiringLock
from dashboard.timefmt import format_duration, iso_utc, mail_moment_text

logger = logging.getLogger(__name__)

EVALUATION_LOCK = "alerts-evaluation"
EVALUATION_LOCK_TTL = 30
MAX_KEY_LENGTH = 600
# Mail about these is held back while the cluster's API is down (a cluster_unhealthy
# incident with api_down): one mail about the cause, not one per symptom.
INHIBITED_BY_API_DOWN = frozenset({Rule.NODE_HEARTBEATS_EXPIRED, Rule.NODEGROUP_NOT_READY})
RETRY_FIRST_SECONDS = 10
RETRY_MAX_SECONDS = 300
SWEEP_BATCH = 200
EVENT_TEXT_LIMIT = 1000


def dedup_key(text: str) -> str:
    """Keys longer than an index entry comfortably holds keep a prefix and a hash."""
    if len(text) <= MAX_KEY_LENGTH:
        return text
    digest = sha256(text.encode()).hexdigest()[:16]
    return f"{text[: MAX_KEY_LENGTH - 17]}#{digest}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _event(
    incident: Incident,
    kind: str,
    text: str,
    now: datetime,
    user: AbstractBaseUser | None = None,
) -> IncidentEvent:
    return IncidentEvent(
        incident=incident, kind=kind, text=_clip(text, EVENT_TEXT_LIMIT), at=now, user=user
    )


# --- Evaluation ------------------------------------------------------------------------------


@dataclass(slots=True)
class EvaluationSummary:
    opened: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)
    updated: int = 0
    pending: int = 0
    errors: list[str] = field(default_factory=list)
    notifications: list[int] = field(default_factory=list)


def run_evaluation(
    now: datetime | None = None, *, dispatch: bool = True, wait_seconds: float = 0.0
) -> EvaluationSummary | None:
    """Evaluate every rule once and plan the mail that is due; None if another run is busy.

    `dispatch`: queue a send task per new notification once committed (the beat task);
    `check_alerts` sends in the foreground instead.
    """
    lock = ExpiringLock(EVALUATION_LOCK, owner=uuid.uuid4().hex, ttl=EVALUATION_LOCK_TTL)
    deadline = time.monotonic() + wait_seconds
    while not lock.acquire():
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)
    started = time.monotonic()
    try:
        moment = now or timezone.now()
        summary = evaluate_rules(moment)
        try:
            summary.notifications = plan_notifications(moment, dispatch=dispatch)
        except Exception as exc:
            logger.exception("alerts: planning notifications failed")
            summary.errors.append(f"planning notifications: {exc}")
        _record_status(moment, time.monotonic() - started, summary.errors)
        return summary
    finally:
        lock.release()


def _record_status(now: datetime, seconds: float, errors: Sequence[str]) -> None:
    fields: dict[str, object] = {
        "last_started_at": now,
        "last_finished_at": timezone.now(),
        "last_duration_seconds": round(seconds, 3),
        "last_error": "; ".join(errors)[:2000],
    }
    if errors:
        fields["last_error_at"] = now
    EvaluatorStatus.objects.update_or_create(pk=1, defaults=fields)


def evaluate_rules(now: datetime) -> EvaluationSummary:
    summary = EvaluationSummary()
    configs = load_rule_configs()
    stale = stale_kube_cluster_names(now)
    for rule, spec in RULE_SPECS.items():
        config = configs[rule]
        try:
            with transaction.atomic():
                unresolved = {
                    incident.key: incident
                    for incident in Incident.objects.select_for_update().filter(
                        rule=rule, resolved_at__isnull=True
                    )
                }
                if config.enabled:
                    outcome = spec.evaluate(RuleContext(now, config, unresolved, stale))
                else:
                    outcome = RuleOutcome(notes=dict.fromkeys(unresolved, "the rule was disabled"))
                apply_outcome(rule, config, outcome, unresolved, now, summary)
        except Exception as exc:
            # One broken rule (or a missing table during a deploy) must not silence the
            # others; its incidents stay as they were until it works again.
            logger.exception("alerts: rule %s failed", rule)
            summary.errors.append(f"{rule}: {exc}")
    return summary


def apply_outcome(
    rule: Rule,
    config: RuleConfig,
    outcome: RuleOutcome,
    unresolved: dict[str, Incident],
    now: datetime,
    summary: EvaluationSummary,
) -> None:
    firing = {dedup_key(key): condition for key, condition in outcome.firing.items()}
    frozen = {dedup_key(key) for key in outcome.frozen}
    only_seen: list[int] = []
    for key, condition in firing.items():
        incident = unresolved.get(key)
        if incident is None:
            incident, created = open_incident(rule, config, key, condition, now)
            if created:
                if incident.state == IncidentState.FIRING:
                    summary.opened.append(incident.pk)
                else:
                    summary.pending += 1
                continue
        was_firing = incident.state == IncidentState.FIRING
        if refresh_incident(incident, config, condition, now):
            summary.updated += 1
            if not was_firing and incident.state == IncidentState.FIRING:
                summary.opened.append(incident.pk)
        else:
            only_seen.append(incident.pk)
        if incident.state == IncidentState.PENDING:
            summary.pending += 1
    if only_seen:
        Incident.objects.filter(pk__in=only_seen).update(last_seen_at=now)
    for key, incident in unresolved.items():
        if key in firing or key in frozen:
            continue
        if incident.state == IncidentState.PENDING:
            # It never lasted its grace: it was never an incident.
            incident.delete()
            continue
        resolve_incident(incident, outcome.notes.get(key) or "the condition cleared", now)
        summary.resolved.append(incident.pk)


def _fields_from(condition: Condition, config: RuleConfig) -> dict[str, object]:
    return {
        "severity": condition.severity or config.severity,
        "cluster": condition.cluster[:253],
        "title": _clip(condition.title, 500),
        "details": condition.details,
        "link": condition.link[:2000],
    }


def open_incident(
    rule: Rule, config: RuleConfig, key: str, condition: Condition, now: datetime
) -> tuple[Incident, bool]:
    """A new incident for the key (pending until its grace has passed); or, if another
    evaluation inserted one first, that one, refreshed. Returns (incident, created)."""
    since = condition.since or now
    firing = since + condition.hold <= now
    try:
        with transaction.atomic():
            incident = Incident.objects.create(
                rule=rule,
                key=key,
                state=IncidentState.FIRING if firing else IncidentState.PENDING,
                since=since,
                opened_at=now if firing else None,
                last_seen_at=now,
                **_fields_from(condition, config),
            )
    except IntegrityError:
        # The unique index on unresolved keys: someone else opened it a moment ago.
        incident = Incident.objects.select_for_update().get(key=key, resolved_at__isnull=True)
        refresh_incident(incident, config, condition, now)
        return incident, False
    if firing:
        _event(incident, IncidentEvent.Kind.OPENED, _opened_text(incident), now).save()
    return incident, True


def _opened_text(incident: Incident) -> str:
    return f"opened: {incident.full_title}; condition since {mail_moment_text(incident.since)}"


def _items_change(old: dict[str, object], new: dict[str, object]) -> str:
    before, after = old.get("items") or [], new.get("items") or []
    if before == after or not isinstance(before, list) or not isinstance(after, list):
        return ""
    added = [item for item in after if item not in set(before)]
    removed = [item for item in before if item not in set(after)]

    def names(items: list[object]) -> str:
        shown = ", ".join(str(item) for item in items[:10])
        return shown + (f" and {len(items) - 10} more" if len(items) > 10 else "")

    parts = []
    if added:
        parts.append(f"added {names(added)}")
    if removed:
        parts.append(f"gone {names(removed)}")
    total = new.get("items_total", len(after))
    label = new.get("items_label") or "items"
    return f"{label}: now {total}; " + "; ".join(parts)


def refresh_incident(
    incident: Incident, config: RuleConfig, condition: Condition, now: datetime
) -> bool:
    """Bring a still-firing incident up to date; True when more than last_seen_at changed."""
    fields = _fields_from(condition, config)
    changed = [name for name, value in fields.items() if getattr(incident, name) != value]
    events = []
    if changed:
        change = _items_change(incident.details, condition.details)  # type: ignore[arg-type]
        if change:
            events.append(_event(incident, IncidentEvent.Kind.UPDATED, change, now))
        elif "title" in changed and incident.state == IncidentState.FIRING:
            events.append(
                _event(incident, IncidentEvent.Kind.UPDATED, f"now: {condition.title}", now)
            )
        for name in changed:
            setattr(incident, name, fields[name])
    if condition.since is not None and condition.since < incident.since:
        incident.since = condition.since
        changed.append("since")
    if incident.state == IncidentState.PENDING and incident.since + condition.hold <= now:
        incident.state = IncidentState.FIRING
        incident.opened_at = now
        changed += ["state", "opened_at"]
        events = [_event(incident, IncidentEvent.Kind.OPENED, _opened_text(incident), now)]
    if not changed:
        return False
    incident.last_seen_at = now
    incident.save(update_fields=[*set(changed), "last_seen_at"])
    IncidentEvent.objects.bulk_create(events)
    return True


def resolve_incident(incident: Incident, note: str, now: datetime) -> None:
    incident.state = IncidentState.RESOLVED
    incident.resolved_at = now
    incident.resolution = _clip(note, 500)
    if incident.open_notice == Notice.MAILED:
        incident.resolve_notice = Notice.WAITING
    elif incident.open_notice == Notice.WAITING:
        # Never announced. Held back only by its group's window: one resolve mail tells
        # both (opened at, resolved at, how long). Silenced or inhibited: no mail at all.
        incident.open_notice = Notice.SKIPPED
        incident.resolve_notice = Notice.WAITING if incident.hold == Hold.NONE else Notice.SKIPPED
    else:
        incident.resolve_notice = Notice.SKIPPED
    incident.save(
        update_fields=["state", "resolved_at", "resolution", "open_notice", "resolve_notice"]
    )
    lasted = format_duration(incident.duration(now).total_seconds())
    _event(incident, IncidentEvent.Kind.RESOLVED, f"resolved: {note}; lasted {lasted}", now).save()


# --- Planning e-mails ------------------------------------------------------------------------


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


def active_silences(now: datetime) -> dict[str, Silence]:
    silences: dict[str, Silence] = {}
    for silence in Silence.objects.active(now).select_related("created_by").order_by("ends_at"):
        silences[silence.key] = silence  # the one that lasts longest wins
    return silences


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
            plan.events.append(_event(incident, IncidentEvent.Kind.HELD, text, now))

    resolved = []
    for incident in Incident.objects.select_for_update().filter(
        state=IncidentState.RESOLVED, resolve_notice=Notice.WAITING
    ):
        if incident.key in silences:
            incident.resolve_notice = Notice.SKIPPED
            incident.save(update_fields=["resolve_notice"])
            plan.events.append(
                _event(incident, IncidentEvent.Kind.HELD, "no resolve mail: silenced", now)
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
                _event(
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
            _event(
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


# --- Delivery --------------------------------------------------------------------------------


def claim_seconds(recipients: int) -> float:
    """How long a claim lasts: longer than any SMTP session of a live sender can take.

    Every blocking step of smtplib (connect, EHLO, STARTTLS, AUTH, MAIL, each RCPT, DATA,
    QUIT) is bounded by EMAIL_TIMEOUT, so a sender that is alive has finished, one way or
    the other, before its claim runs out.
    """
    return settings.EMAIL_TIMEOUT * (8 + recipients) + 30


def _due(now: datetime) -> Q:
    return Q(state=DeliveryState.PENDING, next_attempt_at__lte=now) | Q(
        state=DeliveryState.SENDING, claimed_until__lte=now
    )


def retry_delay(attempts: int) -> float:
    """Exponential backoff: 10 s, 20 s, 40 s... capped at 5 min, with a little jitter."""
    base = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** max(attempts - 1, 0))
    return base * random.uniform(0.9, 1.0)  # noqa: S311 - jitter, not security


def is_permanent(error: BaseException) -> bool:
    """SMTP said no for good (every recipient, or the message itself, refused with 5xx).

    Connection failures, timeouts, 4xx and authentication or sender problems are retried:
    the latter two are configuration that an operator may fix within ALERT_RETRY_HOURS.
    """
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in error.recipients.values()]
        return bool(codes) and all(500 <= code < 600 for code in codes)
    if isinstance(error, smtplib.SMTPDataError):
        return 500 <= error.smtp_code < 600
    return False


def _error_text(error: BaseException) -> str:
    if isinstance(error, smtplib.SMTPResponseException):
        message = error.smtp_error
        text = message.decode(errors="replace") if isinstance(message, bytes) else str(message)
        return f"SMTP {error.smtp_code}: {text}"
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        refused = ", ".join(
            f"{address} ({code})" for address, (code, _) in error.recipients.items()
        )
        return f"recipients refused: {refused}"
    return f"{type(error).__name__}: {error}"


def deliver_notification(notification_id: int) -> DeliveryState | None:
    """Send one notification if it is due; returns its new state, or None if not ours.

    Claiming: ``UPDATE ... SET state=sending, claimed_until=now+claim WHERE id=? AND
    (state=pending AND next_attempt_at<=now OR state=sending AND claimed_until<=now)``
    affects one row for exactly one caller, so two tasks (a queued one and one the sweep
    queued, or a task delivered twice by the broker) never both send.

    At most one duplicate, never a loss: the claim is a lease (`claim_seconds`), longer
    than any live sender's SMTP session, so only a sender that died loses its claim. If it
    died before the SMTP server accepted the message, nothing was sent and the retry sends
    the only copy. If it died after the server's "250 OK" to DATA but before the row was
    marked sent (a window of one database write), the message was delivered and the retry
    sends it once more: one extra copy for that one crash. SMTP has no idempotency key to
    close that window, and choosing at-most-once instead would lose alerts. The copies
    share a Message-ID, so a mail client or MTA can tell them apart.
    """
    row = Notification.objects.filter(pk=notification_id).values("recipients").first()
    if row is None:
        return None
    now = timezone.now()
    token = uuid.uuid4().hex
    claimed = Notification.objects.filter(_due(now), pk=notification_id).update(
        state=DeliveryState.SENDING,
        claim_token=token,
        claimed_until=now + timedelta(seconds=claim_seconds(len(row["recipients"]))),
        attempts=F("attempts") + 1,
    )
    if claimed != 1:
        return None
    notification = Notification.objects.get(pk=notification_id)
    keys = set(notification.incidents.values_list("key", flat=True))
    if keys and keys <= set(active_silences(now)):
        _finish(
            notification,
            token,
            state=DeliveryState.CANCELLED,
            last_error="not sent: every incident in it was silenced before it went out",
        )
        return DeliveryState.CANCELLED
    try:
        build_message(notification).send(fail_silently=False)
    except Exception as error:
        return _delivery_failed(notification, token, error)
    _finish(notification, token, state=DeliveryState.SENT, sent_at=timezone.now())
    return DeliveryState.SENT


def _delivery_failed(notification: Notification, token: str, error: Exception) -> DeliveryState:
    text = _error_text(error)
    now = timezone.now()
    if not isinstance(error, smtplib.SMTPException | OSError):
        logger.exception("alerts: unexpected error sending notification %s", notification.pk)
    retry_at = now + timedelta(seconds=retry_delay(notification.attempts))
    give_up_at = notification.created_at + timedelta(hours=settings.ALERT_RETRY_HOURS)
    if is_permanent(error) or retry_at > give_up_at:
        attempts = notification.attempts
        reason = "refused for good" if is_permanent(error) else "gave up"
        _finish(
            notification,
            token,
            state=DeliveryState.FAILED,
            last_error=f"{text} ({reason} after {attempts} attempt{'s' if attempts != 1 else ''})",
        )
        logger.error("alerts: notification %s failed: %s", notification.pk, text)
        return DeliveryState.FAILED
    _finish(
        notification,
        token,
        state=DeliveryState.PENDING,
        last_error=text,
        next_attempt_at=retry_at,
    )
    logger.warning(
        "alerts: notification %s not sent (%s); retrying at %s",
        notification.pk,
        text,
        iso_utc(retry_at),
    )
    return DeliveryState.PENDING


def _finish(notification: Notification, token: str, **fields: object) -> None:
    done = Notification.objects.filter(pk=notification.pk, claim_token=token).update(
        claimed_until=None, **fields
    )
    if not done:
        logger.warning(
            "alerts: notification %s was claimed by another sender meanwhile", notification.pk
        )


def due_notification_ids(now: datetime | None = None, limit: int = SWEEP_BATCH) -> list[int]:
    return list(
        Notification.objects.filter(_due(now or timezone.now()))
        .order_by("next_attempt_at", "id")
        .values_list("id", flat=True)[:limit]
    )


def send_due_notifications() -> dict[str, int]:
    """Send every due notification here and now (the `check_alerts` command)."""
    results: dict[str, int] = defaultdict(int)
    for notification_id in due_notification_ids():
        state = deliver_notification(notification_id)
        results[state.value if state else "skipped"] += 1
    return dict(results)


def retry_notification_now(notification_id: int) -> bool:
    """An operator's "retry now" for a failed or waiting notification (admin action)."""
    return bool(
        Notification.objects.filter(
            pk=notification_id, state__in=[DeliveryState.FAILED, DeliveryState.PENDING]
        ).update(state=DeliveryState.PENDING, next_attempt_at=timezone.now())
    )


# --- Acknowledge and silence -----------------------------------------------------------------


@transaction.atomic
def acknowledge_incident(incident_id: int, user: AbstractBaseUser) -> bool:
    """Someone is on it: no reminders for this incident. False if open no more or done."""
    now = timezone.now()
    done = Incident.objects.filter(
        pk=incident_id, state=IncidentState.FIRING, acknowledged_at__isnull=True
    ).update(acknowledged_by=user, acknowledged_at=now)
    if done:
        incident = Incident.objects.get(pk=incident_id)
        _event(
            incident,
            IncidentEvent.Kind.ACKNOWLEDGED,
            f"acknowledged by {user.get_username()}: no more reminders",
            now,
            user,
        ).save()
    return bool(done)


@transaction.atomic
def unacknowledge_incident(incident_id: int, user: AbstractBaseUser) -> bool:
    now = timezone.now()
    done = Incident.objects.filter(
        pk=incident_id, state=IncidentState.FIRING, acknowledged_at__isnull=False
    ).update(acknowledged_by=None, acknowledged_at=None)
    if done:
        incident = Incident.objects.get(pk=incident_id)
        _event(
            incident,
            IncidentEvent.Kind.UNACKNOWLEDGED,
            f"{user.get_username()} withdrew the acknowledgement: reminders resume",
            now,
            user,
        ).save()
    return bool(done)


@transaction.atomic
def silence_incident(
    incident_id: int, user: AbstractBaseUser, duration: timedelta, reason: str = ""
) -> Silence:
    """No mail for the incident's key until now + duration, including future incidents.

    A new silence replaces the key's active one (ends it now), so the page always shows one.
    """
    now = timezone.now()
    incident = Incident.objects.get(pk=incident_id)
    Silence.objects.active(now).filter(key=incident.key).update(ends_at=now)
    silence = Silence.objects.create(
        key=incident.key,
        starts_at=now,
        ends_at=now + duration,
        reason=_clip(reason.strip(), 500),
        created_by=user,
        created_at=now,
    )
    text = f"silenced by {user.get_username()} for {format_duration(duration.total_seconds())}"
    text += f" (until {mail_moment_text(silence.ends_at)})"
    if silence.reason:
        text += f": {silence.reason}"
    _event(incident, IncidentEvent.Kind.SILENCED, text, now, user).save()
    return silence


@transaction.atomic
def end_silence(incident_id: int, user: AbstractBaseUser) -> bool:
    now = timezone.now()
    incident = Incident.objects.get(pk=incident_id)
    ended = Silence.objects.active(now).filter(key=incident.key).update(ends_at=now, ended_by=user)
    if ended:
        _event(
            incident,
            IncidentEvent.Kind.UNSILENCED,
            f"{user.get_username()} ended the silence: mail resumes",
            now,
            user,
        ).save()
    return bool(ended)


# --- Subscriptions ---------------------------------------------------------------------------


@transaction.atomic
def update_subscription(
    user: AbstractBaseUser, *, enabled: bool, min_severity: Severity, email: str
) -> AlertSubscription:
    """The user's own alert mail: on or off, from which severity, at which address."""
    if email != user.email:  # type: ignore[attr-defined]
        user.email = email  # type: ignore[attr-defined]
        user.save(update_fields=["email"])
    subscription, _ = AlertSubscription.objects.update_or_create(
        user=user, defaults={"enabled": enabled, "min_severity": min_severity}
    )
    return subscription
