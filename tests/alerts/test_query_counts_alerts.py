"""The alerts list (each region) reads as many queries at 200 leases per cluster as at 20,
and shows a bounded page of open incidents, in the order it always had."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from alerts.models import Incident, IncidentState, Rule, Severity
from alerts.presenters.incident_list import OPEN_LIMIT
from tests.dashboard.fleet import counts_at_two_sizes, make_fleet
from tests.leases.factories import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def test_the_alerts_list_and_its_regions_read_the_same_number_of_queries_at_ten_times_the_leases(
    engineer_client: Client,
) -> None:
    fleet = make_fleet()
    pages = [("/alerts/", ""), ("/alerts/", "incidents"), ("/alerts/", "stale-data")]
    counts = counts_at_two_sizes(engineer_client, fleet, pages)
    assert {page: small for page, (small, _) in counts.items()} == {
        page: large for page, (_, large) in counts.items()
    }


def firing(index: int, severity: str, *, acknowledged: bool = False) -> Incident:
    return Incident.objects.create(
        rule=Rule.LEASE_EXPIRED,
        key=f"lease_expired:prod/apps/lease-{index}",
        state=IncidentState.FIRING,
        severity=severity,
        cluster="prod",
        title=f"Lease apps/lease-{index} expired",
        since=NOW - timedelta(minutes=index),
        opened_at=NOW - timedelta(minutes=index),
        last_seen_at=NOW,
        acknowledged_at=timezone.now() if acknowledged else None,
    )


def test_open_incidents_are_a_page_critical_then_unacknowledged_then_newest(
    engineer_client: Client,
) -> None:
    for index in range(OPEN_LIMIT + 1):
        firing(index + 10, Severity.WARNING)
    acknowledged = firing(1, Severity.CRITICAL, acknowledged=True)
    older_critical = firing(3, Severity.CRITICAL)
    newer_critical = firing(2, Severity.CRITICAL)

    page = engineer_client.get("/alerts/").content.decode()

    open_card = page.split("Resolved", 1)[0]
    assert f"({OPEN_LIMIT + 4})" in open_card
    assert f"The first {OPEN_LIMIT} of {OPEN_LIMIT + 4} are shown" in " ".join(open_card.split())
    assert open_card.count('data-incident="') == OPEN_LIMIT
    order = [
        open_card.index(f'data-incident="{incident.pk}"')
        for incident in (newer_critical, older_critical, acknowledged)
    ]
    assert order == sorted(order)
    # The newest warning is shown, the oldest ones are past the page.
    assert "lease-10 expired" in open_card and f"lease-{OPEN_LIMIT + 10} expired" not in open_card
