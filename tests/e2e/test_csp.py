"""The Content-Security-Policy holds in Chromium: the pages load and refresh without breaking it.

Chromium enforces the header the live server sends; every refused inline script, style
attribute or eval fires a `securitypolicyviolation` event and a console error. Both are
collected from before the first page loads, on every page of a logged-in engineer.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from fakes.nks import FakeNks
from leases.models import WatchCoverage
from nks.models import NksCluster
from tests.alerts.factories import make_incident
from tests.e2e.login import log_in
from tests.leases.factories import make_cluster, make_lease
from tests.leases.group_factories import make_slot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = Path("/tmp")  # looked at by hand, not read back by tests

REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", function (event) {
  window.__reportViolation(JSON.stringify({
    page: location.pathname,
    directive: event.effectiveDirective,
    blocked: event.blockedURI,
    sample: event.sample,
  }));
});
"""


def test_pages_load_and_refresh_without_a_policy_violation(  # type: ignore[no-untyped-def]
    live_server, page, engineer, demo_nks: FakeNks
) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="<img src=x onerror=alert(1)>")
    make_incident()
    # Issue 11's pages: a leader-k8s slot group, and a lease page with its availability strip.
    make_slot(cluster, "batch", 0)
    make_slot(cluster, "batch", 1, node_id="<script>alert(1)</script>")
    WatchCoverage.objects.create(
        cluster=cluster, started_at=timezone.now() - timedelta(hours=1), last_seen_at=timezone.now()
    )
    # staging-web's default-worker has 2 ready nodes and 1 not ready: both parts of a bar.
    staging = NksCluster.objects.get(name="staging-web")

    violations: list[dict[str, str]] = []
    console: list[str] = []
    page.context.expose_function(
        "__reportViolation", lambda text: violations.append(json.loads(text))
    )
    page.context.add_init_script(REPORT_VIOLATIONS)

    def on_console(message: Any) -> None:
        # Chromium asks for /favicon.ico by itself when a page is left before its declared
        # icon (static/favicon.svg) is fetched, as the login form is here: not the page's
        # doing, and not the policy's (a refusal is a violation event, not a 404).
        if message.location.get("url", "").endswith("/favicon.ico"):
            return
        console.append(f"{page.url} {message.type}: {message.text} {message.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    page.on(
        "response",
        lambda answer: answer.status >= 400 and console.append(f"{answer.status} {answer.url}"),
    )

    response = page.goto(f"{live_server.url}/login/?next=/leases/")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "style-src 'self'" in policy
    log_in(page)

    # The Leases page: its table refreshes in place and shows a lease added meanwhile.
    page.wait_for_url(f"{live_server.url}/leases/")
    table = page.locator("#lease-table")
    expect(table).to_contain_text("<img src=x onerror=alert(1)>")
    page.evaluate("window.__sameDocument = true")
    make_lease(cluster, "kube-controller-manager")
    expect(table).to_contain_text("kube-controller-manager", timeout=15_000)
    assert page.evaluate("window.__sameDocument === true"), "refreshed without a reload"

    # Pausing skips the timed refreshes (in dashboard.js: an hx-trigger filter needs eval).
    page.get_by_role("button", name="Pause refresh").click()
    make_lease(cluster, "cloud-controller-manager")
    page.wait_for_timeout(6_500)  # longer than the 5 s refresh
    expect(table).not_to_contain_text("cloud-controller-manager")
    page.get_by_role("button", name="Resume refresh").click()
    expect(table).to_contain_text("cloud-controller-manager", timeout=5_000)
    page.screenshot(path=str(SCREENSHOTS / "csp-leases.png"), full_page=True)

    page.goto(f"{live_server.url}/")
    expect(page.locator("#lease-overview")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "csp-overview.png"), full_page=True)

    page.goto(f"{live_server.url}/clusters/{staging.uuid}/")
    expect(page.locator("#nks-cluster")).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "csp-cluster.png"), full_page=True)
    # The ready bar is drawn by its SVG rects and dashboard.css, not by style attributes.
    bar = page.locator("svg.readybar").first
    expect(bar).to_be_visible()
    assert bar.bounding_box()["width"] > 40, "the bar keeps its width from dashboard.css"
    ready, not_ready = bar.locator("rect.r"), bar.locator("rect.nr")
    assert (ready.get_attribute("width"), not_ready.get_attribute("width")) == ("66.7", "33.3")
    fills = [rect.evaluate("r => getComputedStyle(r).fill") for rect in (ready, not_ready)]
    assert fills[0] != fills[1] and "none" not in fills, fills

    page.goto(f"{live_server.url}/leases/groups/")
    expect(page.locator("#groups")).to_contain_text("batch")
    page.goto(f"{live_server.url}/leases/clusters/prod/groups/apps/batch/")
    expect(page.locator("#group-detail")).to_contain_text("<script>alert(1)</script>")
    page.screenshot(path=str(SCREENSHOTS / "csp-group.png"), full_page=True)
    page.goto(f"{live_server.url}/leases/prod/apps/batch-slot-0/")
    strip = page.locator("figure.lease-strip svg")
    expect(strip).to_be_visible()
    assert strip.bounding_box()["width"] > 200, "the strip keeps its size from dashboard.css"
    page.screenshot(path=str(SCREENSHOTS / "csp-lease-strip.png"), full_page=True)

    page.goto(f"{live_server.url}/alerts/")
    expect(page.locator("#incidents")).to_contain_text("lease expired")
    page.screenshot(path=str(SCREENSHOTS / "csp-alerts.png"), full_page=True)

    assert violations == [], violations
    assert console == [], console

    # The listener does catch a violation: a style attribute added now is refused.
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<p style=\"color: red\">x</p>')")
    page.wait_for_timeout(200)
    assert [violation["directive"] for violation in violations] == ["style-src-attr"]
