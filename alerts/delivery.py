"""Delivery: send a planned `Notification` (a mail or a channel message) once, with retries.

`deliver_notification` claims a row with a conditional update before it talks to SMTP or
to a channel's endpoint; its docstring says why a crash costs at most one duplicate and
never a lost alert. Failed attempts back off exponentially until ALERT_RETRY_HOURS; a
permanent refusal (SMTP 5xx, HTTP 4xx other than 429) ends the row at once.

A channel message also respects the channel's rate (`max_per_minute`, counted over its sent
rows of the last minute): over it, the row waits for a free slot without an attempt counted.
When a channel has several due rows at send time, they go out as one summary message and
the others are marked sent inside it (`folded_into`): a storm is one message per channel.
A channel's URL and signing secret never reach a log line, `last_error` or `last_response`.
"""

from __future__ import annotations

import json
import logging
import random
import smtplib
import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from alerts.channels import http as channel_http
from alerts.channels import payloads
from alerts.channels.planning import TEST_GROUP, rendering_for
from alerts.mail import build_message
from alerts.models import AlertChannel, ChannelKind, DeliveryState, Incident, Notification
from alerts.queries import active_silences
from dashboard.encryption import secret_problem
from dashboard.timefmt import iso_utc

logger = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 10
RETRY_MAX_SECONDS = 300
SWEEP_BATCH = 200


def claim_seconds(recipients: int) -> float:
    """How long a claim lasts: longer than any SMTP session of a live sender can take.

    Every blocking step of smtplib (connect, EHLO, STARTTLS, AUTH, MAIL, each RCPT, DATA,
    QUIT) is bounded by EMAIL_TIMEOUT, and the whole session by EMAIL_DEADLINE_SECONDS
    (alerts/smtp.py), so a sender that is alive has finished, one way or the other, before
    its claim runs out.
    """
    per_step = settings.EMAIL_TIMEOUT * (8 + recipients)
    return min(per_step, settings.EMAIL_DEADLINE_SECONDS) + 30


def channel_claim_seconds() -> float:
    """A channel post ends within ALERT_CHANNEL_DEADLINE_SECONDS, answer read included."""
    return settings.ALERT_CHANNEL_DEADLINE_SECONDS + 30


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
    row = Notification.objects.filter(pk=notification_id).values("recipients", "channel_id").first()
    if row is None:
        return None
    now = timezone.now()
    token = uuid.uuid4().hex
    hold = channel_claim_seconds() if row["channel_id"] else claim_seconds(len(row["recipients"]))
    claimed = Notification.objects.filter(_due(now), pk=notification_id).update(
        state=DeliveryState.SENDING,
        claim_token=token,
        claimed_until=now + timedelta(seconds=hold),
        attempts=F("attempts") + 1,
    )
    if claimed != 1:
        return None
    notification = Notification.objects.select_related("channel").get(pk=notification_id)
    silenced = set(active_silences(now))
    keys = set(notification.incidents.values_list("key", flat=True))
    if keys and keys <= silenced:
        _finish(
            notification,
            token,
            state=DeliveryState.CANCELLED,
            last_error="not sent: every incident in it was silenced before it went out",
        )
        return DeliveryState.CANCELLED
    if notification.channel is not None:
        return _deliver_to_channel(notification, notification.channel, token, now, silenced)
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


# --- Channel messages ------------------------------------------------------------------------


def _rate_wait(channel: AlertChannel, now: datetime) -> datetime | None:
    """When the channel next has a free slot, or None if it has one now (0: no limit)."""
    limit = channel.max_per_minute
    if not limit:
        return None
    recent = list(
        Notification.objects.filter(
            channel=channel,
            folded_into__isnull=True,
            sent_at__gt=now - timedelta(minutes=1),
        )
        .order_by("sent_at")
        .values_list("sent_at", flat=True)
    )
    if len(recent) < limit:
        return None
    # The slot frees when the oldest message that keeps the count at the limit is a minute old.
    return recent[len(recent) - limit] + timedelta(minutes=1)


def _fold(
    notification: Notification,
    channel: AlertChannel,
    token: str,
    now: datetime,
    silenced: set[str],
) -> list[Notification]:
    """Claim the channel's other due rows to go out inside this one; returns them."""
    if notification.group == TEST_GROUP:
        return []
    due = (
        Notification.objects.filter(
            channel=channel, state=DeliveryState.PENDING, next_attempt_at__lte=now
        )
        .exclude(pk=notification.pk)
        .exclude(group=TEST_GROUP)
        .values_list("pk", flat=True)
    )
    Notification.objects.filter(pk__in=list(due), state=DeliveryState.PENDING).update(
        state=DeliveryState.SENDING,
        claim_token=token,
        claimed_until=now + timedelta(seconds=channel_claim_seconds()),
    )
    folded = []
    for row in (
        Notification.objects.filter(claim_token=token, state=DeliveryState.SENDING)
        .exclude(pk=notification.pk)
        .prefetch_related("incidents")
        .order_by("created_at", "id")
    ):
        keys = {incident.key for incident in row.incidents.all()}
        if keys and keys <= silenced:
            _finish(
                row,
                token,
                state=DeliveryState.CANCELLED,
                last_error="not sent: every incident in it was silenced before it went out",
            )
        else:
            folded.append(row)
    return folded


def _summary(
    notification: Notification, folded: list[Notification], channel: AlertChannel, now: datetime
) -> dict[str, Any]:
    parts: list[tuple[str, Incident]] = []
    for row in [notification, *folded]:
        # .all() uses the folded rows' prefetched incidents (one query for a whole storm).
        members = sorted(row.incidents.all(), key=lambda incident: (incident.since, incident.pk))
        parts += [(row.kind, incident) for incident in members]
    with rendering_for(channel):
        return payloads.summary(channel.kind, parts, 1 + len(folded), now)


def _body(notification: Notification, channel: AlertChannel, payload: dict[str, Any]) -> bytes:
    if channel.kind == ChannelKind.WEBHOOK:
        # The row's number: the same on every retry, so a receiver can drop a duplicate.
        payload = {"id": notification.pk, **payload}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def _deliver_to_channel(
    notification: Notification,
    channel: AlertChannel,
    token: str,
    now: datetime,
    silenced: set[str],
) -> DeliveryState:
    if not channel.enabled:
        _finish(
            notification,
            token,
            state=DeliveryState.CANCELLED,
            last_error="not sent: the channel was disabled before it went out",
        )
        return DeliveryState.CANCELLED
    wait_until = _rate_wait(channel, now)
    if wait_until is not None:
        # Waiting for a slot is not a failed attempt: it does not count, and is not an error.
        _finish(
            notification,
            token,
            state=DeliveryState.PENDING,
            next_attempt_at=wait_until,
            attempts=F("attempts") - 1,
        )
        logger.info(
            "alerts: channel %s is at its rate limit; message %s waits until %s",
            channel.name,
            notification.pk,
            iso_utc(wait_until),
        )
        return DeliveryState.PENDING
    folded = _fold(notification, channel, token, now, silenced)
    payload = _summary(notification, folded, channel, now) if folded else notification.payload
    unreadable = secret_problem(channel.url) or (
        secret_problem(channel.signing_secret) if channel.kind == ChannelKind.WEBHOOK else None
    )
    if unreadable is not None:
        # Lost or rotated-away keys: posting to the empty URL would fail with a transport
        # error that names nothing. Say why, and retry: the keys may come back.
        result = channel_http.PostResult(
            channel_http.Outcome.RETRY,
            f"not sent: the channel's stored URL or secret cannot be read ({unreadable}); "
            "restore the keys or enter them again in admin",
        )
    else:
        result = _post(notification, channel, payload)
    folded_ids = [row.pk for row in folded]
    sent_at = timezone.now()
    if result.outcome == channel_http.Outcome.DELIVERED:
        fields: dict[str, Any] = {
            "state": DeliveryState.SENT,
            "sent_at": sent_at,
            "last_error": "",
            "last_response": result.response,
        }
        if folded:
            fields["payload"] = payload
        _finish(notification, token, **fields)
        Notification.objects.filter(pk__in=folded_ids, claim_token=token).update(
            state=DeliveryState.SENT,
            sent_at=sent_at,
            folded_into=notification,
            claimed_until=None,
            last_error="",
        )
        return DeliveryState.SENT
    attempts = notification.attempts
    retry_at = sent_at + timedelta(
        seconds=result.retry_after
        if result.retry_after is not None
        else retry_delay(notification.attempts)
    )
    give_up_at = notification.created_at + timedelta(hours=settings.ALERT_RETRY_HOURS)
    if result.outcome == channel_http.Outcome.PERMANENT or retry_at > give_up_at:
        reason = (
            "refused for good" if result.outcome == channel_http.Outcome.PERMANENT else "gave up"
        )
        text = f"{result.text} ({reason} after {attempts} attempt{'s' if attempts != 1 else ''})"
        _finish(
            notification,
            token,
            state=DeliveryState.FAILED,
            last_error=text,
            last_response=result.response,
        )
        # The folded rows would meet the same answer; they go back to wait on their own.
        Notification.objects.filter(pk__in=folded_ids, claim_token=token).update(
            state=DeliveryState.PENDING, next_attempt_at=retry_at, claimed_until=None
        )
        logger.error(
            "alerts: message %s to channel %s failed: %s", notification.pk, channel.name, text
        )
        return DeliveryState.FAILED
    _finish(
        notification,
        token,
        state=DeliveryState.PENDING,
        last_error=result.text,
        last_response=result.response,
        next_attempt_at=retry_at,
    )
    Notification.objects.filter(pk__in=folded_ids, claim_token=token).update(
        state=DeliveryState.PENDING, next_attempt_at=retry_at, claimed_until=None
    )
    logger.warning(
        "alerts: message %s to channel %s not sent (%s); retrying at %s",
        notification.pk,
        channel.name,
        result.text,
        iso_utc(retry_at),
    )
    return DeliveryState.PENDING


def _post(
    notification: Notification, channel: AlertChannel, payload: Any
) -> channel_http.PostResult:
    try:
        return channel_http.post(
            channel.url,
            _body(notification, channel, payload),
            timeout=settings.ALERT_CHANNEL_TIMEOUT,
            deadline=settings.ALERT_CHANNEL_DEADLINE_SECONDS,
            signing_secret=channel.signing_secret if channel.kind == ChannelKind.WEBHOOK else "",
        )
    except Exception:
        # Not an HTTP failure (those are results): a bug. The row retries; the traceback is
        # logged without the locals that hold the URL.
        logger.error(
            "alerts: unexpected error posting message %s to channel %s",
            notification.pk,
            channel.name,
        )
        return channel_http.PostResult(channel_http.Outcome.RETRY, "unexpected error")


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
