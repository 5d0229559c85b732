"""In Chromium: the overview puts what is firing first, acknowledging there keeps focus on the
incident and brings the badge down; a failed refresh is announced once, politely."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from alerts.models import Incident
from tests.alerts.factories import make_incident
from tests.e2e.login import log_in
from tests.leases.factories import make_cluster, make_lease

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_firing_is_first_and_acknowledging_there_keeps_focus_on_the_incident(
    live_server: Any, page: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    make_lease(make_cluster("prod"), "kube-scheduler")
    incident = make_incident()

    page.goto(f"{live_server.url}/")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/")
    top = page.evaluate(
        """() => ["firing", "lease-problems", "nks-overview", "lease-overview"]
                 .map((id) => document.getElementById(id).getBoundingClientRect().top)"""
    )
    assert top == sorted(top)
    expect(page.locator("#nav-alerts-badge")).to_have_text("1")

    row = page.locator(f"#incident-{incident.pk}")
    row.get_by_role("button", name=f"Acknowledge incident {incident.pk}").click()
    expect(row.locator("[data-acknowledged]")).to_have_text("Acknowledged by erin")
    expect(page.locator("#incident-status")).to_contain_text("Acknowledged")
    expect(page.locator("#nav-alerts-badge")).to_be_hidden()
    page.wait_for_function(f"document.activeElement.id === 'incident-{incident.pk}'")
    assert Incident.objects.get(pk=incident.pk).acknowledged_at is not None
    assert page.url == f"{live_server.url}/"


def test_a_failed_refresh_is_announced_once_not_on_every_poll(
    live_server: Any, page: Any, django_user_model: Any, settings: Any
) -> None:
    # Regions poll every 1 and 2 s: several failures of each within the test's few seconds.
    settings.PAGE_REFRESH_SECONDS = 1
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    make_lease(make_cluster("prod"), "kube-scheduler")
    page.goto(f"{live_server.url}/")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/")
    announcer = page.locator("#refresh-announcer")
    expect(announcer).to_have_attribute("role", "status")
    expect(announcer).to_have_attribute("aria-live", "polite")
    page.evaluate(
        """() => {
          window.__announced = 0;
          new MutationObserver(() => { window.__announced += 1; })
            .observe(document.getElementById("refresh-announcer"),
                     { childList: true, characterData: true, subtree: true });
        }"""
    )

    # The server is down for the regions' polls (the whole page still loaded).
    page.route(
        f"{live_server.url}/",
        lambda route: (
            route.abort() if route.request.headers.get("hx-request") else route.continue_()
        ),
    )
    expect(announcer).to_have_text("Refreshing failed; this is old data.", timeout=15_000)
    # Several regions poll every 1 and 2 s; all their failures are one announcement.
    page.wait_for_timeout(4_500)
    assert page.evaluate("window.__announced") == 1
    expect(page.locator("#lease-overview .refresh-error")).to_be_visible()

    page.unroute(f"{live_server.url}/")
    expect(announcer).to_have_text("", timeout=15_000)
