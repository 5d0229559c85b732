"""A chat or webhook endpoint that trickles or bombs its answer is a retry, said in words,
never with the URL. Hostile servers over real HTTP on loopback."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.utils import timezone

from alerts import delivery, notifications
from alerts.channels import http as channel_http
from alerts.models import AlertChannel, ChannelKind, DeliveryState, Notification
from tests.alerts.channel_receiver import (
    HOOK_TOKEN,
    channels_only_fixture,  # noqa: F401 - the fixture
    hook_path,
)
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident
from tests.dashboard.hostile_http import HostileServer, gzip_bomb

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("channels_only")]


def plan_to(server: HostileServer, kind: str) -> Notification:
    channel = AlertChannel.objects.create(
        name=f"{kind}-oncall", kind=kind, url=server.url + hook_path(kind)
    )
    make_incident()
    notifications.plan_notifications(timezone.now(), dispatch=False)
    return Notification.objects.get(channel=channel)


@pytest.mark.parametrize("kind", [ChannelKind.DOORAY, ChannelKind.WEBHOOK])
def test_a_trickling_endpoint_is_a_retry_within_the_deadline(
    clock: Clock, settings: Any, kind: str
) -> None:
    settings.ALERT_CHANNEL_TIMEOUT = 5  # each read waits 0.5 s only: the total must stop it
    settings.ALERT_CHANNEL_DEADLINE_SECONDS = 1.5
    with HostileServer("trickle", interval=0.5) as server:
        notification = plan_to(server, kind)
        started = time.monotonic()
        assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
        elapsed = time.monotonic() - started
    assert elapsed < 2.5
    row = Notification.objects.get(pk=notification.pk)
    assert row.last_error == "took longer than 1.5 s in total"
    assert HOOK_TOKEN not in row.last_error + row.last_response


def test_a_gzip_bomb_answer_is_a_retry_and_never_inflated(clock: Clock) -> None:
    with HostileServer("bomb", body=gzip_bomb(128)) as server:
        notification = plan_to(server, ChannelKind.SLACK)
        assert delivery.deliver_notification(notification.pk) == DeliveryState.PENDING
    row = Notification.objects.get(pk=notification.pk)
    assert row.last_error == "answer compressed as 'gzip', which was not asked for"
    assert HOOK_TOKEN not in row.last_error


def test_an_oversized_answer_is_a_retry() -> None:
    with HostileServer("huge", size=16 * 1024 * 1024) as server:
        result = channel_http.post(server.url + hook_path("webhook"), b"{}", timeout=5, deadline=5)
    assert result.outcome == channel_http.Outcome.RETRY
    assert result.text == "answer larger than 64 KiB"
