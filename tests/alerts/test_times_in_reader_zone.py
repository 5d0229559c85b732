"""The alerts pages show times in the reader's zone, the exact UTC value in the tooltip."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import Client

from dashboard.models import UserPreference
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db

SINCE = datetime(2026, 11, 29, 8, 0, 13, 123456, tzinfo=UTC)


@pytest.fixture
def seoul_client(client: Client, django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("minji")
    UserPreference.objects.create(user=user, time_zone="Asia/Seoul")
    client.force_login(user)
    return client


def test_the_list_and_the_incident_show_seoul_time_with_utc_in_the_tooltip(
    seoul_client: Client,
) -> None:
    incident = make_incident(since=SINCE, opened_at=SINCE)

    for url in ("/alerts/", f"/alerts/{incident.pk}/"):
        html = seoul_client.get(url).content.decode()
        assert "2026-11-29 17:00:13 KST" in html, url
        assert 'title="2026-11-29T08:00:13.123456Z"' in html, url
        assert "2026-11-29 08:00:13 UTC" not in html, url


def test_a_reader_in_utc_sees_utc(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("erin"))
    make_incident(since=SINCE, opened_at=SINCE)

    assert "2026-11-29 08:00:13 UTC" in client.get("/alerts/").content.decode()
