from __future__ import annotations

import pytest
from playwright.sync_api import expect

from fakes.kube import FakeApiServer
from tests.e2e.login import log_in
from tests.leases.test_watcher import RunningWatcher, leader_spec, register

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_new_holder_appears_on_the_leases_page_without_a_reload(
    live_server,
    page,
    engineer,
    apiserver: FakeApiServer,  # type: ignore[no-untyped-def]
) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_first", 3))
    cluster = register(apiserver)

    with RunningWatcher(cluster):
        page.goto(f"{live_server.url}/login/?next=/leases/%3Fq%3Dkube-scheduler")
        log_in(page)
        table = page.locator("#lease-table")
        expect(table).to_contain_text("master-0_first", timeout=10_000)
        page.evaluate("window.__still_the_same_page = true")

        apiserver.store.apply_lease(
            "kube-system", "kube-scheduler", leader_spec("master-1_second", 4)
        )

        expect(table).to_contain_text("master-1_second", timeout=15_000)
        assert page.evaluate("window.__still_the_same_page === true"), "the page was reloaded"
        expect(table).not_to_contain_text("master-0_first")
