"""axe-core in Chromium on every page an on-call engineer opens, in light and dark: no
serious or critical violation (WCAG 2.2 AA contrast is one of axe's serious rules).

The pages and their data are the phone-layout test's (`site_pages`); the page is laid out at
desktop width and again at phone width (390x844). A table of counts, page x impact, is
printed (run with -s to see it) and written to /tmp/axe-table.txt for the closing note; each
serious or critical violation found is written beside it, in /tmp/axe-violations.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.e2e.login import OPERATOR, log_in
from tests.e2e.test_phone_layout import PHONE, open_page, site_pages

# demo_nks (tests/e2e/conftest.py): the demo FakeNks, registered and polled.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("demo_nks"),
]

DESKTOP = {"width": 1280, "height": 800}
IMPACTS = ("critical", "serious", "moderate", "minor")
FAILING = {"critical", "serious"}
TABLE = Path("/tmp/axe-table.txt")  # read by hand for the closing note, not by tests
VIOLATIONS = Path("/tmp/axe-violations.json")


def counts(violations: list[dict[str, Any]]) -> dict[str, int]:
    """How many rules each impact has failing on a page (a rule counts once, however many
    elements it found)."""
    found = dict.fromkeys(IMPACTS, 0)
    for violation in violations:
        found[violation["impact"] or "minor"] += 1
    return found


def table(rows: dict[str, dict[str, int]]) -> str:
    width = max(len(name) for name in rows)
    lines = [f"{'page':<{width}}  " + "  ".join(f"{impact:>8}" for impact in IMPACTS)]
    lines += [
        f"{name:<{width}}  " + "  ".join(f"{found[impact]:>8}" for impact in IMPACTS)
        for name, found in rows.items()
    ]
    return "\n".join(lines)


def summary(violation: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule": violation["id"],
        "impact": violation["impact"],
        "help": violation["help"],
        "nodes": [
            {"target": node["target"], "why": node.get("failureSummary", "")}
            for node in violation["nodes"][:5]
        ],
    }


def test_no_page_has_a_serious_or_critical_axe_violation_in_light_or_dark(  # type: ignore[no-untyped-def]
    live_server, page, operator
) -> None:
    paths = site_pages()
    axe = Axe()
    rows: dict[str, dict[str, int]] = {}
    serious: dict[str, list[dict[str, Any]]] = {}

    def check(name: str) -> None:
        # At phone width the tables become their own scroll boxes (dashboard.css), which axe
        # checks too (scrollable-region-focusable): both widths, each in light and dark.
        for width, viewport in (("desktop", DESKTOP), ("phone", PHONE)):
            page.set_viewport_size(viewport)
            # The page answers a resize on its next frame (dashboard.js makes a table that now
            # scrolls a tab stop): let it, as a phone would before anyone tabs.
            page.evaluate(
                "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"
            )
            for scheme in ("light", "dark"):
                page.emulate_media(color_scheme=scheme)
                violations = axe.run(page).response["violations"]
                key = f"{name} ({width}, {scheme})"
                rows[key] = counts(violations)
                if bad := [summary(v) for v in violations if v["impact"] in FAILING]:
                    serious[key] = bad
        page.set_viewport_size(DESKTOP)

    open_page(page, f"{live_server.url}/login/")
    check("login")
    log_in(page, OPERATOR)
    page.wait_for_url(f"{live_server.url}/")
    for name, path in paths.items():
        open_page(page, f"{live_server.url}{path}")
        check(name)

    printed = table(rows)
    print("\n" + printed)
    TABLE.write_text(printed + "\n")
    VIOLATIONS.write_text(json.dumps(serious, indent=2))
    assert serious == {}, json.dumps(serious, indent=2)
