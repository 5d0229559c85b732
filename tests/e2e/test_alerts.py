from __future__ import annotations

import pytest
from playwright.sync_api import expect

from alerts.models import Incident, IncidentEvent
from tests.alerts.factories import make_incident
from tests.e2e.login import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_engineer_acknowledges_an_incident_from_the_alerts_page(  # type: ignore[no-untyped-def]
    live_server, page, django_user_model
) -> None:
    erin = django_user_model.objects.create_user("erin", password="engineer-pass-123")
    incident = make_incident(
        details={"facts": [{"label": "Holder", "text": "<script>window.pwned = 1</script>"}]}
    )

    page.goto(f"{live_server.url}/alerts/")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/alerts/")

    expect(page.locator("#nav-alerts-badge")).to_have_text("1")
    row = page.locator(f'tr[data-incident="{incident.pk}"]')
    expect(row).to_contain_text("prod: kube-system/kube-scheduler lease expired")
    row.get_by_role("button", name=f"Acknowledge incident {incident.pk}").click()

    # htmx swaps the incidents region in place: no page load, the row now says who.
    expect(row.locator("[data-acknowledged]")).to_have_text("Acknowledged by erin")
    assert page.url == f"{live_server.url}/alerts/"
    acknowledged = Incident.objects.get(pk=incident.pk)
    assert acknowledged.acknowledged_by == erin
    assert acknowledged.acknowledged_at is not None
    assert IncidentEvent.objects.filter(incident=incident, user=erin).count() == 1

    # The incident page tells the same story, from the timeline.
    row.get_by_role("link").first.click()
    page.wait_for_url(f"{live_server.url}/alerts/{incident.pk}/")
    expect(page.locator("#incident-detail")).to_contain_text(
        "acknowledged by erin: no more reminders"
    )
    assert page.evaluate("window.pwned === undefined")
