"""Channel delivery over real HTTP: retries, permanent refusals, rate limits, secrets kept."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import ChannelKind, DeliveryState, Notification
from fakes.chat_receiver import ChatReceiver
from tests.alerts.channel_receiver import (
    HOOK_TOKEN,
    SIGNING_SECRET,
    channels_only_fixture,  # noqa: F401 - the fixture
    make_channel,
    receiver_fixture,  # noqa: F401 - the fixture
    second_receiver_fixture,  # noqa: F401 - the fixture
)
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("channels_only")]


def plan_one(channel_kind: str, receiver: ChatReceiver, **fields: object) -> Notification:
    channel = make_channel(receiver, channel_kind, **fields)
    make_incident()
    notifications.plan_notifications(timezone.now(), dispatch=False)
    return Notification.objects.get(channel=channel)


def reload(notification: Notification) -> Notification:
    return Notification.objects.get(pk=notification.pk)


def test_server_errors_are_retried_with_backoff_and_the_message_is_delivered_once(
    clock: Clock, receiver: ChatReceiver
) -> None:
    notification = plan_one(ChannelKind.DOORAY, receiver)
    receiver.answer(503, times=2, body="upstream busy")

    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = reload(notification)
    assert row.last_error == "HTTP 503 Service Unavailable: upstream busy"
    assert row.last_response == "HTTP 503 Service Unavailable: upstream busy"
    assert 9 <= (row.next_attempt_at - timezone.now()).total_seconds() <= 10

    clock.advance(10)
    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    clock.advance(10)
    assert delivery.send_due_notifications() == {}, "the second retry waits about 20 s"
    clock.advance(10)
    assert delivery.send_due_notifications() == {"sent": 1}
    clock.advance(3600)
    assert delivery.send_due_notifications() == {}

    assert len(receiver.received) == 3
    assert receiver.received[0].body == receiver.received[2].body
    row = reload(notification)
    assert (row.state, row.attempts, row.last_error) == (DeliveryState.SENT, 3, "")
    assert row.last_response == "HTTP 200 OK: ok"


def test_a_404_is_permanent_and_the_answer_is_kept_for_the_admin(
    clock: Clock, receiver: ChatReceiver
) -> None:
    notification = plan_one(ChannelKind.SLACK, receiver)
    receiver.answer(404, body="no_service\r\n<script>x</script>")

    assert delivery.deliver_notification(notification.pk) == DeliveryState.FAILED
    clock.advance(3600)
    assert delivery.send_due_notifications() == {}

    row = reload(notification)
    assert row.state == DeliveryState.FAILED
    assert row.attempts == 1
    assert row.last_response == "HTTP 404 Not Found: no_service <script>x</script>"
    assert row.last_error == (
        "HTTP 404 Not Found: no_service <script>x</script> (refused for good after 1 attempt)"
    )
    assert len(receiver.received) == 1


def test_a_429_waits_as_long_as_retry_after_says(clock: Clock, receiver: ChatReceiver) -> None:
    notification = plan_one(ChannelKind.DOORAY, receiver)
    receiver.answer(429, headers={"Retry-After": "120"}, body="slow down")

    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = reload(notification)
    assert row.next_attempt_at == timezone.now() + timedelta(seconds=120)
    assert row.last_error == "HTTP 429 Too Many Requests (rate limited)"

    clock.advance(119)
    assert delivery.send_due_notifications() == {}
    clock.advance(1)
    assert delivery.send_due_notifications() == {"sent": 1}
    assert len(receiver.received) == 2


def test_an_endpoint_that_does_not_answer_in_time_is_retried(
    clock: Clock, receiver: ChatReceiver, settings: object
) -> None:
    settings.ALERT_CHANNEL_TIMEOUT = 0.3  # type: ignore[attr-defined]
    notification = plan_one(ChannelKind.WEBHOOK, receiver)
    receiver.delay = 1.0

    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = reload(notification)
    assert row.last_error == "no answer within 0.3 s (timed out)"
    assert row.last_response == ""

    receiver.delay = 0
    clock.advance(10)
    assert delivery.send_due_notifications() == {"sent": 1}


def test_a_redirect_is_not_followed_and_fails_the_message(
    clock: Clock, receiver: ChatReceiver, second_receiver: ChatReceiver
) -> None:
    notification = plan_one(ChannelKind.WEBHOOK, receiver)
    receiver.answer(302, headers={"Location": second_receiver.url("/elsewhere")})

    assert delivery.deliver_notification(notification.pk) == DeliveryState.FAILED

    assert second_receiver.received == []
    row = reload(notification)
    assert row.last_error.startswith("HTTP 302 Found: a redirect, not followed")
    assert "elsewhere" not in row.last_error + row.last_response


def test_the_url_and_secret_never_reach_logs_errors_or_answers(
    clock: Clock, receiver: ChatReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    notification = plan_one(ChannelKind.WEBHOOK, receiver)
    # An endpoint that quotes the request back in its error page...
    receiver.answer(500, body=f"no route for POST /services/webhook/{HOOK_TOKEN}")
    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    texts = [reload(notification).last_error, reload(notification).last_response]
    # ...and one that is down: httpx's own error names the URL.
    receiver.stop()
    clock.advance(10)
    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = reload(notification)
    texts += [row.last_error, row.last_response]
    assert row.last_error.startswith("ConnectError: ")

    everything = "\n".join([*texts, caplog.text])
    assert "channel webhook-oncall" in caplog.text
    assert HOOK_TOKEN not in everything
    assert SIGNING_SECRET not in everything
    assert "/services/webhook" not in everything


def test_a_channel_over_its_rate_waits_for_a_free_slot_without_counting_an_attempt(
    clock: Clock, receiver: ChatReceiver
) -> None:
    channel = make_channel(receiver, ChannelKind.DOORAY, max_per_minute=2)
    for cluster in ("a", "b", "c"):
        make_incident(f"lease_expired:{cluster}/ops/leader", cluster=cluster)
        notifications.plan_notifications(timezone.now(), dispatch=False)
        [row] = Notification.objects.filter(channel=channel, group=cluster)
        # Sent one by one, each as soon as it is planned (as the send task does).
        delivery.deliver_notification(row.pk)
        clock.advance(10)

    third = Notification.objects.get(channel=channel, group="c")
    assert third.state == DeliveryState.PENDING
    assert third.attempts == 0
    assert third.last_error == ""
    # The first went out at 0 s: a slot frees at 60 s.
    assert third.next_attempt_at == third.created_at + timedelta(seconds=40)
    assert len(receiver.received) == 2

    clock.advance(30)  # 60 s after the first
    assert delivery.send_due_notifications() == {"sent": 1}
    assert len(receiver.received) == 3


def test_a_channel_whose_url_cannot_be_decrypted_says_so_and_retries(
    receiver: ChatReceiver, settings: object
) -> None:
    from cryptography.fernet import Fernet

    notification = plan_one(ChannelKind.WEBHOOK, receiver)
    original_keys = list(settings.SECRETS_ENCRYPTION_KEYS)  # type: ignore[attr-defined]
    # The keys were lost: the stored URL and signing secret read as unreadable, not as text.
    settings.SECRETS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]  # type: ignore[attr-defined]

    assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = reload(notification)
    assert row.last_error.startswith("not sent: the channel's stored URL or secret cannot be read")
    assert "SECRETS_ENCRYPTION_KEYS" in row.last_error
    assert HOOK_TOKEN not in row.last_error and SIGNING_SECRET not in row.last_error
    assert receiver.received == [], "nothing is posted without the real URL"

    # The keys come back: the retry delivers.
    settings.SECRETS_ENCRYPTION_KEYS = original_keys  # type: ignore[attr-defined]
    Notification.objects.filter(pk=notification.pk).update(next_attempt_at=timezone.now())
    assert delivery.deliver_notification(notification.pk) == DeliveryState.SENT
    assert len(receiver.received) == 1
