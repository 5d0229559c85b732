"""Who may silence: a viewer briefly (ALERT_VIEWER_SILENCE_MAX_HOURS) and only an open
incident; an operator for up to 30 days, a resolved incident's key too. Every silence shows
who set it and until when, on the alerts list, the incident page, the overview and the API."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from alerts import evaluation, incident_actions
from alerts.models import Incident, IncidentState, Silence
from dashboard.models import ApiToken
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("vera", email="vera@example.org")


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("olivia", email="olivia@example.org")
    user.groups.add(Group.objects.get(name="operators"))
    return user


def signed_in(client: Client, user: Any) -> Client:
    client.force_login(user)
    return client


def html(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def resolved_incident(clock: Clock) -> Incident:
    incident = make_incident()
    clock.advance(60)
    evaluation.resolve_incident(incident, "renewed by master-0", clock.now())
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    return incident


def test_a_viewers_thirty_day_silence_is_refused(clock: Clock, client: Client, viewer: Any) -> None:
    incident = make_incident()
    signed_in(client, viewer)

    response = client.post(
        f"/alerts/{incident.pk}/silence/", {"duration": "30d", "next": "/alerts/"}
    )

    assert response.status_code == 303
    assert not Silence.objects.exists()
    page = html(client, "/alerts/")
    assert 'class="banner banner-error"' in page
    assert "Without operator rights a silence lasts at most 4 h." in page


def test_a_viewers_two_hour_silence_is_accepted(clock: Clock, client: Client, viewer: Any) -> None:
    incident = make_incident()
    signed_in(client, viewer)

    client.post(f"/alerts/{incident.pk}/silence/", {"duration": "2h"})

    silence = Silence.objects.get(key=incident.key)
    assert silence.ends_at - silence.starts_at == timedelta(hours=2)
    assert silence.created_by == viewer


def test_a_viewer_is_offered_only_the_silences_they_may_set(
    clock: Clock, client: Client, viewer: Any
) -> None:
    incident = make_incident()
    page = html(signed_in(client, viewer), f"/alerts/{incident.pk}/")
    assert 'data-silence="4h"' in page
    assert 'data-silence="1d"' not in page
    assert "(5 minutes to 4 h)" in page


def test_with_the_limit_at_zero_a_viewer_cannot_silence(
    clock: Clock, client: Client, viewer: Any, settings: Any
) -> None:
    settings.ALERT_VIEWER_SILENCE_MAX_HOURS = 0
    incident = make_incident()
    signed_in(client, viewer)
    assert f'action="/alerts/{incident.pk}/silence/"' not in html(client, f"/alerts/{incident.pk}/")

    client.post(f"/alerts/{incident.pk}/silence/", {"duration": "1h"})

    assert not Silence.objects.exists()
    assert "Only operators can silence incidents." in html(client, f"/alerts/{incident.pk}/")


def test_a_viewer_cannot_silence_a_resolved_incidents_key(
    clock: Clock, client: Client, viewer: Any
) -> None:
    incident = resolved_incident(clock)
    signed_in(client, viewer)
    assert f'action="/alerts/{incident.pk}/silence/"' not in html(client, f"/alerts/{incident.pk}/")

    client.post(f"/alerts/{incident.pk}/silence/", {"duration": "1h"})

    assert not Silence.objects.exists()
    assert "Only operators can silence a resolved incident" in html(
        client, f"/alerts/{incident.pk}/"
    )
    with pytest.raises(incident_actions.SilenceRefused):
        incident_actions.silence_incident(incident.pk, viewer, timedelta(hours=1))


def test_an_operator_silences_a_resolved_key_for_thirty_days(
    clock: Clock, client: Client, operator: Any
) -> None:
    incident = resolved_incident(clock)
    signed_in(client, operator)
    assert f'action="/alerts/{incident.pk}/silence/"' in html(client, f"/alerts/{incident.pk}/")

    client.post(f"/alerts/{incident.pk}/silence/", {"duration": "30d"})

    silence = Silence.objects.get(key=incident.key)
    assert silence.ends_at - silence.starts_at == timedelta(days=30)
    assert silence.created_by == operator


def test_every_place_shows_who_silenced_and_until_when(
    clock: Clock, client: Client, viewer: Any, operator: Any
) -> None:
    incident = make_incident()
    signed_in(client, viewer)
    client.post(f"/alerts/{incident.pk}/silence/", {"duration": "2h"})
    until = "2026-11-29 10:00:00"  # NOW (08:00 UTC) plus two hours, to the second

    signed_in(client, operator)  # someone else looks
    for url in ("/alerts/", f"/alerts/{incident.pk}/", "/"):
        assert f"Silenced by vera until {until}" in html(client, url), url

    _, token = ApiToken.issue(operator)
    api = client.get("/api/v1/alerts", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    [shown] = api["incidents"]
    assert shown["silenced_by"] == "vera"
    assert shown["silenced_until"].startswith("2026-11-29T10:00:00")
