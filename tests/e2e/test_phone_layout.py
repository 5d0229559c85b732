"""In Chromium at phone width (390x844): no page scrolls sideways, the Alerts link (with its
open-incident badge) stays in view, and every table reads whole words and can be scrolled by
keyboard, on every page an on-call engineer opens.

The pages are built as the Korean-pages test builds them: a lease source with leases (one
expired, so evaluation opens an incident), a node, a leader-k8s group, and the demo FakeNks
polled into NKS clusters, nodegroups and a resize. `site_pages` is shared with
test_accessibility.py, which runs axe on the same pages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from alerts.models import Incident
from nks.models import NksCluster
from tests.alerts.conftest import evaluate
from tests.alerts.factories import make_resize
from tests.e2e.login import OPERATOR, log_in
from tests.leases.factories import make_cluster, make_lease
from tests.leases.group_factories import make_slot
from tests.nks.nodes import make_node

# demo_nks (tests/e2e/conftest.py): the demo FakeNks, registered and polled.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_nks"),
]

PHONE = {"width": 390, "height": 844}
SCREENSHOTS = Path("/tmp/phone-layout")  # looked at by hand, not read back by tests


def site_pages() -> dict[str, str]:
    """Make the data every page needs and return each page's path, by a short name."""
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=90)
    make_lease(cluster, "kube-controller-manager", holder="master-1_9a2e")
    # A long name without spaces: it must wrap inside its cell, not widen the page.
    make_lease(cluster, "payments-settlement-reconciler-leader-election-lock-eu-west")
    make_slot(cluster, "billing", 0)
    make_slot(cluster, "billing", 1)
    make_node(cluster, "prod-pool-a-1")
    evaluate(cluster)  # the expired kube-scheduler lease opens an incident
    incident = Incident.objects.filter(rule="lease_expired").latest("id")
    staging = NksCluster.objects.get(name="staging-web")
    nodegroup = staging.nodegroups.order_by("name").first()
    assert nodegroup is not None
    # A failed scale-in with an NKS answer: the request page's fullest table.
    resize = make_resize(nodegroup, error="NKS answered 409: the nodegroup is busy")
    return {
        "overview": "/",
        "leases": "/leases/",
        "lease": "/leases/prod/kube-system/kube-scheduler/",
        "node": reverse("leases:node", args=["prod", "prod-pool-a-1"]),
        "groups": "/leases/groups/",
        "group": "/leases/clusters/prod/groups/apps/billing/",
        "watchers": "/leases/clusters/",
        "nks clusters": "/clusters/",
        "nks cluster": reverse("nks:cluster", args=[staging.uuid]),
        "nodegroup": reverse("nks:nodegroup", args=[staging.uuid, nodegroup.name]),
        "resizes": "/clusters/resizes/",
        "resize": reverse("nks:resize_detail", args=[resize.pk]),
        "alerts": "/alerts/",
        "incident": f"/alerts/{incident.pk}/",
        "preferences": "/preferences/",
    }


def open_page(page: Any, url: str) -> None:
    response = page.goto(url)
    assert response is not None and response.status == 200, (url, response)
    page.wait_for_load_state("networkidle")


def sideways(page: Any) -> dict[str, Any]:
    """How wide the document is against the viewport, and the widest elements sticking out."""
    return page.evaluate(
        """(phone) => {
          const vw = Math.min(window.innerWidth, phone);
          const out = [];
          for (const el of document.body.querySelectorAll('*')) {
            const r = el.getBoundingClientRect();
            // Inside a box that scrolls sideways on its own, sticking out is that box's job.
            let scroller = el.parentElement, boxed = false;
            while (scroller && scroller !== document.body) {
              const ox = getComputedStyle(scroller).overflowX;
              if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') { boxed = true; break; }
              scroller = scroller.parentElement;
            }
            if (!boxed && r.right > vw + 0.5) {
              out.push(`${el.tagName.toLowerCase()}.${el.className} right=${Math.round(r.right)}`);
            }
          }
          return {scrollWidth: document.documentElement.scrollWidth, innerWidth: vw,
                  overflowing: out.slice(0, 8)};
        }""",
        PHONE["width"],
    )


def too_wide(found: dict[str, Any]) -> bool:
    """Wider than the phone: a mobile browser widens its layout viewport (innerWidth) to fit a
    page that overflows, so the phone's own width is the bound as well as innerWidth."""
    return found["scrollWidth"] > min(found["innerWidth"], PHONE["width"])


def alerts_link_out_of_view(page: Any) -> str | None:
    """Why the header's Alerts link (or its badge) is not wholly on screen, or None if it is."""
    alerts = page.locator("header nav a[href='/alerts/']")
    if not alerts.is_visible():
        return "hidden"
    for what, locator in (("link", alerts), ("badge", alerts.locator(".nav-badge"))):
        if not locator.count() or not locator.is_visible():
            return f"{what} hidden"
        box = locator.bounding_box()
        if box is None or box["x"] < 0 or box["x"] + box["width"] > PHONE["width"] or box["y"] < 0:
            return f"{what} at {box}"
    return None


def table_problems(page: Any) -> list[str]:
    """Tables a phone reader cannot read well: a word broken across lines in a cell (a column
    squeezed below its longest word: "Wind|ow"), or a table that scrolls sideways and cannot
    be reached by keyboard (nothing focusable in it and not a named tab stop itself)."""
    return page.evaluate(
        r"""() => {
          const problems = [];
          const focusable =
            "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";
          for (const table of document.querySelectorAll('table.table')) {
            if (!table.getClientRects().length) continue;  // not shown (a closed details)
            const heading = table.closest('section, .card')?.querySelector('h2, h3');
            const label = (heading?.textContent || '?').trim().slice(0, 40);
            if (table.scrollWidth > table.clientWidth + 1 && !table.querySelector(focusable)) {
              if (table.getAttribute('tabindex') !== '0') {
                problems.push(`${label}: scrolls, no tab stop`);
              } else if (!table.getAttribute('aria-label')) {
                problems.push(`${label}: tab stop without a name`);
              }
            }
            const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
            for (let node = walker.nextNode(); node; node = walker.nextNode()) {
              // Runs of letters and digits: a line may break at a space, hyphen, slash or
              // dot ("staging-|web"), never inside a run ("Wind|ow").
              const words = node.textContent.matchAll(/[\p{L}\p{N}]+/gu);
              for (const word of words) {
                // Long identifiers may wrap where their cell says so; words must not.
                if (word[0].length > 24) continue;
                const range = document.createRange();
                range.setStart(node, word.index);
                range.setEnd(node, word.index + word[0].length);
                const boxes = [...range.getClientRects()].filter(r => r.width > 0);
                const lines = new Set(boxes.map(r => Math.round(r.top)));
                if (lines.size > 1) problems.push(`${label}: "${word[0]}" broken across lines`);
              }
            }
          }
          return problems.slice(0, 10);
        }"""
    )


def test_no_page_scrolls_sideways_at_phone_width_and_alerts_stay_in_view(  # type: ignore[no-untyped-def]
    live_server, browser, operator
) -> None:
    paths = site_pages()
    SCREENSHOTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport=PHONE, device_scale_factor=1, is_mobile=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    wide: dict[str, dict[str, Any]] = {}
    hidden: dict[str, str] = {}
    unreadable: dict[str, list[str]] = {}
    try:
        open_page(page, f"{live_server.url}/login/")
        if too_wide(found := sideways(page)):
            wide["login"] = found
        log_in(page, OPERATOR)
        page.wait_for_url(f"{live_server.url}/")
        for name, path in paths.items():
            open_page(page, f"{live_server.url}{path}")
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
            if too_wide(found := sideways(page)):
                wide[name] = found
            if why := alerts_link_out_of_view(page):
                hidden[name] = why
            if problems := table_problems(page):
                unreadable[name] = problems
    finally:
        context.close()
    assert wide == {}, wide
    assert hidden == {}, hidden
    assert unreadable == {}, unreadable
