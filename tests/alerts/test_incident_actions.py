"""Acknowledge, silence and unsilence: the same actions on the alerts list and the incident
page, post/redirect/get back to the row or the actions, and harmless when sent twice."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from alerts import evaluation
from alerts.models import Incident, IncidentEvent, IncidentState, Silence
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db

LIST = "/alerts/"


@pytest.fixture
def engineer(django_user_model: Any) -> Any:
    # An operator: these tests silence for days, which a viewer may not (test_silence_rights).
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("erin", email="erin@example.org")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def client_in(client: Client, engineer: Any) -> Client:
    client.force_login(engineer)
    return client


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def places(incident: Incident) -> dict[str, tuple[str, str]]:
    """Where an action can be sent from: (the page, the `next` it sends and lands on)."""
    return {
        "list": (LIST, f"{LIST}#incident-{incident.pk}"),
        "page": (f"/alerts/{incident.pk}/", f"/alerts/{incident.pk}/#incident-actions"),
    }


def action_form(html: str, incident: Incident, action: str) -> str:
    """The form that posts `action` for `incident`, as the page renders it."""
    url = f"/alerts/{incident.pk}/{action}/"
    forms = re.findall(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', html, re.S)
    bodies = [body for action_url, body in forms if action_url == url]
    assert bodies, f"no {action} form for incident {incident.pk}"
    return bodies[0]


def next_of(form: str) -> str:
    match = re.search(r'name="next" value="([^"]*)"', form)
    assert match
    return match.group(1).replace("&amp;", "&")


@pytest.mark.parametrize("place", ["list", "page"])
def test_acknowledge_from_either_place_comes_back_to_the_row_or_the_actions(
    clock: Clock, client_in: Client, place: str
) -> None:
    incident = make_incident()
    url, back = places(incident)[place]
    form = action_form(page(client_in, url), incident, "acknowledge")
    assert next_of(form) == back

    response = client_in.post(f"/alerts/{incident.pk}/acknowledge/", {"next": next_of(form)})

    assert response.status_code == 303
    assert response["Location"] == back
    incident.refresh_from_db()
    assert incident.acknowledged_by is not None
    assert incident.acknowledged_by.get_username() == "erin"
    html = client_in.get(url).content.decode()
    assert '<ul class="messages" role="status">' in html
    assert "Acknowledged: no more reminders for this incident." in html
    assert "Acknowledged by erin" in html


@pytest.mark.parametrize("place", ["list", "page"])
@pytest.mark.parametrize(
    ("duration", "lasts"),
    [
        ("1h", timedelta(hours=1)),
        ("4h", timedelta(hours=4)),
        ("1d", timedelta(days=1)),
        ("90m", timedelta(minutes=90)),
        ("3d", timedelta(days=3)),
    ],
)
def test_silence_from_either_place_for_the_chosen_duration(
    clock: Clock, client_in: Client, place: str, duration: str, lasts: timedelta
) -> None:
    incident = make_incident()
    url, back = places(incident)[place]
    html = page(client_in, url)
    presets = action_form(html, incident, "silence")
    assert re.findall(r'name="duration" value="(\w+)"', presets) == ["1h", "4h", "1d"]
    assert "selected" not in presets, "the engineer picks: no duration is preselected"
    assert f'id="silence-duration-{incident.pk}"' in html, "the custom duration field"

    response = client_in.post(
        f"/alerts/{incident.pk}/silence/", {"duration": duration, "next": back}
    )

    assert response.status_code == 303 and response["Location"] == back
    silence = Silence.objects.get(key=incident.key)
    assert silence.ends_at - silence.starts_at == lasts
    html = page(client_in, url)
    assert "Silenced until" in html
    assert f'action="/alerts/{incident.pk}/unsilence/"' in html


@pytest.mark.parametrize("place", ["list", "page"])
def test_unsilence_from_either_place(clock: Clock, client_in: Client, place: str) -> None:
    incident = make_incident()
    url, back = places(incident)[place]
    client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "4h"})
    form = action_form(page(client_in, url), incident, "unsilence")

    response = client_in.post(f"/alerts/{incident.pk}/unsilence/", {"next": next_of(form)})

    assert response.status_code == 303 and response["Location"] == back
    assert not Silence.objects.active(clock.now()).exists()
    assert "Silence ended: mail about it resumes." in page(client_in, url)


@pytest.mark.parametrize("duration", ["", "forever", "0m", "2m", "31d", "1w"])
def test_a_silence_needs_a_duration_from_five_minutes_to_thirty_days(
    clock: Clock, client_in: Client, duration: str
) -> None:
    incident = make_incident()
    response = client_in.post(
        f"/alerts/{incident.pk}/silence/", {"duration": duration, "next": LIST}
    )
    assert response.status_code == 303
    assert not Silence.objects.exists()
    html = page(client_in, LIST)
    assert 'class="banner banner-error"' in html


def test_a_double_click_on_acknowledge_acknowledges_once(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    for _ in range(2):
        response = client_in.post(f"/alerts/{incident.pk}/acknowledge/", {"next": LIST})
        assert response.status_code == 303
    events = IncidentEvent.objects.filter(incident=incident, kind=IncidentEvent.Kind.ACKNOWLEDGED)
    assert events.count() == 1


def test_a_double_click_on_a_silence_silences_once(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    for _ in range(2):
        client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "1h", "next": LIST})
        clock.advance(1)
    assert Silence.objects.count() == 1
    events = IncidentEvent.objects.filter(incident=incident, kind=IncidentEvent.Kind.SILENCED)
    assert events.count() == 1


def test_a_different_silence_later_replaces_the_first(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "1h"})
    clock.advance(1)
    client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "1d"})
    active = Silence.objects.active(clock.now())
    assert [s.ends_at - s.starts_at for s in active] == [timedelta(days=1)]


def test_a_double_click_on_unsilence_ends_the_silence_once(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "4h"})
    for _ in range(2):
        client_in.post(f"/alerts/{incident.pk}/unsilence/", {"next": LIST})
    events = IncidentEvent.objects.filter(incident=incident, kind=IncidentEvent.Kind.UNSILENCED)
    assert events.count() == 1


@pytest.mark.parametrize("action", ["acknowledge", "unacknowledge", "silence", "unsilence"])
def test_get_on_an_action_url_goes_to_the_incident_not_a_405(
    clock: Clock, client_in: Client, action: str
) -> None:
    incident = make_incident()
    response = client_in.get(f"/alerts/{incident.pk}/{action}/")
    assert response.status_code == 302
    assert response["Location"] == f"/alerts/{incident.pk}/#incident-actions"
    assert Incident.objects.get().acknowledged_at is None
    assert not Silence.objects.exists()
    assert client_in.get(f"/alerts/999/{action}/").status_code == 404


def test_a_resolved_incident_keeps_who_acknowledged_it_and_its_silence(
    clock: Clock, client_in: Client
) -> None:
    incident = make_incident()
    client_in.post(f"/alerts/{incident.pk}/acknowledge/")
    client_in.post(f"/alerts/{incident.pk}/silence/", {"duration": "1d"})
    clock.advance(600)
    evaluation.resolve_incident(incident, "renewed by master-0", clock.now())
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED

    for url in (LIST, f"/alerts/{incident.pk}/"):
        html = page(client_in, url)
        assert "Acknowledged by erin" in html, url
        assert "Silenced by erin until" in html, url
        assert f'action="/alerts/{incident.pk}/unsilence/"' in html, url
        # Nothing left to acknowledge: the button is gone, the acknowledger stays.
        assert f'action="/alerts/{incident.pk}/acknowledge/"' not in html, url


def test_the_rows_and_the_actions_are_focus_targets(clock: Clock, client_in: Client) -> None:
    incident = make_incident()
    assert f'<tr id="incident-{incident.pk}" tabindex="-1"' in page(client_in, LIST)
    assert 'id="incident-actions" tabindex="-1"' in page(client_in, f"/alerts/{incident.pk}/")


def test_an_action_answers_an_outside_next_with_the_incident(
    clock: Clock, client_in: Client
) -> None:
    incident = make_incident()
    response = client_in.post(
        f"/alerts/{incident.pk}/silence/",
        {"duration": "1h", "next": "https://evil.example/#incident-1"},
    )
    assert response["Location"] == f"/alerts/{incident.pk}/"


@pytest.mark.parametrize("place", ["list", "page"])
def test_after_an_action_the_row_or_the_actions_get_focus_once(
    clock: Clock, client_in: Client, place: str
) -> None:
    incident = make_incident()
    url, back = places(incident)[place]
    target = f"incident-{incident.pk}" if place == "list" else "incident-actions"
    client_in.post(f"/alerts/{incident.pk}/acknowledge/", {"next": back})

    html = page(client_in, url)
    assert f'id="{target}" tabindex="-1" autofocus' in html
    assert "autofocus" not in page(client_in, url), "only the render right after the action"


@pytest.mark.parametrize("place", ["list", "page"])
def test_an_htmx_action_swaps_the_region_focuses_and_announces(
    clock: Clock, client_in: Client, place: str
) -> None:
    incident = make_incident()
    url, back = places(incident)[place]
    region = "incidents" if place == "list" else "incident-detail"
    htmx = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": region}
    response = client_in.post(
        f"/alerts/{incident.pk}/silence/", {"duration": "1h", "next": back}, **htmx
    )
    assert response.status_code == 303

    # What htmx's request gets after following the redirect: the region, not the page.
    html = client_in.get(url, **htmx).content.decode()
    assert html.lstrip().startswith(f'<section id="{region}"' if place == "list" else "<div")
    assert f'id="{region}"' in html
    assert "autofocus" in html
    status = re.search(r'<div id="incident-status" hx-swap-oob="innerHTML">(.*?)</div>', html)
    assert status and "Silenced until" in status.group(1)
    assert 'id="nav-alerts-badge"' in html and 'hx-swap-oob="true"' in html
    # The page itself carries the empty live region the message is swapped into.
    assert '<div id="incident-status" class="incident-status" role="status"></div>' in page(
        client_in, url
    )
