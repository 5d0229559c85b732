"""Celery tasks for alerts: a few lines each, taking ids and calling a service.

All of them are harmless to run twice: evaluation takes a lock and the database allows one
unresolved incident per key; sending (a mail or a channel message alike) claims its row with
a conditional update first, so a channel's storm folded by one task is skipped by the others.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from alerts import deadman, delivery, evaluation, expiry_schedule

# A scheduled evaluation waits this long for a running one to finish: skipping it instead
# would leave its due moment to the next tick.
DUE_LOCK_WAIT_SECONDS = 3.0


@shared_task(ignore_result=True)
def evaluate_alerts() -> None:
    """Beat, every ALERT_EVAL_SECONDS: open, update and resolve incidents; plan mail."""
    deadman.after_evaluation(evaluation.run_evaluation(), queue_deadman_ping)


@shared_task(ignore_result=True)
def evaluate_due(token: str) -> None:
    """At a lease's expiry plus grace (see `alerts.expiry_schedule`): evaluate now, unless a
    newer schedule replaced this one."""
    if expiry_schedule.is_current(token):
        summary = evaluation.run_evaluation(wait_seconds=DUE_LOCK_WAIT_SECONDS)
        deadman.after_evaluation(summary, queue_deadman_ping)


@shared_task(ignore_result=True)
def ping_deadman(kind: str) -> None:
    """The dead-man's switch: tell the service outside that an evaluation completed."""
    deadman.ping(deadman.Kind(kind))


def queue_deadman_ping(kind: deadman.Kind) -> None:
    # A ping that waited a whole interval in the queue is stale: the next one is due instead.
    ping_deadman.apply_async((kind.value,), expires=settings.DEADMAN_INTERVAL_SECONDS)


@shared_task(ignore_result=True)
def send_notification(notification_id: int) -> None:
    """Send one outbox row: an e-mail, or a Dooray!/Slack/webhook message."""
    delivery.deliver_notification(notification_id)


@shared_task(ignore_result=True)
def send_due_notifications() -> None:
    """Beat: queue every notification that is due (retries, and any whose task was lost)."""
    for notification_id in delivery.due_notification_ids():
        send_notification.delay(notification_id)
