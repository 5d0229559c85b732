"""Alert channels in admin: a write-only URL and secret, a URL check, a test message."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from alerts import delivery
from alerts.models import AlertChannel, ChannelKind, DeliveryState, Notification
from fakes.chat_receiver import ChatReceiver
from tests.alerts.channel_receiver import (
    HOOK_TOKEN,
    SIGNING_SECRET,
    channels_only_fixture,  # noqa: F401 - the fixture
    hook_path,
    make_channel,
    receiver_fixture,  # noqa: F401 - the fixture
)
from tests.alerts.conftest import Clock

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("channels_only")]

ADD = "/admin/alerts/alertchannel/add/"


@pytest.fixture
def admin_client_logged_in(client: Client, django_user_model: Any) -> Client:
    root = django_user_model.objects.create_superuser("root", "root@example.org", "x")
    client.force_login(root)
    return client


def form(**fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "name": "platform-webhook",
        "kind": ChannelKind.WEBHOOK,
        "url": "",
        "signing_secret": "",
        "enabled": "on",
        "rules": ["lease_expired", "leader_group_unstaffed"],
        "min_severity": "warning",
        "clusters": "prod\nstaging, prod",
        "language": "ko",
        "time_zone": "Asia/Seoul",
        "max_per_minute": "10",
    }
    values.update(fields)
    return values


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_the_url_and_secret_are_write_only_and_a_blank_field_keeps_them(
    admin_client_logged_in: Client, receiver: ChatReceiver
) -> None:
    client = admin_client_logged_in
    url = receiver.url(hook_path("webhook"))
    response = client.post(ADD, form(url=url, signing_secret=SIGNING_SECRET))
    assert response.status_code == 302, response.content.decode()[:2000]
    channel = AlertChannel.objects.get()
    assert (channel.url, channel.signing_secret) == (url, SIGNING_SECRET)
    assert channel.rules == ["lease_expired", "leader_group_unstaffed"]
    assert channel.clusters == ["prod", "staging"]

    change = f"/admin/alerts/alertchannel/{channel.pk}/change/"
    for html in (page(client, change), page(client, "/admin/alerts/alertchannel/")):
        assert HOOK_TOKEN not in html
        assert SIGNING_SECRET not in html
        assert "platform-webhook" in html

    # Saved again with both fields blank: the stored values stay.
    response = client.post(change, form(name="platform-hook", max_per_minute="5"))
    assert response.status_code == 302, response.content.decode()[:2000]
    channel.refresh_from_db()
    assert (channel.name, channel.max_per_minute) == ("platform-hook", 5)
    assert (channel.url, channel.signing_secret) == (url, SIGNING_SECRET)


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("ftp://hooks.example.org/x", "The URL must start with http:// or https://."),
        ("https:///services/x", "The URL must name a host."),
        ("", "A channel needs its URL."),
    ],
)
def test_a_channel_url_must_be_http_or_https_with_a_host(
    admin_client_logged_in: Client, url: str, error: str
) -> None:
    response = admin_client_logged_in.post(ADD, form(url=url, signing_secret="s"))
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not AlertChannel.objects.exists()


def test_a_generic_webhook_needs_a_signing_secret(admin_client_logged_in: Client) -> None:
    response = admin_client_logged_in.post(ADD, form(url="https://hooks.example.org/x"))
    assert "A generic webhook signs every message: set a secret." in response.content.decode()


def test_the_test_message_goes_through_the_outbox_and_its_answer_shows_on_the_channel(
    clock: Clock, admin_client_logged_in: Client, receiver: ChatReceiver
) -> None:
    client = admin_client_logged_in
    channel = make_channel(receiver, ChannelKind.DOORAY)
    receiver.answer(404, body="no such hook")
    response = client.post(
        "/admin/alerts/alertchannel/",
        {"action": "send_test_message", "_selected_action": [channel.pk]},
        follow=True,
    )
    assert "A test message to 1 channel is queued" in response.content.decode()
    row = Notification.objects.get(channel=channel)
    assert row.state == DeliveryState.PENDING
    assert row.created_at == timezone.now()

    delivery.send_due_notifications()

    assert receiver.received[0].json["text"] == (
        "Test message from the lease dashboard to the channel dooray-oncall: it can reach you."
    )
    assert Notification.objects.get(pk=row.pk).state == DeliveryState.FAILED
    html = page(client, f"/admin/alerts/alertchannel/{channel.pk}/change/")
    assert "HTTP 404 Not Found: no such hook" in html
    assert HOOK_TOKEN not in html
    for url in ("/admin/alerts/notification/", f"/admin/alerts/notification/{row.pk}/change/"):
        html = page(client, url)
        assert "dooray-oncall" in html
        assert HOOK_TOKEN not in html
