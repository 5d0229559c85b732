"""In Chromium: a lease's countdown that runs out while the API server is frozen reads
"unknown, not confirmed yet", never "expired" (issue 20); once the server answers again and
the data is current past the expiry, the server's refresh says "expired"."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from fakes.kube import FakeApiServer
from tests.e2e.login import log_in
from tests.leases.test_watcher import RunningWatcher, leader_spec, register

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_countdown_that_runs_out_on_frozen_data_is_unknown_until_the_server_says_expired(
    live_server: Any, page: Any, engineer: Any, apiserver: FakeApiServer
) -> None:
    apiserver.store.apply_lease(
        "kube-system", "kube-scheduler", leader_spec("master-0_a", duration=6)
    )
    cluster = register(apiserver)
    with RunningWatcher(cluster, probe_interval=0.5):
        page.goto(f"{live_server.url}/login/?next=/leases/%3Fq%3Dkube-scheduler")
        log_in(page)
        row = page.locator("#lease-table tr[data-state]").first
        expect(row).to_have_attribute("data-state", "held", timeout=10_000)
        # Nobody renews, and the API server freezes before the lease expires: the page's
        # data is known only up to the freeze.
        apiserver.stall()
        expect(row).to_have_attribute("data-state", "unknown", timeout=12_000)
        expect(row.locator("[data-state-pill]")).to_have_text("unknown")
        assert "expired" not in (row.text_content() or "")
        page.wait_for_timeout(6_000)  # refreshes of stale data change nothing of that
        assert page.locator("#lease-table").get_attribute("data-state") != "expired"
        assert "expired" not in (row.text_content() or "")

        apiserver.resume()
        expect(row).to_have_attribute("data-state", "expired", timeout=15_000)
        expect(row).to_contain_text("expired for")
