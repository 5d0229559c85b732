"""In Chromium: a lease's countdown that runs out while the API server is frozen reads
"unknown, not confirmed yet", never "expired" (issue 20); once the server answers again and
the data is current past the expiry, the server's refresh says "expired"."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from playwright.sync_api import expect

from fakes.kube import FakeApiServer
from tests.e2e.login import log_in
from tests.leases.test_watcher import RunningWatcher, leader_spec, now_micro, register

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_countdown_that_runs_out_on_frozen_data_is_unknown_until_the_server_says_expired(
    live_server: Any, page: Any, engineer: Any, apiserver: FakeApiServer
) -> None:
    spec = leader_spec("master-0_a", duration=6)
    apiserver.store.apply_lease("kube-system", "kube-scheduler", spec)
    cluster = register(apiserver)
    # The holder renews every second until the page has shown it held: on a loaded CI
    # machine the log-in alone can take longer than the 6 s lease.
    renewing = threading.Event()
    renewing.set()

    def renew() -> None:
        while renewing.is_set():
            apiserver.store.apply_lease(
                "kube-system", "kube-scheduler", {**spec, "renewTime": now_micro()}
            )
            threading.Event().wait(1.0)

    renewer = threading.Thread(target=renew, daemon=True)
    with RunningWatcher(cluster, probe_interval=0.5):
        renewer.start()
        page.goto(f"{live_server.url}/login/?next=/leases/%3Fq%3Dkube-scheduler")
        log_in(page)
        row = page.locator("#lease-table tr[data-state]").first
        expect(row).to_have_attribute("data-state", "held", timeout=20_000)
        # The holder stops renewing, and the API server freezes before the lease expires:
        # the page's data is known only up to the freeze.
        renewing.clear()
        renewer.join(timeout=5)
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
