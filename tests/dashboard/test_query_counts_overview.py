"""The overview (each region), the node page and the watchers page read as many queries at
200 leases per cluster as at 20: their cost does not grow with the fleet."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.test import Client

from leases.models import Lease, LeaseClass, LeaseHolderSpan, WatchCoverage
from leases.overview_queries import ELECTION_CANDIDATES
from leases.presenters.overview import leases_overview
from tests.dashboard.fleet import counts_at_two_sizes, make_fleet
from tests.leases.factories import NOW, known_until, make_cluster, make_lease

pytestmark = pytest.mark.django_db

OVERVIEW_REGIONS = [
    "",
    "stale-data",
    "firing",
    "lease-problems",
    "nks-overview",
    "nks-nodegroups",
    "lease-overview",
    "workers",
]


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def test_every_overview_region_reads_the_same_number_of_queries_at_ten_times_the_leases(
    engineer_client: Client,
) -> None:
    fleet = make_fleet()
    pages = [("/", region) for region in OVERVIEW_REGIONS]
    pages += [(fleet.paths["node"], ""), (fleet.paths["node"], "node-detail")]
    pages += [("/leases/clusters/", "")]
    counts = counts_at_two_sizes(engineer_client, fleet, pages)
    assert {page: small for page, (small, _) in counts.items()} == {
        page: large for page, (_, large) in counts.items()
    }


def test_cluster_counts_judge_each_lease_by_its_own_clusters_as_of_moment() -> None:
    live = make_cluster("live")
    behind = make_cluster("behind")
    stale = make_cluster("stale", fresh=False)
    # `behind` has proved its data only up to 8 s ago (still current): an expiry 10 s ago is
    # known, one 5 s ago is not yet.
    known_until(behind, NOW - timedelta(seconds=8))
    for cluster in (live, behind, stale):
        make_lease(cluster, "held")
        make_lease(cluster, "gone", renewed_ago=20, duration=15)  # expired 5 s ago
        make_lease(cluster, "old", renewed_ago=100, duration=15)  # expired 85 s ago
        make_lease(cluster, "soon", renewed_ago=10, duration=15)  # expires in 5 s
        make_lease(cluster, "free", holder="")
        make_lease(
            cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40
        )  # a node heartbeat, expired

    cards = {card.status.name: card for card in leases_overview(NOW).clusters}

    counts = {
        name: (card.held, card.expired, card.released, card.expiring_soon, card.nodes_expired)
        for name, card in cards.items()
    }
    assert counts["live"] == (2, 3, 1, 1, 1)
    assert counts["behind"] == (2, 2, 1, 1, 1)  # "gone" expired after what is known: unknown
    assert counts["stale"] == (0, 0, 0, 0, 0)  # nothing known of now: every lease unknown
    assert [link.name for link in cards["live"].expired_nodes] == ["node-1"]
    assert [link.name for link in cards["live"].expiring_soon_leases] == ["soon"]
    assert cards["stale"].expired_nodes == [] and cards["stale"].expiring_soon_leases == []


def test_the_elections_card_reads_a_bounded_page_and_links_to_the_rest(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    WatchCoverage.objects.create(
        cluster=cluster, started_at=NOW - timedelta(days=8), last_seen_at=NOW
    )
    total = ELECTION_CANDIDATES + 3
    leases = Lease.objects.bulk_create(
        Lease(
            cluster=cluster,
            namespace="apps",
            name=f"controller-{index:04d}",
            uid=f"uid-e-{index}",
            lease_class=LeaseClass.LEADER_ELECTION,
            holder="pod-b",
            renew_time=NOW,
            lease_duration_seconds=15,
            expires_at=NOW + timedelta(seconds=15),
        )
        for index in range(total)
    )
    # Each changed hands after a leaderless minute, a little earlier for each.
    LeaseHolderSpan.objects.bulk_create(
        span
        for index, lease in enumerate(leases)
        for span in (
            LeaseHolderSpan(
                lease=lease,
                holder="pod-a",
                started_at=NOW - timedelta(hours=20),
                ended_at=NOW - timedelta(hours=2, minutes=index + 1),
            ),
            LeaseHolderSpan(
                lease=lease, holder="pod-b", started_at=NOW - timedelta(hours=2, minutes=index)
            ),
        )
    )
    # A lease held all along by one span is no candidate at all.
    steady = make_lease(cluster, "steady", namespace="apps")
    LeaseHolderSpan.objects.create(
        lease=steady, holder=steady.holder, started_at=NOW - timedelta(days=9)
    )

    text = engineer_client.get("/", headers={"HX-Request": "true", "HX-Target": "lease-overview"})
    card = text.content.decode().split('id="elections-card"', 1)[1]

    more = card.split('id="elections-more"', 1)[1].split("</p>", 1)[0]
    assert f"{ELECTION_CANDIDATES} most recently changed of {total} election leases" in more
    assert '<a href="/leases/?class=leader_election">3 more in the Leases table</a>' in more
    gaps = card.split("Recent leaderless gaps", 1)[1]
    # The newest gaps are those of the most recently changed leases, which were read.
    assert "apps/controller-0000" in gaps and "apps/steady" not in card
