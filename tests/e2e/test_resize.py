"""An operator resizes a nodegroup in Chromium and watches it succeed without reloading.

The whole path runs for real: the form posts to the live server, the request is queued on the
broker after the commit, a Celery worker (in this process, on a broker of its own) claims it
and calls the fake NKS once, then follows it up every second; the request page's HTMX refresh
shows each state as the worker records it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from fakes.nks import FakeNks
from nks.accounts import forget_clients
from nks.models import NksCluster, ResizeRequest, ResizeState
from nks.poller import poll_account
from nks.services import register_nks_account
from tests.e2e.login import OPERATOR, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def fast_nks(settings: Any) -> Iterator[FakeNks]:
    settings.NKS_HTTP_TIMEOUT = 5
    settings.NKS_HTTP_BACKOFF = 0.05
    settings.NKS_RESIZE_FOLLOW_SECONDS = 1
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"e2e-{uuid.uuid4().hex}"},
    }
    forget_clients()
    with FakeNks(scenario="demo", resize_delay=1.5) as fake:
        yield fake
    forget_clients()


@pytest.fixture
def closes_its_connections() -> Iterator[None]:
    yield
    # The test body's connection is its own while Playwright runs: close it, or it outlives
    # the test database.
    connections.close_all()


def test_an_operator_resizes_a_nodegroup_and_sees_it_succeed_live(
    live_server: Any,
    page: Any,
    operator: Any,
    fast_nks: FakeNks,
    celery_worker: None,
    closes_its_connections: None,
) -> None:
    account, _ = register_nks_account("demo", api_url=fast_nks.url, **fast_nks.credentials())
    assert poll_account(account.pk).ok
    cluster = NksCluster.objects.get(name="prod-api")

    page.goto(f"{live_server.url}/clusters/{cluster.uuid}/nodegroups/default-worker/")
    log_in(page, OPERATOR)
    page.wait_for_selector("#id_node_count")
    assert page.input_value("#id_node_count") == "3"
    page.fill("#id_node_count", "4")
    page.fill("#id_reason", "more capacity for the launch")
    page.click("button.primary")

    page.wait_for_url("**/clusters/resizes/*/")
    request = ResizeRequest.objects.get()
    assert page.url.endswith(f"/clusters/resizes/{request.pk}/")
    # Marks this page load: a reload (or a navigation) would drop it.
    page.evaluate("window.__sameDocument = true")
    page.wait_for_selector('[data-resize-state="succeeded"]', timeout=20_000)
    assert page.evaluate("window.__sameDocument === true"), "it updated without a reload"
    assert page.locator(".steps li.done").count() == 5

    request.refresh_from_db()
    assert request.state == ResizeState.SUCCEEDED and request.event is not None
    assert request.username == "olivia" and request.reason == "more capacity for the launch"
    posts = fast_nks.requests_seen(r"/v1/clusters/[^/]+/actions/resize", method="POST")
    assert len(posts) == 1 and posts[0].body["node_count"] == 4
    with fast_nks.state.lock:
        assert fast_nks.state.find_cluster("prod-api").nodegroups[0].node_count == 4
