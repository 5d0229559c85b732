"""A refused resize in Chromium: the browser lands back on the nodegroup page's URL with what was
typed (post/redirect/get), the error summary takes focus and links to the field, the page keeps
refreshing (no 405, no "Refreshing failed" banner), and a reload or the form's URL typed in the
address bar never shows "HTTP ERROR 405"."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections
from playwright.sync_api import expect

from fakes.nks import FakeNks
from nks.accounts import forget_clients
from nks.models import NksCluster, NksNodegroup, ResizeRequest, ResizeState
from nks.poller import poll_account
from nks.resizes import request_resize
from nks.services import register_nks_account
from tests.e2e.login import OPERATOR, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def nodegroup_path(settings: Any, operator: Any) -> Iterator[str]:
    # One refresh a second, so the test waits past several of them in a few seconds.
    settings.PAGE_REFRESH_SECONDS = 1
    forget_clients()
    with FakeNks(scenario="demo") as fake:
        account, _ = register_nks_account("demo", api_url=fake.url, **fake.credentials())
        assert poll_account(account.pk).ok
        cluster = NksCluster.objects.get(name="prod-api")
        yield f"/clusters/{cluster.uuid}/nodegroups/default-worker/"
    forget_clients()
    # The test body's connection is its own while Playwright runs: close it, or it outlives
    # the test database.
    connections.close_all()


def test_a_refused_resize_focuses_its_summary_and_the_page_keeps_refreshing(
    live_server: Any, page: Any, nodegroup_path: str
) -> None:
    page.goto(f"{live_server.url}{nodegroup_path}")
    log_in(page, OPERATOR)
    page.wait_for_selector("#id_node_count")
    # A scale-in without typing the nodegroup's name: the browser lets it through, we refuse.
    page.fill("#id_node_count", "2")
    page.fill("#id_reason", "fewer nodes at night")
    with page.expect_navigation():
        page.click("button.primary")

    summary = page.locator("#resize-errors")
    expect(summary).to_be_focused()
    expect(summary).to_have_attribute("role", "alert")
    expect(summary).to_contain_text("The resize was not sent.")
    link = summary.locator('a[href="#id_confirm_name"]')
    expect(link).to_contain_text("type default-worker exactly")
    # What was typed is still there.
    expect(page.locator("#id_node_count")).to_have_value("2")
    expect(page.locator("#id_reason")).to_have_value("fewer nodes at night")
    expect(page.locator("#id_confirm_name")).to_have_attribute("aria-invalid", "true")

    # Following the link puts the keyboard on the field to fix.
    link.click()
    expect(page.locator("#id_confirm_name")).to_be_focused()

    # The regions keep refreshing from the nodegroup page: wait for two refreshes, each a 200.
    refreshes: list[tuple[str, int]] = []
    page.on(
        "response",
        lambda r: (
            refreshes.append((r.url, r.status)) if r.request.headers.get("hx-request") else None
        ),
    )
    page.wait_for_timeout(2_500)
    assert len(refreshes) >= 2, refreshes
    assert all(
        url == f"{live_server.url}{nodegroup_path}" and status == 200 for url, status in refreshes
    ), refreshes
    expect(page.get_by_text("Refreshing failed")).to_have_count(0)
    # A refresh replaces the regions around the form, never the form being corrected.
    expect(page.locator("#id_reason")).to_have_value("fewer nodes at night")

    # The address bar holds the nodegroup page's own URL (post/redirect/get): a reload is a GET
    # that shows the same errors and what was typed, with no "send the form again?" prompt.
    assert page.url.startswith(f"{live_server.url}{nodegroup_path}?refused="), page.url
    response = page.reload()
    assert response is not None and response.status == 200, response and response.status
    assert response.request.method == "GET"
    # (The address now ends in the followed link's #id_confirm_name, so the browser puts the
    # reader there rather than on the summary's autofocus, as it does for any fragment.)
    expect(page.locator("#resize-errors")).to_be_visible()
    expect(page.locator("#resize-errors")).to_contain_text("type default-worker exactly")
    expect(page.locator("#id_reason")).to_have_value("fewer nodes at night")
    # The form's URL in the address bar (or a bookmark) lands on the form's page.
    response = page.goto(f"{live_server.url}{nodegroup_path}resize/")
    assert response is not None and response.status == 200
    assert page.url == f"{live_server.url}{nodegroup_path}#resize"
    expect(page.locator("#id_node_count")).to_be_visible()
    expect(page.get_by_text("HTTP ERROR 405")).to_have_count(0)
    assert ResizeRequest.objects.count() == 0


def test_resize_progress_is_announced_once_per_change(
    live_server: Any, page: Any, nodegroup_path: str, operator: Any
) -> None:
    nodegroup = NksNodegroup.objects.get(cluster__name="prod-api", name="default-worker")
    # Queued, and no worker runs here: it stays queued until the test moves it on.
    request_resize(user=operator, nodegroup=nodegroup, node_count=4, nodes_to_remove=[], reason="x")
    page.goto(f"{live_server.url}{nodegroup_path}")
    log_in(page, OPERATOR)
    live = page.locator("[data-resize-progress-live]")
    expect(live).to_have_attribute("aria-live", "polite")
    expect(live.locator("[data-resize-state]")).to_have_attribute("data-resize-state", "pending")

    polls: list[int] = []
    page.on(
        "response",
        lambda r: (
            polls.append(r.status)
            if r.request.headers.get("hx-target") == "resize-progress"
            else None
        ),
    )
    page.wait_for_timeout(4_500)
    # Unchanged progress is not swapped in again (a screen reader would read it again).
    assert polls and set(polls) == {204}, polls
    ResizeRequest.objects.update(state=ResizeState.SUBMITTED)
    expect(live.locator("[data-resize-state]")).to_have_attribute(
        "data-resize-state", "submitted", timeout=5_000
    )
    expect(page.get_by_text("Refreshing failed")).to_have_count(0)


def test_a_resize_request_page_announces_each_change_of_progress_once(
    live_server: Any, page: Any, nodegroup_path: str, operator: Any
) -> None:
    nodegroup = NksNodegroup.objects.get(cluster__name="prod-api", name="default-worker")
    resize = request_resize(
        user=operator, nodegroup=nodegroup, node_count=4, nodes_to_remove=[], reason="x"
    )
    page.goto(f"{live_server.url}/clusters/resizes/{resize.pk}/")
    log_in(page, OPERATOR)
    announcer = page.locator("[data-progress-announcer]")
    expect(announcer).to_have_attribute("aria-live", "polite")
    # The live region sits outside the region the 2-second refresh replaces.
    assert announcer.evaluate("e => !e.closest('#resize-request')")
    swaps = []
    page.on(
        "response",
        lambda r: swaps.append(r.status) if r.request.headers.get("hx-request") else None,
    )
    # Refreshes that change nothing say nothing (it was empty on load too).
    page.wait_for_timeout(4_500)
    assert swaps and set(swaps) == {200}, swaps
    expect(announcer).to_have_text("")
    ResizeRequest.objects.filter(pk=resize.pk).update(state=ResizeState.SUBMITTED)
    expect(announcer).to_contain_text(f"Resize #{resize.pk}: accepted by NKS.", timeout=5_000)
    said = announcer.text_content()
    # Said once: the next refreshes leave the sentence as it is, so nothing is read again.
    mutations = announcer.evaluate(
        """e => new Promise(done => {
            let seen = 0;
            new MutationObserver(list => { seen += list.length; }).observe(
                e, {childList: true, characterData: true, subtree: true});
            setTimeout(() => done(seen), 4500);
        })"""
    )
    assert mutations == 0
    assert announcer.text_content() == said
