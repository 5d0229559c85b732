from __future__ import annotations

import pytest

from tests.e2e.login import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_engineer_logs_in_and_sees_the_navigation(live_server, page, engineer) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{live_server.url}/leases/")
    assert "/login/" in page.url, "an anonymous visitor is sent to the login page"
    log_in(page)

    page.wait_for_url(f"{live_server.url}/leases/")
    navigation = page.locator("nav.nav a")
    assert navigation.all_inner_texts() == ["Overview", "Leases", "Groups", "Clusters", "Alerts"]
    assert page.locator('nav.nav a[aria-current="page"]').inner_text() == "Leases"
    assert page.evaluate("typeof window.htmx") == "object", "htmx is served from static/"

    page.click("text=Overview")
    page.wait_for_url(f"{live_server.url}/")
    assert page.locator("#workers").is_visible()
