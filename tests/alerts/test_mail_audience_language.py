"""Alert mail in each recipient's language and time zone, over a real SMTP server."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone, translation

from alerts import delivery, notifications
from alerts.mail import render_notification
from alerts.models import AlertSubscription, IncidentEvent, Notification
from dashboard.models import UserPreference
from tests.alerts.conftest import ONCALL, Clock, SmtpServer
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db


def subscribe(django_user_model: Any, name: str, *, language: str = "", zone: str = "") -> str:
    user = django_user_model.objects.create_user(name, email=f"{name}@example.org")
    AlertSubscription.objects.create(user=user, confirmed_email=user.email)
    if language or zone:
        UserPreference.objects.create(user=user, language=language, time_zone=zone)
    return str(user.email)


def test_a_korean_subscriber_and_an_english_alert_email_to_get_a_mail_each_in_their_language(
    clock: Clock, smtp_server: SmtpServer, django_user_model: Any
) -> None:
    minji = subscribe(django_user_model, "minji", language="ko", zone="Asia/Seoul")
    incident = make_incident()

    notifications.plan_notifications(timezone.now(), dispatch=False)
    assert delivery.send_due_notifications() == {"sent": 2}

    korean = Notification.objects.get(language="ko")
    english = Notification.objects.get(language="en")
    assert (korean.recipients, korean.time_zone) == ([minji], "Asia/Seoul")
    assert (english.recipients, english.time_zone) == ([ONCALL], "UTC")
    # Each is rendered in its own language and zone.
    expected = render_notification(
        "opened", [incident], timezone.now(), language="ko", time_zone="Asia/Seoul"
    )
    assert (korean.subject, korean.body_text) == (expected.subject, expected.text)
    assert english.subject == "[FIRING] prod: kube-system/kube-scheduler lease expired"
    received = {tuple(mail.recipients): mail.message for mail in smtp_server.received}
    assert set(received) == {(minji,), (ONCALL,)}
    # A non-ASCII subject is folded onto a continuation line (Python's email package), so
    # the parsed header starts with that line's whitespace.
    assert received[(minji,)]["Subject"].strip() == korean.subject
    # The data stays as written in either language.
    assert "kube-system/kube-scheduler" in received[(minji,)].get_body(("plain",)).get_content()

    # The timeline says so in the reader's language.
    events = IncidentEvent.objects.filter(incident=incident, kind=IncidentEvent.Kind.MAIL)
    assert sorted(event.text for event in events) == [
        f"opened mail #{english.pk} queued (recipients: 1, language: en)",
        f"opened mail #{korean.pk} queued (recipients: 1, language: ko)",
    ]
    with translation.override("ko"):
        assert sorted(event.display_text for event in events) == [
            f"발생 메일 #{english.pk} 대기열에 추가됨 (수신자: 1, 언어: en)",
            f"발생 메일 #{korean.pk} 대기열에 추가됨 (수신자: 1, 언어: ko)",
        ]


def test_without_a_saved_choice_a_subscriber_gets_the_alert_email_defaults(
    clock: Clock, settings: Any, django_user_model: Any
) -> None:
    settings.ALERT_EMAIL_LANGUAGE = "ko"
    settings.TIME_ZONE = "Asia/Seoul"
    jun = subscribe(django_user_model, "jun")
    make_incident()

    notifications.plan_notifications(timezone.now(), dispatch=False)

    [notification] = Notification.objects.all()
    assert sorted(notification.recipients) == sorted([ONCALL, jun])
    assert (notification.language, notification.time_zone) == ("ko", "Asia/Seoul")


def test_an_address_both_in_alert_email_to_and_subscribed_gets_one_mail_in_its_choice(
    clock: Clock, settings: Any, django_user_model: Any
) -> None:
    minji = subscribe(django_user_model, "minji", language="ko", zone="Asia/Seoul")
    settings.ALERT_EMAIL_TO = [minji.upper()]
    make_incident()

    notifications.plan_notifications(timezone.now(), dispatch=False)

    [notification] = Notification.objects.all()
    assert len(notification.recipients) == 1
    assert notification.recipients[0].lower() == minji
    assert notification.language == "ko"


def test_a_zone_the_system_does_not_know_falls_back_to_time_zone(
    clock: Clock, settings: Any, django_user_model: Any
) -> None:
    settings.ALERT_EMAIL_TO = []
    subscribe(django_user_model, "old", language="en", zone="Mars/Olympus_Mons")
    make_incident()

    notifications.plan_notifications(timezone.now(), dispatch=False)

    [notification] = Notification.objects.all()
    assert (notification.language, notification.time_zone) == ("en", "UTC")
