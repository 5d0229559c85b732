"""The Leases table region, drawn by Jinja2: escaped, and the same in the page and the refresh."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import time_machine
from django.test import Client

from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db

HOSTILE_HOLDER = '<script>alert("holder")</script>'
# A lease's class is at most 24 characters (PostgreSQL refuses more).
HOSTILE_LABEL = "<i onclick='x'>"
REFRESH = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    # The region says when it was drawn; two requests at one instant draw the same region.
    with time_machine.travel(NOW, tick=False):
        yield


def table_region(page: str) -> str:
    """The <section id="lease-table"> element of a page, as sent."""
    match = re.search(r'<section id="lease-table".*?</section>', page, re.S)
    assert match is not None, page[:500]
    return match.group(0)


def get(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def test_hostile_holder_and_class_label_are_escaped_in_the_table(engineer_client: Client) -> None:
    lease = make_lease(
        make_cluster(), "kube-scheduler", holder=HOSTILE_HOLDER, lease_class=HOSTILE_LABEL
    )
    # Three holder changes: the flapping pill's title is drawn too.
    for seconds_ago in (30, 20, 10):
        make_transition(lease, HOSTILE_HOLDER, "b", seconds_ago=seconds_ago)

    for region in (
        table_region(get(engineer_client, "/leases/")),
        get(engineer_client, "/leases/", **REFRESH),
    ):
        assert "<script>" not in region and "<i " not in region
        # Django's spelling of escaped quotes, as on every other page.
        assert "<td>&lt;i onclick=&#x27;x&#x27;&gt;</td>" in region
        assert (
            '<td class="truncate">&lt;script&gt;alert(&quot;holder&quot;)&lt;/script&gt;</td>'
        ) in region
        assert "flapping</span>" in region


def test_htmx_refresh_sends_exactly_the_region_of_the_full_page(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", holder=HOSTILE_HOLDER)
    make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=60)
    make_lease(make_cluster("staging", fresh=False), "kube-controller-manager", holder="")

    for url in ("/leases/", "/leases/?sort=-renewed", "/leases/?state=held&q=zzz"):
        page = get(engineer_client, url)
        refresh = get(engineer_client, url, **REFRESH)

        assert refresh.strip() == table_region(page), url


def test_region_works_without_javascript_and_from_the_shared_cache(
    engineer_client: Client, settings: object
) -> None:
    make_lease(make_cluster(), "kube-scheduler")
    settings.LEASE_TABLE_CACHE_SECONDS = 1  # type: ignore[attr-defined]

    first = get(engineer_client, "/leases/?sort=name", **REFRESH)
    cached = get(engineer_client, "/leases/?sort=name", **REFRESH)

    assert cached == first
    # Sort headers and pager are plain links; htmx only makes them swap the region.
    for tag in re.findall(r"<a [^>]*>", first):
        assert re.search(r'href="/leases/[^"]*"', tag), tag
    assert '<thead hx-target="#lease-table" hx-swap="outerHTML" hx-push-url="true">' in first
