"""The alerts pages, the navigation badge, the API, metrics, the command and admin."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO
from typing import Any

import orjson
import pytest
from django.core import mail
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from alerts import delivery, evaluation, notifications
from alerts.models import (
    AlertRule,
    AlertSubscription,
    DeliveryState,
    Incident,
    IncidentEvent,
    IncidentState,
    Notification,
    Rule,
    Severity,
)
from dashboard.metrics import render_metrics
from dashboard.models import ApiToken
from tests.alerts.conftest import Clock, evaluate
from tests.alerts.factories import make_incident
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def engineer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("erin", email="erin@example.org")


@pytest.fixture
def client_in(client: Client, engineer: Any) -> Client:
    client.force_login(engineer)
    return client


def text(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def incident_ids(html: str, section: str) -> list[int]:
    body = html.split(f"<h2>{section}", 1)[1].split("</table>", 1)[0]
    return [int(pk) for pk in re.findall(r'data-incident="(\d+)"', body)]


def resolve(incident: Incident, minutes: int = 5) -> None:
    evaluation.resolve_incident(
        incident, "renewed by master-0", incident.since + timedelta(minutes=minutes)
    )


# --- The alerts page -------------------------------------------------------------------------


def test_alerts_page_lists_open_incidents_first_then_recent_resolved_ones(
    clock: Clock, client_in: Client
) -> None:
    warning = make_incident(
        "lease_flapping:prod/ops/x",
        rule=Rule.LEASE_FLAPPING,
        severity=Severity.WARNING,
        title="ops/x lease is flapping",
    )
    critical = make_incident()
    done = make_incident("lease_expired:prod/ops/y", title="ops/y lease expired")
    resolve(done)
    make_incident("source_stale:watch:dev", state=IncidentState.PENDING, cluster="dev")

    html = text(client_in, "/alerts/")

    assert incident_ids(html, "Open") == [critical.pk, warning.pk]
    assert incident_ids(html, "Resolved") == [done.pk]
    assert "source_stale:watch:dev" not in html, "pending incidents are not shown"
    assert "renewed by master-0" in html
    assert f'href="/alerts/{critical.pk}/"' in html
    assert 'aria-label="Acknowledge incident' in html


def test_filters_and_the_htmx_refresh_return_only_the_region_with_the_badge(
    clock: Clock, client_in: Client
) -> None:
    make_incident()
    flapping = make_incident(
        "lease_flapping:staging/ops/x",
        cluster="staging",
        rule=Rule.LEASE_FLAPPING,
        severity=Severity.WARNING,
        title="ops/x lease is flapping",
    )

    html = text(
        client_in, "/alerts/?severity=warning&state=open", HTTP_HX_TARGET="incidents", **HTMX
    )

    assert html.lstrip().startswith('<section id="incidents"')
    assert incident_ids(html, "Open") == [flapping.pk]
    assert "<h2>Resolved" not in html
    assert 'id="nav-alerts-badge" class="nav-badge nav-badge-critical"' in html
    assert 'hx-swap-oob="true">2</span>' in html


def test_bad_filters_are_reported_and_the_rest_applies(clock: Clock, client_in: Client) -> None:
    make_incident()
    html = text(client_in, "/alerts/?rule=nonsense&state=open")
    assert "Some filters were not understood" in html
    assert len(incident_ids(html, "Open")) == 1


def test_a_silent_evaluator_is_a_banner_not_a_calm_page(clock: Clock, client_in: Client) -> None:
    assert "have never been evaluated" in text(client_in, "/alerts/")
    evaluation.run_evaluation(dispatch=False)
    assert "Beat or the default worker is not running" not in text(client_in, "/alerts/")
    clock.advance(60)
    assert "were last evaluated 60 s ago" in text(client_in, "/alerts/")


def test_the_navigation_badge_counts_open_incidents_on_every_page(
    clock: Clock, client_in: Client
) -> None:
    # The badge's attributes are on more than one line of markup: compared word by word.
    html = " ".join(text(client_in, "/").split())
    assert (
        '<span id="nav-alerts-badge" class="nav-badge" role="img" '
        'aria-label=", nothing needs attention" title="nothing needs attention" '
        'data-attention="0" hidden>0</span>'
    ) in html

    make_incident()
    make_incident(
        "lease_expired:prod/ops/y", title="ops/y lease expired", severity=Severity.WARNING
    )
    html = " ".join(text(client_in, "/leases/").split())
    assert (
        '<span id="nav-alerts-badge" class="nav-badge nav-badge-critical" '
        'role="img" aria-label=", 2 need attention" title="2 need attention" '
        'data-attention="2">2</span>'
    ) in html


def test_the_database_error_page_does_not_need_the_badge(rf: Any) -> None:
    from django.db import OperationalError

    from dashboard.views import server_error

    try:
        raise OperationalError("the database is down")
    except OperationalError:
        response = server_error(rf.get("/alerts/"))
    assert response.status_code == 503
    assert b"nav-alerts-badge" not in response.content


# --- The incident page and its actions -------------------------------------------------------


def test_incident_page_shows_the_timeline_with_every_mail_and_its_delivery_state(
    clock: Clock, client_in: Client, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens: refused
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="<b>master-0</b>", renewed_ago=30)
    evaluate(cluster)
    incident = Incident.objects.get()

    html = text(client_in, f"/alerts/{incident.pk}/")

    assert "prod: kube-system/kube-scheduler lease expired" in html
    assert "<code>lease_expired:prod/kube-system/kube-scheduler</code>" in html
    assert "&lt;b&gt;master-0&lt;/b&gt;" in html and "<b>master-0</b>" not in html
    timeline = html.split("<h2>Timeline</h2>", 1)[1]
    assert "opened: prod: kube-system/kube-scheduler lease expired" in timeline
    assert "opened mail #" in timeline
    assert 'data-delivery-state="pending"' in timeline
    assert "Error: ConnectionRefusedError" in timeline
    assert "1 attempt; next attempt in" in timeline


def test_acknowledging_from_the_page_records_who_and_when_and_returns_there(
    clock: Clock, client_in: Client, engineer: Any
) -> None:
    incident = make_incident()

    response = client_in.post(
        f"/alerts/{incident.pk}/acknowledge/", {"next": "/alerts/?state=open"}
    )

    assert response.status_code == 303
    assert response["Location"] == "/alerts/?state=open"
    incident.refresh_from_db()
    assert incident.acknowledged_by == engineer
    assert incident.acknowledged_at == timezone.now()
    event = IncidentEvent.objects.get(incident=incident, kind=IncidentEvent.Kind.ACKNOWLEDGED)
    assert event.user == engineer
    html = text(client_in, "/alerts/")
    assert "Acknowledged by erin" in html


def test_an_htmx_acknowledge_answers_with_the_region_it_targets(
    clock: Clock, client_in: Client
) -> None:
    incident = make_incident()
    response = client_in.post(
        f"/alerts/{incident.pk}/acknowledge/",
        {"next": "/alerts/"},
        follow=True,
        HTTP_HX_TARGET="incidents",
        **HTMX,
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="incidents"')
    assert "Acknowledged by erin" in html


def test_an_unsafe_next_url_is_ignored(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    response = client_in.post(
        f"/alerts/{incident.pk}/acknowledge/", {"next": "https://evil.example/"}
    )
    assert response["Location"] == f"/alerts/{incident.pk}/"


def test_silence_and_end_it_from_the_incident_page(
    clock: Clock, client_in: Client, engineer: Any
) -> None:
    incident = make_incident()

    client_in.post(
        f"/alerts/{incident.pk}/silence/", {"duration": "4h", "reason": "maintenance <window>"}
    )
    html = text(client_in, f"/alerts/{incident.pk}/")
    assert "by erin until" in html
    assert "maintenance &lt;window&gt;" in html
    assert "End the silence" in html

    client_in.post(f"/alerts/{incident.pk}/unsilence/", {})
    html = text(client_in, f"/alerts/{incident.pk}/")
    assert "End the silence" not in html
    kinds = list(
        IncidentEvent.objects.filter(incident=incident).values_list("kind", "user__username")
    )
    assert kinds == [("silenced", "erin"), ("unsilenced", "erin")]


def test_actions_need_a_post_a_login_and_an_existing_incident(
    clock: Clock, client: Client, client_in: Client
) -> None:
    incident = make_incident()
    response = client_in.get(f"/alerts/{incident.pk}/acknowledge/")
    assert response.status_code == 302
    assert response["Location"] == f"/alerts/{incident.pk}/#incident-actions"
    assert client_in.post("/alerts/999/acknowledge/").status_code == 404
    assert client_in.get("/alerts/999/").status_code == 404
    client_in.logout()
    response = client.post(f"/alerts/{incident.pk}/acknowledge/")
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert Incident.objects.get().acknowledged_at is None


# --- Subscription ----------------------------------------------------------------------------


def test_a_user_subscribes_to_critical_alerts_at_their_address(
    clock: Clock, client_in: Client, engineer: Any, mailoutbox: list[mail.EmailMessage]
) -> None:
    assert "You get no alert e-mail of your own" in text(client_in, "/alerts/subscription/")

    response = client_in.post(
        "/alerts/subscription/",
        {"enabled": "on", "min_severity": "critical", "email": "erin@oncall.example.org"},
    )
    assert response.status_code == 303
    subscription = AlertSubscription.objects.get(user=engineer)
    assert subscription.enabled and subscription.min_severity == Severity.CRITICAL
    engineer.refresh_from_db()
    assert engineer.email == "erin@oncall.example.org"
    # The address is confirmed by the link mailed to it (tests/alerts/test_subscription_confirm.py).
    [confirmation] = mailoutbox
    link = re.search(
        r"https://dash\.example\.org(/alerts/subscription/confirm/\S+/)", confirmation.body
    )
    assert link and client_in.post(link.group(1)).status_code == 303
    mailoutbox.clear()
    assert "for critical incidents only" in text(client_in, "/alerts/subscription/")

    make_incident()
    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()
    assert sorted(address for message in mailoutbox for address in message.to) == [
        "erin@oncall.example.org",
        "oncall@example.org",
    ]


def test_subscribing_without_an_address_is_refused(client_in: Client, engineer: Any) -> None:
    engineer.email = ""
    engineer.save()
    response = client_in.post(
        "/alerts/subscription/", {"enabled": "on", "min_severity": "warning", "email": ""}
    )
    assert response.status_code == 200
    assert "An address is needed" in response.content.decode()
    assert not AlertSubscription.objects.exists()


# --- API -------------------------------------------------------------------------------------


def test_api_lists_open_and_resolved_incidents_with_their_notifications(
    clock: Clock, client: Client, engineer: Any
) -> None:
    _, token = ApiToken.issue(engineer)
    open_one = make_incident()
    resolved_one = make_incident("lease_expired:prod/ops/y", title="ops/y lease expired")
    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()
    resolve(resolved_one)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    body = orjson.loads(client.get("/api/v1/alerts?state=open", **auth).content)
    assert body["state"] == "open"
    assert [incident["id"] for incident in body["incidents"]] == [open_one.pk]
    [incident] = body["incidents"]
    assert incident["key"] == "lease_expired:prod/kube-system/kube-scheduler"
    assert incident["url"] == f"https://dash.example.org/alerts/{open_one.pk}/"
    [notification] = incident["notifications"]
    assert notification["kind"] == "opened"
    assert notification["recipients"] == ["oncall@example.org"]
    assert notification["state"] == "sent"
    assert notification["attempts"] == 1
    assert notification["sent_at"] == "2026-11-29T08:00:00Z"

    body = orjson.loads(client.get("/api/v1/alerts?state=resolved", **auth).content)
    assert [incident["id"] for incident in body["incidents"]] == [resolved_one.pk]
    assert body["incidents"][0]["resolved_at"] == "2026-11-29T08:05:00Z"
    assert body["incidents"][0]["duration_seconds"] == 300


def test_api_refuses_bad_parameters_and_anonymous_callers(client: Client, engineer: Any) -> None:
    assert client.get("/api/v1/alerts").status_code == 401
    client.force_login(engineer)
    assert client.get("/api/v1/alerts?state=firing").status_code == 400
    assert client.get("/api/v1/alerts?limit=0").status_code == 400
    assert client.get("/api/v1/alerts?limit=x").status_code == 400
    assert orjson.loads(client.get("/api/v1/alerts").content)["incidents"] == []


# --- Metrics, the command, admin -------------------------------------------------------------


def test_metrics_count_open_incidents_by_rule_and_severity_and_mail_by_state(clock: Clock) -> None:
    make_incident()
    make_incident("lease_expired:prod/ops/y", title="ops/y lease expired")
    notifications.plan_notifications(timezone.now(), dispatch=False)

    metrics = render_metrics().decode()

    assert (
        'lease_dashboard_alerts_open_incidents{rule="lease_expired",severity="critical"} 2.0'
        in metrics
    )
    assert (
        'lease_dashboard_alerts_open_incidents{rule="source_stale",severity="warning"} 0.0'
        in metrics
    )
    assert 'lease_dashboard_alerts_notifications{state="pending"} 1.0' in metrics
    assert 'lease_dashboard_alerts_notifications{state="sent"} 0.0' in metrics
    assert "lease_dashboard_alerts_evaluation_age_seconds -1.0" in metrics


def test_check_alerts_evaluates_once_and_sends_in_the_foreground(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    make_lease(make_cluster("prod"), "kube-scheduler", renewed_ago=40)
    out = StringIO()

    call_command("check_alerts", stdout=out)

    assert "Evaluated: 1 opened, 0 resolved" in out.getvalue()
    assert "Sent what was due: 1 sent." in out.getvalue()
    assert len(mailoutbox) == 1
    assert Notification.objects.get().state == DeliveryState.SENT


def test_admin_lists_one_rule_row_per_rule_and_explains_the_fields(
    client: Client, django_user_model: Any
) -> None:
    admin = django_user_model.objects.create_superuser("root", "root@example.org", "x")
    client.force_login(admin)
    html = text(client, "/admin/alerts/alertrule/")
    for rule in Rule:
        assert str(rule.label) in html
    flapping = AlertRule.objects.get(rule=Rule.LEASE_FLAPPING)
    row = text(client, f"/admin/alerts/alertrule/{flapping.pk}/change/")
    assert "Holder changes that open it (default ALERT_FLAP_CHANGES)." in row
    assert text(client, "/admin/alerts/incident/")
    assert text(client, "/admin/alerts/notification/")
