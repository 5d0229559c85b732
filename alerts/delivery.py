"""Mail delivery: send a planned `Notification` once, with retries, never losing it.

`deliver_notification` claims a row with a conditional update before it talks to SMTP;
its docstring says why a crash costs at most one duplicate and never a lost mail. Failed
attempts back off exponentially until ALERT_RETRY_HOURS; a permanent SMTP refusal ends
the row at once.
"""

from __future__ import annotations

import logging
import random
import smtplib
import uuid
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from alerts.mail import build_message
from alerts.models import DeliveryState, Notification
from alerts.queries import active_silences
from dashboard.timefmt import iso_utc

logger = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 10
RETRY_MAX_SECONDS = 300
SWEEP_BATCH = 200


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
