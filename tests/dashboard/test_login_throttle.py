"""Password sign-ins are throttled (django-axes) over the real login forms.

Five failures for one user name from one address lock that pair out for fifteen minutes,
whichever form (ours or the admin's) they were made on; the lockout answers 429 on the login
page with the reason, and is logged as a warning.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from axes.models import AccessAttempt
from django.test import Client

pytestmark = pytest.mark.django_db

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
LOCKED = "Too many failed sign-in attempts for this user name from your address"


def attempt(client: Client, password: str, path: str = "/login/", **extra: Any) -> Any:
    return client.post(path, {"username": "erin", "password": password}, **extra)


def test_five_failures_lock_out_even_the_right_password_for_fifteen_minutes(
    client: Client, engineer: Any
) -> None:
    with time_machine.travel(START, tick=False) as clock:
        for _ in range(4):
            response = attempt(client, "wrong")
            assert response.status_code == 200
            assert "didn't match" in response.content.decode()

        fifth = attempt(client, "wrong")
        assert fifth.status_code == 429
        assert LOCKED in fifth.content.decode()
        assert "blocked for 15 minutes" in fifth.content.decode()

        clock.shift(timedelta(minutes=14, seconds=59))
        refused = attempt(client, "engineer-pass-123")
        assert refused.status_code == 429 and LOCKED in refused.content.decode()
        assert 'value="erin"' in refused.content.decode()
        assert client.get("/").status_code == 302, "not signed in while locked out"

        # Attempts during the lockout do not extend it: 15 minutes after the fifth failure.
        clock.shift(timedelta(seconds=2))
        admitted = attempt(client, "engineer-pass-123")
        assert admitted.status_code == 302 and admitted["Location"] == "/"
        assert client.get("/").status_code == 200


def test_the_lockout_is_for_one_user_name_from_one_address(
    client: Client, engineer: Any, operator: Any
) -> None:
    for _ in range(5):
        attempt(client, "wrong")
    assert attempt(client, "engineer-pass-123").status_code == 429

    elsewhere = Client(REMOTE_ADDR="10.20.30.40")
    assert attempt(elsewhere, "engineer-pass-123").status_code == 302
    colleague = Client()
    response = colleague.post("/login/", {"username": "olivia", "password": "operator-pass-123"})
    assert response.status_code == 302


def test_failures_on_the_admin_login_count_too(client: Client, django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("erin", password="admin-pass-123")
    for _ in range(3):
        assert attempt(client, "wrong").status_code == 200
    assert attempt(client, "wrong", path="/admin/login/?next=/admin/").status_code == 200

    fifth = attempt(client, "wrong", path="/admin/login/?next=/admin/")
    assert fifth.status_code == 429 and LOCKED in fifth.content.decode()
    assert attempt(client, "admin-pass-123", path="/admin/login/?next=/admin/").status_code == 429
    assert attempt(client, "admin-pass-123").status_code == 429
    assert client.get("/admin/").status_code == 302


def test_a_successful_sign_in_clears_earlier_failures(client: Client, engineer: Any) -> None:
    for _ in range(4):
        attempt(client, "wrong")
    assert attempt(client, "engineer-pass-123").status_code == 302
    client.post("/logout/")

    for _ in range(4):
        assert attempt(client, "wrong").status_code == 200
    assert attempt(client, "engineer-pass-123").status_code == 302


def test_a_lockout_is_logged_as_a_warning_without_the_password(
    client: Client, engineer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(5):
        attempt(client, "hunter2-wrong")

    lockouts = [r for r in caplog.records if "Locking out" in r.getMessage()]
    assert len(lockouts) == 1 and lockouts[0].levelno == logging.WARNING
    assert "hunter2-wrong" not in caplog.text
    stored = AccessAttempt.objects.get()
    assert stored.failures_since_start == 5 and "hunter2-wrong" not in stored.post_data


def test_axes_logs_stay_at_warning_in_our_logging_config(settings: Any) -> None:
    assert settings.LOGGING["loggers"]["axes"]["level"] == "WARNING"
