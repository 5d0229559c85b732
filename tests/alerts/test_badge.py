"""The navigation badge: open incidents that need someone (unacknowledged, not silenced), in
one query, with words that make the Alerts link read "Alerts, 3 need attention"."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from alerts import evaluation, incident_actions
from alerts.context_processors import Badge, _badge
from alerts.models import IncidentState, Severity, Silence
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("erin", email="erin@example.org")


@pytest.fixture
def client_in(client: Client, engineer: Any) -> Client:
    client.force_login(engineer)
    return client


def badge_html(client: Client, url: str = "/leases/", **headers: str) -> str:
    html = client.get(url, **headers).content.decode()
    match = re.search(r'<span id="nav-alerts-badge".*?</span>', html, re.S)
    assert match, "the badge is on the page"
    # Its attributes are on more than one line of markup: compared word by word.
    return " ".join(match.group(0).split())


def test_the_badge_counts_only_open_unacknowledged_unsilenced_incidents(
    clock: Clock, engineer: Any
) -> None:
    needs = make_incident("lease_expired:prod/a/one", severity=Severity.WARNING)
    acked = make_incident("lease_expired:prod/a/two")
    silenced = make_incident("lease_expired:prod/a/three")
    done = make_incident("lease_expired:prod/a/four")
    make_incident("lease_expired:prod/a/five", state=IncidentState.PENDING)
    incident_actions.acknowledge_incident(acked.pk, engineer)
    incident_actions.silence_incident(silenced.pk, engineer, timedelta(hours=1))
    evaluation.resolve_incident(done, "renewed", clock.now())

    assert _badge() == Badge(count=1, critical=0)

    # A silence that has ended no longer hides its incident.
    clock.advance(3601)
    assert _badge() == Badge(count=2, critical=1)
    assert needs.pk  # the warning one is still counted


def test_a_silence_of_another_key_does_not_hide_an_incident(clock: Clock) -> None:
    make_incident("lease_expired:prod/a/one")
    Silence.objects.create(
        key="lease_expired:prod/a/other",
        starts_at=clock.now(),
        ends_at=clock.now() + timedelta(hours=1),
        created_at=clock.now(),
    )
    assert _badge().count == 1


def test_the_badge_is_one_query(clock: Clock, engineer: Any) -> None:
    for n in range(5):
        make_incident(f"lease_expired:prod/a/{n}")
    with CaptureQueriesContext(connection) as queries:
        badge = _badge()
    assert badge.count == 5
    assert len(queries) == 1


def test_the_badge_gives_the_alerts_link_its_spoken_name(clock: Clock, client_in: Client) -> None:
    empty = badge_html(client_in)
    assert " hidden>" in empty
    assert 'aria-label=", nothing needs attention" title="nothing needs attention"' in empty

    for n in range(3):
        make_incident(f"lease_expired:prod/a/{n}")
    html = badge_html(client_in)
    assert 'class="nav-badge nav-badge-critical"' in html
    assert 'role="img" aria-label=", 3 need attention" title="3 need attention"' in html
    assert html.endswith(">3</span>")
    assert " hidden>" not in html


def test_the_refreshed_region_sends_the_badge_out_of_band(
    clock: Clock, client_in: Client, engineer: Any
) -> None:
    first = make_incident("lease_expired:prod/a/one")
    make_incident("lease_expired:prod/a/two")
    incident_actions.acknowledge_incident(first.pk, engineer)
    html = client_in.get(
        "/alerts/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="incidents"
    ).content.decode()
    assert html.lstrip().startswith('<section id="incidents"')
    assert 'hx-swap-oob="true">1</span>' in html
