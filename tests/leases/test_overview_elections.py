"""The overview's Elections card: groups under-staffed, lowest 24 h availability, recent gaps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from leases.models import (
    KubeCluster,
    LeaderGroup,
    Lease,
    LeaseHolderSpan,
    LeaseTransition,
    WatchCoverage,
)
from leases.presenters.overview import elections_overview
from tests.leases.factories import NOW, make_cluster, make_lease
from tests.leases.group_factories import make_slot

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def watched_for_a_day(cluster: KubeCluster) -> None:
    WatchCoverage.objects.create(
        cluster=cluster, started_at=NOW - timedelta(hours=25), last_seen_at=NOW
    )


def leader_with_a_gap(cluster: KubeCluster, name: str, gap_hours: float) -> Lease:
    """Held all day but for a leaderless stretch of `gap_hours` that ended 10 h ago."""
    lease = make_lease(cluster, name, namespace="ops", holder="b")
    ended = NOW - timedelta(hours=10 + gap_hours)
    LeaseHolderSpan.objects.create(
        lease=lease, holder="a", started_at=NOW - timedelta(hours=30), ended_at=ended
    )
    LeaseHolderSpan.objects.create(lease=lease, holder="b", started_at=NOW - timedelta(hours=10))
    return lease


def test_the_elections_card_lists_short_groups_low_availability_and_gaps(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    watched_for_a_day(cluster)
    make_slot(cluster, "orders", 0, renewed_ago=60)  # unstaffed
    make_slot(cluster, "billing", 0)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="billing", expected_size=2)
    make_slot(cluster, "search", 0)  # staffed, no expected size
    leader_with_a_gap(cluster, "operator-a", 2.4)
    leader_with_a_gap(cluster, "operator-b", 1.2)

    text = engineer_client.get("/", HTTP_HX_TARGET="lease-overview", **HTMX).content.decode()
    card = text.split('id="elections-card"', 1)[1]
    assert '<a href="/leases/groups/">3 leader groups</a>' in card
    orders = card.index("/leases/clusters/prod/groups/apps/orders/")
    billing = card.index("/leases/clusters/prod/groups/apps/billing/")
    assert orders < billing  # unstaffed before degraded
    assert "/groups/apps/search/" not in card
    assert "1 held of 2 expected" in card
    lowest = card.split("Lowest availability", 1)[1].split("Recent leaderless gaps", 1)[0]
    assert lowest.index("ops/operator-a") < lowest.index("ops/operator-b")
    assert "90.00 %" in lowest
    gaps = card.split("Recent leaderless gaps", 1)[1]
    assert "ops/operator-b" in gaps and "ops/operator-a" in gaps


def test_the_elections_card_when_all_is_well(engineer_client: Client) -> None:
    cluster = make_cluster()
    watched_for_a_day(cluster)
    slot = make_slot(cluster, "orders", 0)
    LeaseHolderSpan.objects.create(
        lease=slot, holder=slot.holder, started_at=NOW - timedelta(days=3)
    )
    text = engineer_client.get("/").content.decode()
    assert "Every leader group has its slots held." in text
    assert "No leaderless gap in the last 7 days." in text


def test_the_elections_card_reads_a_fixed_number_of_queries() -> None:
    cluster = make_cluster()
    watched_for_a_day(cluster)
    make_slot(cluster, "group-0", 0, renewed_ago=60)
    leader_with_a_gap(cluster, "operator-0", 1)
    names = {cluster.pk: cluster.name}
    with CaptureQueriesContext(connection) as few:
        elections_overview(NOW, names)
    for index in range(1, 12):
        make_slot(cluster, f"group-{index}", 0, renewed_ago=60)
        make_slot(cluster, f"group-{index}", 1, renewed_ago=60)
        leader_with_a_gap(cluster, f"operator-{index}", 1 + index / 10)
    with CaptureQueriesContext(connection) as many:
        found = elections_overview(NOW, names)
    assert len(found.understaffed) == 5 and found.understaffed_total == 12
    assert len(many) == len(few)


def test_last_holder_changes_name_leader_k8s_holders_by_identity_with_the_token_apart(
    engineer_client: Client,
) -> None:
    token_a, token_b = "b4k-" + "a" * 22, "b4k-" + "b" * 22
    lease = make_lease(make_cluster(), "reconciler", namespace="operators", holder=token_a)
    LeaseTransition.objects.create(
        lease=lease,
        from_holder=token_b,
        to_holder=token_a,
        from_identity="pod-b:1",
        to_identity="<b>pod-a</b>:1",
        observed_at=NOW - timedelta(seconds=30),
        fencing_reused=True,
    )

    page = engineer_client.get("/").content.decode()
    changes = page.split("Last holder changes", 1)[1].split("</table>", 1)[0]
    assert (
        "pod-b:1" in changes
        and f'<code class="muted" title="fencing token">{token_b}</code>' in changes
    )
    assert "&lt;b&gt;pod-a&lt;/b&gt;:1" in changes and "<b>pod-a" not in changes
    assert "fencing token reused" in changes
