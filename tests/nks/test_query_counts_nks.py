"""The NKS pages (each region) read as many queries at 200 leases and nodes per cluster as
at 20, and a cluster page shows a bounded page of its heartbeat Leases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import time_machine
from django.test import Client

from nks.presenters.rows import NODE_LEASES_SHOWN
from tests.dashboard.fleet import counts_at_two_sizes, make_fleet
from tests.leases.factories import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def test_every_nks_page_and_region_reads_the_same_number_of_queries_at_ten_times_the_fleet(
    engineer_client: Client,
) -> None:
    fleet = make_fleet()
    cluster, nodegroup = fleet.paths["nks_cluster"], fleet.paths["nodegroup"]
    pages = [
        ("/clusters/", ""),
        ("/clusters/", "nks-clusters"),
        (cluster, ""),
        (cluster, "nks-cluster"),
        (nodegroup, ""),
        (nodegroup, "nks-nodegroup"),
        (nodegroup, "resize-progress"),
        ("/clusters/resizes/", ""),
        ("/clusters/resizes/", "resize-table"),
        (fleet.paths["resize"], ""),
        (fleet.paths["resize"], "resize-request"),
    ]
    counts = counts_at_two_sizes(engineer_client, fleet, pages)
    assert {page: small for page, (small, _) in counts.items()} == {
        page: large for page, (_, large) in counts.items()
    }


def test_a_cluster_page_shows_expired_heartbeats_first_and_links_to_the_rest(
    engineer_client: Client,
) -> None:
    fleet = make_fleet()
    fleet.grow_to(200)  # 180 heartbeat Leases in the cluster, 25 of them expired
    page = engineer_client.get(fleet.paths["nks_cluster"]).content.decode()
    section = page.split("Node heartbeat Leases", 1)[1]
    table = section.split("</table>", 1)[0]
    rows = table.split("<tr")[2:]  # the header row first
    assert len(rows) == NODE_LEASES_SHOWN
    states = ["row-bad" in row for row in rows]
    # Every expired one first (in natural name order), then the others.
    assert states == sorted(states, reverse=True) and states.count(True) == 25
    assert rows[0].count("node-0001") and rows[1].count("node-0008")
    assert "<strong>" in section and "heart-beating" in section
    assert f"Expired first, {NODE_LEASES_SHOWN} shown:" in " ".join(section.split())
    assert (
        '<a href="/leases/?cluster=alpha&amp;class=node_heartbeat">130 more in the Leases table</a>'
        in section
    )
