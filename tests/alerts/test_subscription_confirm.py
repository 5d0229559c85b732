"""A subscription's address gets alert mail only once its reader followed the signed link
mailed to it: anyone may type any address on the form. Mail goes over real SMTP (aiosmtpd)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import AlertSubscription
from tests.alerts.conftest import ONCALL, Clock, SmtpServer
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db

STRANGER = "someone-else@victim.example"
LINK = re.compile(r"https://dash\.example\.org(/alerts/subscription/confirm/(\S+)/)")


@pytest.fixture
def viewer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("vera", email="vera@example.org")


@pytest.fixture
def client_in(client: Client, viewer: Any) -> Client:
    client.force_login(viewer)
    return client


def subscribe(client: Client, address: str) -> None:
    response = client.post(
        "/alerts/subscription/",
        {"enabled": "on", "min_severity": "warning", "email": address},
    )
    assert response.status_code == 303


def link_sent_to(smtp: SmtpServer, address: str) -> tuple[str, str]:
    """The path and token of the last confirmation link mailed to `address`."""
    [mail] = [m for m in smtp.received if m.recipients == [address]][-1:]
    assert mail.message["Subject"] == "Confirm alert e-mail for vera"
    match = LINK.search(mail.message.get_content())
    assert match, mail.message.get_content()
    return match.group(1), match.group(2)


def alert_recipients(smtp: SmtpServer, key: str = "lease_expired:prod/apps/a") -> set[str]:
    """Open an incident, plan and send its mail: who got it."""
    before = len(smtp.received)
    make_incident(key, title=key)
    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()
    return {address for mail in smtp.received[before:] for address in mail.recipients}


def test_an_unconfirmed_address_gets_no_alert_mail(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    subscribe(client_in, STRANGER)

    link_sent_to(smtp_server, STRANGER)  # the only mail it gets
    assert alert_recipients(smtp_server) == {ONCALL}
    page = client_in.get("/alerts/subscription/").content.decode()
    assert "data-pending" in page


def test_the_link_confirms_the_address(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    subscribe(client_in, STRANGER)
    path, _ = link_sent_to(smtp_server, STRANGER)

    # Opening the link asks; only the button confirms (mail scanners open links).
    assert client_in.get(path).status_code == 200
    assert AlertSubscription.objects.get().confirmed_email == ""
    response = client_in.post(path)

    assert response.status_code == 303
    assert AlertSubscription.objects.get().confirmed_email == STRANGER
    assert alert_recipients(smtp_server) == {ONCALL, STRANGER}


def test_a_tampered_link_is_refused(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    subscribe(client_in, STRANGER)
    _, token = link_sent_to(smtp_server, STRANGER)
    value, _, signature = token.rpartition(":")
    forged = f"{value}:{signature[:-1]}{'A' if signature[-1] != 'A' else 'B'}"

    response = client_in.post(f"/alerts/subscription/confirm/{forged}/")

    assert response.status_code == 400
    assert "not a confirmation link the dashboard sent" in response.content.decode()
    assert AlertSubscription.objects.get().confirmed_email == ""
    assert alert_recipients(smtp_server) == {ONCALL}


def test_an_expired_link_is_refused(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    subscribe(client_in, STRANGER)
    path, _ = link_sent_to(smtp_server, STRANGER)
    clock.advance(2 * 86400 + 1)

    response = client_in.post(path)

    assert response.status_code == 400
    assert "has expired" in response.content.decode()
    assert AlertSubscription.objects.get().confirmed_email == ""


def test_another_accounts_link_is_refused(
    clock: Clock, client: Client, viewer: Any, smtp_server: SmtpServer, django_user_model: Any
) -> None:
    client.force_login(viewer)
    subscribe(client, STRANGER)
    path, _ = link_sent_to(smtp_server, STRANGER)
    client.force_login(django_user_model.objects.create_user("mallory"))

    response = client.post(path)

    assert response.status_code == 400
    assert AlertSubscription.objects.get(user=viewer).confirmed_email == ""


def test_changing_the_address_makes_it_pending_again(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    subscribe(client_in, "vera@example.org")
    path, _ = link_sent_to(smtp_server, "vera@example.org")
    client_in.post(path)
    assert alert_recipients(smtp_server) == {ONCALL, "vera@example.org"}

    clock.advance(61)
    subscribe(client_in, STRANGER)

    assert alert_recipients(smtp_server, "lease_expired:prod/apps/b") == {ONCALL}
    link_sent_to(smtp_server, STRANGER)
    # The old address's link confirms nothing for the new one.
    assert client_in.post(path).status_code == 400
    assert AlertSubscription.objects.get().confirmed_email == "vera@example.org"


def test_one_link_a_minute_at_most(
    clock: Clock, client_in: Client, smtp_server: SmtpServer
) -> None:
    for _ in range(3):
        subscribe(client_in, STRANGER)
    assert [m.recipients for m in smtp_server.received] == [[STRANGER]]
    clock.advance(61)
    subscribe(client_in, STRANGER)
    assert len(smtp_server.received) == 2
