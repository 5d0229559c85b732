"""In Chromium: acknowledging and silencing from the alerts list keep focus on the incident's
row, announce the result, and bring the navigation badge down; without JavaScript too."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from alerts.models import Incident, Silence
from tests.alerts.factories import make_incident
from tests.e2e.login import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def badge_count(page: Any) -> Any:
    return page.locator("#nav-alerts-badge")


def focused_id(page: Any) -> str:
    return str(page.evaluate("document.activeElement && document.activeElement.id"))


def test_acknowledge_and_silence_from_the_list_keep_focus_on_the_row_and_update_the_badge(
    live_server: Any, page: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    first = make_incident("lease_expired:prod/kube-system/one", title="one lease expired")
    second = make_incident("lease_expired:prod/kube-system/two", title="two lease expired")

    page.goto(f"{live_server.url}/alerts/")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/alerts/")
    expect(badge_count(page)).to_have_text("2")
    expect(page.get_by_role("img", name=", 2 need attention")).to_be_visible()

    row = page.locator(f"#incident-{first.pk}")
    row.get_by_role("button", name=f"Acknowledge incident {first.pk}").click()
    expect(row.locator("[data-acknowledged]")).to_have_text("Acknowledged by erin")
    expect(page.locator("#incident-status")).to_contain_text("Acknowledged")
    expect(badge_count(page)).to_have_text("1")
    # A focus assertion, not wait_for_function("..."): a string expression is run with
    # eval(), which the page's CSP refuses whenever the first check is not already true.
    expect(row).to_be_focused()
    assert Incident.objects.get(pk=first.pk).acknowledged_at is not None

    other = page.locator(f"#incident-{second.pk}")
    other.get_by_role("button", name=f"Silence incident {second.pk} for 1 hour").click()
    expect(other.locator("[data-silenced]")).to_contain_text("Silenced by erin until")
    expect(page.locator("#incident-status")).to_contain_text("Silenced until")
    expect(page.locator("#nav-alerts-badge")).to_be_hidden()
    expect(other).to_be_focused()
    assert Silence.objects.filter(key=second.key).count() == 1
    # The Alerts link's spoken name carries the count (when the badge sits inside it).
    expect(page.locator("#nav-alerts-badge")).to_have_attribute(
        "aria-label", ", nothing needs attention"
    )


def test_without_javascript_an_action_comes_back_to_the_focused_row(  # type: ignore[no-untyped-def]
    live_server, browser, django_user_model
) -> None:
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    incident = make_incident()
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{live_server.url}/alerts/")
        log_in(page)
        page.wait_for_url(f"{live_server.url}/alerts/")
        page.get_by_role("button", name=f"Silence incident {incident.pk} for 4 hours").click()
        page.wait_for_url(f"{live_server.url}/alerts/#incident-{incident.pk}")
        expect(page.locator('ul.messages[role="status"]')).to_contain_text("Silenced until")
        assert focused_id(page) == f"incident-{incident.pk}"
        # A reload of an action URL (GET) lands on the incident, never a 405.
        response = page.goto(f"{live_server.url}/alerts/{incident.pk}/silence/")
        assert response is not None and response.status == 200
        assert page.url == f"{live_server.url}/alerts/{incident.pk}/#incident-actions"
    finally:
        context.close()
