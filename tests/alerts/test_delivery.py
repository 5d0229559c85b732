"""Delivery through a real SMTP server: outages, retries, claims, and a worker killed mid-send."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import time_machine
from django.conf import settings
from django.db import connection
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import DeliveryState, Notification
from tests.alerts.conftest import ONCALL, Clock, SmtpServer
from tests.alerts.factories import make_incident
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.django_db


def plan_two_mails() -> list[int]:
    """Two notifications due now: one per cluster."""
    make_incident("lease_expired:prod/kube-system/kube-scheduler", cluster="prod")
    make_incident(
        "lease_expired:staging/kube-system/kube-scheduler",
        cluster="staging",
        since=timezone.now() - timedelta(seconds=1),
    )
    ids = notifications.plan_notifications(timezone.now(), dispatch=False)
    assert len(ids) == 2
    return ids


def state(notification_id: int) -> Notification:
    return Notification.objects.get(pk=notification_id)


def test_an_smtp_outage_delays_every_mail_and_loses_none(
    clock: Clock, smtp_server: SmtpServer
) -> None:
    ids = plan_two_mails()
    smtp_server.stop()

    assert delivery.send_due_notifications() == {"pending": 2}
    first = state(ids[0])
    assert first.attempts == 1
    assert "ConnectionRefusedError" in first.last_error
    assert 9 <= (first.next_attempt_at - timezone.now()).total_seconds() <= 10

    # Retries back off exponentially while the server stays down...
    clock.advance(10)
    assert delivery.send_due_notifications() == {"pending": 2}
    clock.advance(10)
    assert delivery.send_due_notifications() == {}, "the second retry waits about 20 s"
    clock.advance(10)
    assert delivery.send_due_notifications() == {"pending": 2}
    assert state(ids[0]).attempts == 3

    # ...and once it is back, the sweep delivers each exactly once.
    smtp_server.start()
    clock.advance(40)
    assert delivery.send_due_notifications() == {"sent": 2}
    assert delivery.send_due_notifications() == {}
    clock.advance(3600)
    assert delivery.send_due_notifications() == {}

    assert sorted(m.message["Subject"] for m in smtp_server.received) == [
        "[FIRING] prod: kube-system/kube-scheduler lease expired",
        "[FIRING] staging: kube-system/kube-scheduler lease expired",
    ]
    assert all(m.recipients == [ONCALL] for m in smtp_server.received)
    sent = state(ids[0])
    assert sent.state == DeliveryState.SENT
    assert sent.attempts == 4
    assert "ConnectionRefusedError" in sent.last_error, "the row keeps the error"


def test_retries_give_up_after_alert_retry_hours(clock: Clock, smtp_server: SmtpServer) -> None:
    [notification_id, _] = plan_two_mails()
    smtp_server.stop()
    for _ in range(400):
        delivery.deliver_notification(notification_id)
        if state(notification_id).state != DeliveryState.PENDING:
            break
        clock.advance(300)

    failed = state(notification_id)
    assert failed.state == DeliveryState.FAILED
    assert failed.last_error.startswith("ConnectionRefusedError")
    assert "(gave up after" in failed.last_error
    assert timezone.now() - failed.created_at <= timedelta(hours=24)
    assert delivery.retry_notification_now(notification_id)
    smtp_server.start()
    assert delivery.deliver_notification(notification_id) == DeliveryState.SENT


def test_a_recipient_refused_for_good_fails_at_once(clock: Clock, smtp_server: SmtpServer) -> None:
    [notification_id, _] = plan_two_mails()
    smtp_server.refuse_recipients = True

    assert delivery.deliver_notification(notification_id) == DeliveryState.FAILED
    failed = state(notification_id)
    assert failed.last_error.startswith(f"recipients refused: {ONCALL} (550)")
    assert failed.last_error.endswith("(refused for good after 1 attempt)")


def test_a_claimed_notification_is_sent_once_however_often_its_task_runs(
    clock: Clock, smtp_server: SmtpServer
) -> None:
    [notification_id, _] = plan_two_mails()

    assert delivery.deliver_notification(notification_id) == DeliveryState.SENT
    assert delivery.deliver_notification(notification_id) is None
    assert len(smtp_server.received) == 1
    assert state(notification_id).attempts == 1


# --- A worker killed mid-send ----------------------------------------------------------------


def _database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def sender(smtp_server: SmtpServer) -> Iterator[subprocess.Popen[bytes] | None]:
    """A worker process that will deliver one notification (started by the test)."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(notification_id: int) -> subprocess.Popen[bytes]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(
                ("DJANGO_", "DATABASE_", "EMAIL_", "ALERT_", "DEFAULT_FROM", "DASHBOARD_")
            )
        }
        env.update(
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            DATABASE_URL=_database_url(),
            EMAIL_URL=f"smtp://127.0.0.1:{smtp_server.port}",
            EMAIL_TIMEOUT="5",
            ALERT_EMAIL_TO=ONCALL,
            DEFAULT_FROM_EMAIL=settings.DEFAULT_FROM_EMAIL,
            DASHBOARD_URL=settings.DASHBOARD_URL,
            LOG_LEVEL="error",
        )
        code = (
            "import django; django.setup()\n"
            "from alerts.delivery import deliver_notification\n"
            f"deliver_notification({notification_id})\n"
        )
        process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, env=env)
        processes.append(process)
        return process

    yield start  # type: ignore[misc]
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _kill_mid_send(smtp_server: SmtpServer, process: subprocess.Popen[bytes]) -> None:
    assert smtp_server.stalled.wait(timeout=20), "the worker never reached the SMTP server"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    smtp_server.stall.clear()


def _after_the_claim(notification_id: int) -> datetime:
    claimed_until = state(notification_id).claimed_until
    assert claimed_until is not None
    return claimed_until + timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("phase", "copies"),
    [
        # Killed before the message was handed over: the retry sends the only copy.
        ("RCPT", 1),
        # Killed after the server had the whole message, before "250 OK" reached the
        # worker (and so before the row said sent): the retry sends one duplicate.
        ("DATA", 2),
    ],
)
def test_a_worker_killed_mid_send_is_retried_not_lost(
    smtp_server: SmtpServer, sender: object, phase: str, copies: int
) -> None:
    [notification_id, _] = plan_two_mails()
    smtp_server.stall_phase = phase
    smtp_server.stall.set()

    _kill_mid_send(smtp_server, sender(notification_id))  # type: ignore[operator]

    killed = state(notification_id)
    assert killed.state == DeliveryState.SENDING
    assert killed.attempts == 1
    # While its claim lasts, nobody else may send it: the worker might still be alive.
    assert notification_id not in delivery.due_notification_ids()
    assert delivery.deliver_notification(notification_id) is None

    with time_machine.travel(_after_the_claim(notification_id), tick=False):
        assert notification_id in delivery.due_notification_ids()
        assert delivery.deliver_notification(notification_id) == DeliveryState.SENT

    delivered = state(notification_id)
    assert delivered.attempts == 2
    subject = delivered.subject
    assert [m.message["Subject"] for m in smtp_server.received].count(subject) == copies
    assert len({m.message["Message-ID"] for m in smtp_server.received}) == 1
