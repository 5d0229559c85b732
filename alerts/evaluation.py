"""Evaluation: run every rule and turn its outcome into incidents (open, update, resolve).

`run_evaluation` runs every ALERT_EVAL_SECONDS from beat, or from `check_alerts`:

1. each rule's outcome (`alerts.rules`) is applied to its unresolved incidents in one
   transaction per rule: open (or keep pending until the grace passes), update, resolve,
   or leave frozen. A partial unique index allows one unresolved incident per key; an
   insert that loses a race against another evaluation catches the IntegrityError and
   updates the winner's row. A short lock in caches["locks"] keeps evaluations from running
   side by side at all, so grouping decisions are made by one process at a time.
2. `alerts.notifications.plan_notifications` then turns incidents into mail rows.
3. `alerts.expiry_schedule` queues the next evaluation for the moment the next lease alert
   becomes due, so it is not left to the next tick (Celery runs only, `dispatch`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from hashlib import sha256

from django.db import IntegrityError, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext_noop

from alerts.conditions import (
    Condition,
    Message,
    RuleConfig,
    RuleContext,
    RuleOutcome,
    english,
    message_json,
)
from alerts.due_leases import DueLeases
from alerts.events import clip, incident_event
from alerts.expiry_schedule import schedule_next_evaluation
from alerts.lease_rules import stale_kube_cluster_names
from alerts.models import (
    EvaluatorStatus,
    Hold,
    Incident,
    IncidentEvent,
    IncidentState,
    Notice,
    Rule,
)
from alerts.notifications import plan_notifications
from alerts.rules import RULE_SPECS, load_rule_configs
from dashboard.locks import ExpiringLock
from dashboard.timefmt import mail_moment_text

logger = logging.getLogger(__name__)

# Resolution notes of any rule.
RULE_DISABLED = Message.gettext_noop("the rule was disabled")
CONDITION_CLEARED = Message.gettext_noop("the condition cleared")
ITEMS = Message.gettext_noop("items")

EVALUATION_LOCK = "alerts-evaluation"
EVALUATION_LOCK_TTL = 30
MAX_KEY_LENGTH = 600


def dedup_key(text: str) -> str:
    """Keys longer than an index entry comfortably holds keep a prefix and a hash."""
    if len(text) <= MAX_KEY_LENGTH:
        return text
    digest = sha256(text.encode()).hexdigest()[:16]
    return f"{text[: MAX_KEY_LENGTH - 17]}#{digest}"


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

    `dispatch`: queue a send task per new notification once committed, and an evaluation for
    the next lease due (the Celery tasks); `check_alerts` sends in the foreground instead.
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
        if dispatch:
            try:
                schedule_next_evaluation(moment)
            except Exception:
                # The periodic tick still comes: a failed schedule only costs latency.
                logger.exception("alerts: scheduling the next evaluation failed")
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
    # Rules write English beside their message ids (titles, facts, notes: the API and logs
    # read it), whatever language this process runs in.
    with translation.override("en"):
        return _evaluate_rules(now)


def _evaluate_rules(now: datetime) -> EvaluationSummary:
    summary = EvaluationSummary()
    configs = load_rule_configs()
    stale = stale_kube_cluster_names(now)
    due = DueLeases(now)
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
                    outcome = spec.evaluate(RuleContext(now, config, unresolved, stale, due))
                else:
                    outcome = RuleOutcome(notes=dict.fromkeys(unresolved, RULE_DISABLED))
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
        resolve_incident(incident, outcome.notes.get(key) or CONDITION_CLEARED, now)
        summary.resolved.append(incident.pk)


def _fields_from(
    condition: Condition, config: RuleConfig, incident: Incident | None = None
) -> dict[str, object]:
    details = dict(condition.details)
    title = message_json(condition.title)
    if title is not None:
        details["title_message"] = title
    if incident is not None and "resolution_message" in (incident.details or {}):
        details["resolution_message"] = incident.details["resolution_message"]
    return {
        "severity": condition.severity or config.severity,
        "cluster": condition.cluster[:253],
        "title": clip(english(condition.title), 500),
        "details": details,
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
        _opened_event(incident, now).save()
    return incident, True


def _opened_event(incident: Incident, now: datetime) -> IncidentEvent:
    return incident_event(
        incident,
        IncidentEvent.Kind.OPENED,
        gettext_noop("opened: %(title)s; condition since %(since)s"),
        now,
        args={"title": incident.full_title_message, "since": mail_moment_text(incident.since)},
    )


def _items_change(
    incident: Incident, old: dict[str, object], new: dict[str, object], now: datetime
) -> IncidentEvent | None:
    """A timeline entry naming the items that came and went (e.g. nodes), if any did."""
    before, after = old.get("items") or [], new.get("items") or []
    if before == after or not isinstance(before, list) or not isinstance(after, list):
        return None
    added = [item for item in after if item not in set(before)]
    removed = [item for item in before if item not in set(after)]

    def names(items: list[object]) -> str | Message:
        shown = ", ".join(str(item) for item in items[:10])
        if len(items) <= 10:
            return shown
        return Message.gettext_noop(
            "%(names)s and %(count)s more", names=shown, count=len(items) - 10
        )

    total = new.get("items_total", len(after))
    items_label = new.get("items_label")
    # The list's label is an English message id (see alerts.conditions).
    label = Message(items_label) if isinstance(items_label, str) and items_label else ITEMS
    args: dict[str, object] = {"label": label, "total": total}
    if added and removed:
        text = gettext_noop("%(label)s: now %(total)s; added %(added)s; gone %(gone)s")
        args |= {"added": names(added), "gone": names(removed)}
    elif added:
        text = gettext_noop("%(label)s: now %(total)s; added %(added)s")
        args["added"] = names(added)
    else:
        text = gettext_noop("%(label)s: now %(total)s; gone %(gone)s")
        args["gone"] = names(removed)
    return incident_event(incident, IncidentEvent.Kind.UPDATED, text, now, args=args)


def refresh_incident(
    incident: Incident, config: RuleConfig, condition: Condition, now: datetime
) -> bool:
    """Bring a still-firing incident up to date; True when more than last_seen_at changed."""
    fields = _fields_from(condition, config, incident)
    changed = [name for name, value in fields.items() if getattr(incident, name) != value]
    events = []
    if changed:
        change = _items_change(incident, incident.details, condition.details, now)
        if change is not None:
            events.append(change)
        elif "title" in changed and incident.state == IncidentState.FIRING:
            events.append(
                incident_event(
                    incident,
                    IncidentEvent.Kind.UPDATED,
                    gettext_noop("now: %(title)s"),
                    now,
                    args={"title": condition.title},
                )
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
        events = [_opened_event(incident, now)]
    if not changed:
        return False
    incident.last_seen_at = now
    incident.save(update_fields=[*set(changed), "last_seen_at"])
    IncidentEvent.objects.bulk_create(events)
    return True


def resolve_incident(incident: Incident, note: str | Message, now: datetime) -> None:
    incident.state = IncidentState.RESOLVED
    incident.resolved_at = now
    incident.resolution = clip(english(note), 500)
    note_message = message_json(note)
    if note_message is not None:
        incident.details = {**(incident.details or {}), "resolution_message": note_message}
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
        update_fields=[
            "state",
            "resolved_at",
            "resolution",
            "details",
            "open_notice",
            "resolve_notice",
        ]
    )
    incident_event(
        incident,
        IncidentEvent.Kind.RESOLVED,
        gettext_noop("resolved: %(note)s; lasted %(lasted)s"),
        now,
        args={"note": note, "lasted": incident.duration(now)},
    ).save()
