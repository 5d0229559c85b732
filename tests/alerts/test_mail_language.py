"""Alert mail in its recipient's language and time zone, sent through a real SMTP server.

A subscriber who chose Korean and Asia/Seoul gets Korean subjects and bodies with every time
in UTC first and in Seoul beside it; names from the cluster stay as written (escaped in HTML,
cleaned in the subject). The team address keeps English.
"""

from __future__ import annotations

from datetime import timedelta
from email.message import EmailMessage
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.utils import translation

from alerts.mail import incident_summary
from alerts.models import AlertSubscription, Incident, Notification, Severity
from dashboard.models import UserPreference
from tests.alerts.conftest import ONCALL, Clock, SmtpServer, evaluate
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db

KOREAN_READER = "minji@example.org"


def korean_subscriber(django_user_model: Any) -> AbstractBaseUser:
    user = django_user_model.objects.create_user("minji", KOREAN_READER, "x")
    UserPreference.objects.create(user=user, language="ko", time_zone="Asia/Seoul")
    AlertSubscription.objects.create(
        user=user, enabled=True, min_severity=Severity.WARNING, confirmed_email=user.email
    )
    return user


def mail_to(server: SmtpServer, address: str) -> list[EmailMessage]:
    return [mail.message for mail in server.received if address in mail.recipients]


def subject(message: EmailMessage) -> str:
    # Parsed back from its encoded words (a non-ASCII subject), without the folding space.
    return str(message["Subject"]).strip()


def text_part(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain",))
    assert part is not None
    return str(part.get_content())


def html_part(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("html",))
    assert part is not None
    return str(part.get_content())


def test_firing_and_resolved_mail_reach_a_korean_reader_in_korean_with_seoul_times(
    clock: Clock, smtp_server: SmtpServer, django_user_model: Any
) -> None:
    korean_subscriber(django_user_model)
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=30)
    evaluate(cluster)

    [opened] = mail_to(smtp_server, KOREAN_READER)
    assert subject(opened) == "[발생] prod: kube-system/kube-scheduler Lease 만료됨"
    assert opened["Content-Language"] == "ko"
    body = text_part(opened)
    assert body.startswith("새 인시던트")
    # UTC first, the reader's zone beside it; the holder is data, as written.
    assert "시작: 2026-11-29 07:59:45 UTC (2026-11-29 16:59:45 KST) (현재까지 15초)" in body
    assert "보유자(마지막 갱신자): master-0_6f1c" in body
    assert "규칙: Lease 만료됨" in body
    html = html_part(opened)
    assert '<html lang="ko">' in html
    assert "인시던트 열기" in html

    # The team address keeps the default language, English.
    [team] = mail_to(smtp_server, ONCALL)
    assert subject(team) == "[FIRING] prod: kube-system/kube-scheduler lease expired"
    assert team["Content-Language"] == "en"

    clock.advance(107)
    lease.renew_time = clock.now()
    lease.expires_at = clock.now() + timedelta(seconds=15)
    lease.save()
    evaluate(cluster)

    resolved = mail_to(smtp_server, KOREAN_READER)[-1]
    assert (
        subject(resolved) == "[해결] prod: kube-system/kube-scheduler Lease 만료됨 (지속 시간 2분)"
    )
    body = text_part(resolved)
    assert body.startswith("인시던트 해결됨")
    assert "master-0_6f1c이(가) 갱신함" in body
    assert "KST" in body and "UTC" in body
    # The stored English stays as it was for the API and logs.
    incident = Incident.objects.get()
    assert incident.resolution == "renewed by master-0_6f1c"
    assert incident.title == "kube-system/kube-scheduler lease expired"


def test_hostile_names_in_korean_mail_are_escaped_in_html_and_cleaned_in_the_subject(
    clock: Clock, smtp_server: SmtpServer, django_user_model: Any
) -> None:
    korean_subscriber(django_user_model)
    cluster = make_cluster("prod")
    evil = "x\r\nBcc: attacker@evil.example\r\n\r\n<script>alert(1)</script>\u2028"
    make_lease(cluster, f"lead{evil}", namespace="ops", holder=evil, renewed_ago=60)
    evaluate(cluster)

    [message] = mail_to(smtp_server, KOREAN_READER)
    cleaned = subject(message)
    assert cleaned == (
        "[발생] prod: ops/leadx Bcc: attacker@evil.example <script>alert(1)</script> Lease 만료됨"
    )
    assert Notification.objects.get(language="ko").subject == cleaned
    raw = str(message["Subject"])
    assert "\n" not in raw and "\r" not in raw and "\u2028" not in raw
    assert message["Bcc"] is None
    received = [mail for mail in smtp_server.received if KOREAN_READER in mail.recipients]
    assert [mail.recipients for mail in received] == [[KOREAN_READER]]
    html = html_part(message)
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "보유자(마지막 갱신자): x\\x0d\\x0aBcc: attacker@evil.example" in text_part(message)


def test_a_chat_summary_of_an_incident_reads_in_the_active_language(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=30)
    evaluate(cluster)
    incident = Incident.objects.get()

    with translation.override("ko"):
        summary = incident_summary(incident, clock.now())
    assert summary["title"] == "prod: kube-system/kube-scheduler Lease 만료됨"
    assert summary["severity"] == "critical"
    assert summary["severity_label"] == "심각"
    assert {"label": "보유자(마지막 갱신자)", "text": "master-0_6f1c"} in summary["facts"]
    assert summary["url"] == f"https://dash.example.org/alerts/{incident.pk}/"
    assert summary["resolution"] == ""
    assert set(summary) == {
        "title",
        "severity",
        "severity_label",
        "facts",
        "url",
        "link",
        "resolution",
        "since",
        "lasted",
    }
    assert Notification.objects.filter(language="ko").count() == 0
