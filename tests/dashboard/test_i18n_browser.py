"""In Chromium: a Korean browser in Seoul gets Korean ticking ages and is offered its zone once."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from dashboard.models import UserPreference
from tests.e2e.login import log_in
from tests.leases.factories import make_cluster, make_lease

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_korean_browser_in_seoul_ticks_in_korean_and_is_offered_its_zone_once(  # type: ignore[no-untyped-def]
    live_server, korean_page, engineer
) -> None:
    page = korean_page
    make_lease(make_cluster("prod"), "kube-scheduler", holder="node-a")

    page.goto(f"{live_server.url}/login/")
    expect(page.locator("h1")).to_have_text("로그인")
    log_in(page)
    page.wait_for_url(f"{live_server.url}/")

    expect(page.locator("html")).to_have_attribute("lang", "ko")
    # The age dashboard.js ticks, in the words of the page's language.
    updated = page.locator("#lease-overview [data-refresh-status] time")
    expect(updated).to_have_text(re.compile(r"^\d+초 전$"))
    toggle = page.locator("[data-refresh-toggle='lease-overview']")
    toggle.click()
    expect(toggle).to_have_text("새로 고침 재개")
    toggle.click()
    expect(toggle).to_have_text("새로 고침 일시 정지")

    offer = page.locator("#tz-offer")
    expect(offer).to_be_visible()
    expect(offer).to_contain_text("시각을 Asia/Seoul(브라우저 시간대) 기준으로 표시할까요?")
    offer.get_by_role("button", name="사용").click()
    page.wait_for_url(f"{live_server.url}/")

    preference = UserPreference.objects.get(user=engineer)
    assert (preference.time_zone, preference.time_zone_offered) == ("Asia/Seoul", True)
    expect(page.locator("#tz-offer")).to_have_count(0)
    page.reload()
    expect(page.locator("#tz-offer")).to_have_count(0)


def test_the_offer_stays_hidden_when_the_browser_is_in_the_zone_already(  # type: ignore[no-untyped-def]
    live_server, browser, engineer
) -> None:
    context = browser.new_context(locale="en-US", timezone_id="UTC")
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        page.goto(f"{live_server.url}/login/")
        log_in(page)
        page.wait_for_url(f"{live_server.url}/")
        expect(page.locator("html")).to_have_attribute("lang", "en")
        expect(page.locator("#tz-offer")).to_be_hidden()
    finally:
        context.close()
        from django.db import connections

        connections.close_all()
