"""In Chromium: the Leases table's sort headers and pager swap only the table, keep the URL,
and inherit their htmx attributes from the header row and the pager."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.login import log_in
from tests.leases.factories import make_cluster, make_many_leases

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sort_header_and_pager_swap_the_table_in_place(  # type: ignore[no-untyped-def]
    live_server, page, engineer
) -> None:
    make_many_leases(make_cluster(), 130)
    page.goto(f"{live_server.url}/login/?next=/leases/")
    log_in(page)
    first_cell = page.locator("#lease-table tbody tr td:nth-child(3)").first
    expect(first_cell).to_have_text("node-0000")
    page.evaluate("window.__still_the_same_page = true")

    name_header = page.locator("#lease-table thead").get_by_role("link", name="Name", exact=True)
    name_header.click()
    expect(page).to_have_url(f"{live_server.url}/leases/?sort=name")
    name_header.click()

    expect(first_cell).to_have_text("node-0129")
    expect(page).to_have_url(f"{live_server.url}/leases/?sort=-name")
    page.locator('#lease-table a[rel="next"]').click()
    expect(first_cell).to_have_text("node-0029")
    assert "after=" in page.url
    assert page.evaluate("window.__still_the_same_page === true"), "the page was reloaded"
