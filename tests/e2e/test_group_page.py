"""In Chromium: a leader group's page shows a slot being taken without a reload, end to end:
a live watcher reads the fake Kubernetes API where a leader-k8s elector takes a free slot."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from fakes.kube import FakeApiServer
from tests.e2e.login import log_in
from tests.leases.group_factories import leader_k8s_annotations, token
from tests.leases.test_watcher import (
    RunningWatcher,
    database_matches_server,
    eventually,
    leader_spec,
    register,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_group_page_shows_a_slot_taken_without_a_reload(
    live_server: Any, page: Any, engineer: Any, settings: Any, apiserver: FakeApiServer
) -> None:
    settings.PAGE_REFRESH_SECONDS = 1
    store = apiserver.store
    store.apply_lease(
        "apps",
        "orders-slot-0",
        leader_spec(token(1), duration=120),
        annotations=leader_k8s_annotations("worker-a"),
    )
    # Released: leader-k8s sets holderIdentity to null and keeps its annotations.
    store.apply_lease(
        "apps",
        "orders-slot-1",
        {"leaseDurationSeconds": 120},
        annotations=leader_k8s_annotations("worker-old"),
    )
    cluster = register(apiserver)

    with RunningWatcher(cluster):
        # The group exists once its slots are stored: before that its page is a 404, which
        # does not refresh into the group.
        eventually(lambda: database_matches_server(apiserver, cluster))
        page.goto(
            f"{live_server.url}/login/?next=/leases/clusters/{cluster.name}/groups/apps/orders/"
        )
        log_in(page)
        region = page.locator("#group-detail")
        expect(region).to_have_attribute("data-held", "1", timeout=15_000)
        slot = page.locator('#group-detail tr[data-slot="1"]')
        expect(slot).to_have_attribute("data-slot-state", "free")
        page.evaluate("window.__still_the_same_page = true")

        store.apply_lease(
            "apps",
            "orders-slot-1",
            leader_spec(token(2), transitions=1, duration=120),
            annotations=leader_k8s_annotations("worker-b"),
        )

        expect(region).to_have_attribute("data-held", "2", timeout=15_000)
        slot = page.locator('#group-detail tr[data-slot="1"]')
        expect(slot).to_have_attribute("data-slot-state", "held")
        expect(slot).to_contain_text("worker-b")
        expect(slot).to_contain_text(token(2))
        assert page.evaluate("window.__still_the_same_page === true"), "the page was reloaded"
