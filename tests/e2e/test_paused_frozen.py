"""In Chromium: paused means frozen (issue 13). While the overview's refresh is paused its
countdowns and ages stand still, the page says when it was paused, and a lease about to expire
is not called expired from old data; a resume refreshes first and only then ticks again."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from leases.models import KubeCluster
from tests.alerts.conftest import watching
from tests.e2e.login import log_in
from tests.leases.factories import make_cluster, make_lease

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _lease_expiring_in(seconds: float) -> KubeCluster:
    now = timezone.now()
    cluster = make_cluster("prod", leases_as_of=now, last_flush_at=now)
    make_lease(
        cluster,
        "kube-scheduler",
        duration=15,
        renew_time=now - timedelta(seconds=15 - seconds),
        observed_at=now,
        expires_at=now + timedelta(seconds=seconds),
    )
    return cluster


def test_pause_freezes_countdowns_and_says_when_then_resume_refreshes_before_ticking(
    live_server: Any, page: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    # Its watcher proves the data current all along (leases.freshness), as a live one does.
    with watching(_lease_expiring_in(8)):
        page.goto(f"{live_server.url}/")
        log_in(page)
        page.wait_for_url(f"{live_server.url}/")
        countdown = page.locator("#lease-overview [data-expires-at]").first
        expect(countdown).to_have_text(re.compile(r"^in \d+ s$"))
        toggle = page.locator("[data-refresh-toggle='lease-overview']")

        toggle.click()
        frozen = countdown.text_content()
        note = page.locator("[data-paused-note='lease-overview']")
        expect(note).to_have_text(re.compile(r"^Paused at \d\d:\d\d:\d\d$"))
        page.wait_for_timeout(3_000)
        assert countdown.text_content() == frozen
        # Past the lease's expiry the old data still shows it held: no false alarm.
        page.wait_for_timeout(6_000)
        assert countdown.text_content() == frozen
        assert "expired for" not in (page.locator("#lease-overview").text_content() or "")
        served = page.locator("#lease-overview").get_attribute("data-server-now")

        # Resume: record, in order, the region's replacement and any tick of its ages.
        page.evaluate(
            """() => {
              window.__events = [];
              new MutationObserver((mutations) => {
                for (const m of mutations) {
                  for (const node of m.addedNodes) {
                    if (node.id === "lease-overview") window.__events.push("refresh");
                  }
                  const el = m.target.nodeType === 1 ? m.target : m.target.parentElement;
                  const timed = el && el.matches("[data-age-from], [data-expires-at]");
                  if (timed && el.closest("#lease-overview")) {
                    window.__events.push("tick");
                  }
                }
              }).observe(document.body, { subtree: true, childList: true, characterData: true });
            }"""
        )
        toggle.click()
        page.wait_for_function(
            "old => document.querySelector('#lease-overview')"
            ".getAttribute('data-server-now') !== old",
            arg=served,
        )
        expect(note).to_have_text("")
        expect(toggle).to_have_text("Pause refresh")
        updated = page.locator("#lease-overview [data-refresh-status] time")
        expect(updated).to_have_text(re.compile(r"^[1-9]\d* s ago$"), timeout=5_000)
        events = page.evaluate("() => window.__events")
        assert events[0] == "refresh", events
        assert "tick" in events


def test_the_skip_link_is_the_first_tab_stop_and_moves_focus_to_main(
    live_server: Any, page: Any, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("erin", password="engineer-pass-123")
    page.goto(f"{live_server.url}/")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/")

    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    expect(skip).to_be_visible()
    page.keyboard.press("Enter")
    # Not wait_for_function("..."): the page's CSP refuses the eval() of a string expression.
    expect(page.locator("#content")).to_be_focused()
    assert page.evaluate("document.activeElement.tagName") == "MAIN"
