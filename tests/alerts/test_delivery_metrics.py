"""/metrics says when alert messages fail: retrying after a failed attempt, and given up in
the last hour (the series the shipped Prometheus rules alert on), through real SMTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import DeliveryState, Notification
from alerts.queries import alert_metrics
from dashboard.metrics import render_metrics
from tests.alerts.conftest import Clock, SmtpServer
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db


def gauge(name: str) -> str:
    (line,) = [
        line for line in render_metrics().decode().splitlines() if line.startswith(f"{name} ")
    ]
    return line.split()[1]


def test_failed_attempts_show_as_retrying_then_as_given_up_for_an_hour(
    clock: Clock, smtp_server: SmtpServer
) -> None:
    make_incident("lease_expired:prod/kube-system/kube-scheduler", cluster="prod")
    [notification_id] = notifications.plan_notifications(timezone.now(), dispatch=False)
    assert gauge("lease_dashboard_alerts_notifications_retrying") == "0.0"

    smtp_server.stop()
    assert delivery.deliver_notification(notification_id) == DeliveryState.PENDING
    assert gauge("lease_dashboard_alerts_notifications_retrying") == "1.0"
    assert gauge("lease_dashboard_alerts_notifications_failed_last_hour") == "0.0"

    # Retried until ALERT_RETRY_HOURS, then given up.
    for _ in range(400):
        clock.advance(300)
        if delivery.deliver_notification(notification_id) == DeliveryState.FAILED:
            break
    assert Notification.objects.get(pk=notification_id).state == DeliveryState.FAILED
    assert gauge("lease_dashboard_alerts_notifications_retrying") == "0.0"
    assert gauge("lease_dashboard_alerts_notifications_failed_last_hour") == "1.0"
    assert 'lease_dashboard_alerts_notifications{state="failed"} 1.0' in render_metrics().decode()

    # An hour later the failure is history: the alert on it ends by itself.
    clock.advance(3601)
    assert gauge("lease_dashboard_alerts_notifications_failed_last_hour") == "0.0"


def test_a_message_refused_for_good_counts_at_once(clock: Clock, smtp_server: SmtpServer) -> None:
    make_incident("lease_expired:prod/kube-system/kube-scheduler", cluster="prod")
    [notification_id] = notifications.plan_notifications(timezone.now(), dispatch=False)
    smtp_server.refuse_recipients = True
    clock.advance(30)

    assert delivery.deliver_notification(notification_id) == DeliveryState.FAILED
    assert gauge("lease_dashboard_alerts_notifications_failed_last_hour") == "1.0"
    assert gauge("lease_dashboard_alerts_notifications_retrying") == "0.0"


def test_the_new_counts_cost_no_query_of_their_own(clock: Clock) -> None:
    now = timezone.now()
    for state, attempts, due in [
        (DeliveryState.PENDING, 0, now),
        (DeliveryState.PENDING, 2, now + timedelta(seconds=30)),
        (DeliveryState.FAILED, 5, now - timedelta(minutes=10)),
        (DeliveryState.FAILED, 5, now - timedelta(hours=2)),
        (DeliveryState.SENT, 1, now - timedelta(minutes=1)),
    ]:
        Notification.objects.create(
            kind="opened",
            subject="s",
            body_text="t",
            body_html="h",
            state=state,
            attempts=attempts,
            created_at=now - timedelta(hours=3),
            next_attempt_at=due,
        )

    with CaptureQueriesContext(connection) as queries:
        metrics = alert_metrics(now)

    # Open incidents, notifications by state, the unsent aggregate, the evaluator's row.
    assert len(queries) == 4
    assert metrics.retrying == 1
    assert metrics.failed_last_hour == 1
    assert metrics.notifications[DeliveryState.FAILED] == 2
