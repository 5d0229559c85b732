"""The overview (each region), the node page and the watchers page read as many queries at
200 leases per cluster as at 20: their cost does not grow with the fleet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.db.models import Count, Max
from django.test import Client
from django.test.utils import CaptureQueriesContext

from leases.models import (
    EXPIRING_SOON,
    KubeCluster,
    Lease,
    LeaseClass,
    LeaseHolderSpan,
    LeaseTransition,
    WatchCoverage,
)
from leases.overview_queries import (
    ELECTION_CANDIDATES,
    RECENT_TRANSITIONS_READ,
    counts_by_cluster,
    lease_state_counts,
    recent_transitions,
    soon_and_expired_nodes,
)
from leases.presenters.overview import lease_problems, leases_overview, overview_list_limit
from tests.dashboard.fleet import counts_at_two_sizes, make_fleet, queries_of
from tests.leases.factories import NOW, known_until, make_cluster, make_lease, make_many_leases
from tests.table_reads import rows_read

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


def lease_overview_queries(client: Client) -> int:
    return queries_of(client, "/", "lease-overview")


def test_the_lease_overview_reads_the_same_number_of_queries_for_two_clusters_and_six(
    engineer_client: Client,
) -> None:
    fleet = make_fleet()
    fleet.grow_to(20)
    two = lease_overview_queries(engineer_client)
    for name in ("gamma", "delta", "epsilon", "zeta"):
        cluster = make_cluster(name)
        for index in range(3):
            lease = make_lease(cluster, f"leader-{index}", namespace="apps")
            LeaseTransition.objects.create(
                lease=lease, from_holder="a", to_holder="b", observed_at=NOW
            )
        make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40)
    assert lease_overview_queries(engineer_client) == two


def test_each_cards_lists_share_a_row_budget_over_the_fleet_and_link_to_the_rest(
    engineer_client: Client,
) -> None:
    clusters = 12
    limit = overview_list_limit(clusters)
    assert (overview_list_limit(1), overview_list_limit(50), limit) == (10, 3, 8)
    for number in range(clusters):
        cluster = make_cluster(f"c{number:02d}")
        for index in range(limit + 2):
            make_lease(
                cluster,
                f"node-{index:02d}",
                namespace="kube-node-lease",
                renewed_ago=100 + index,
                duration=40,
            )
            lease = make_lease(cluster, f"leader-{index:02d}", namespace="apps")
            LeaseTransition.objects.create(
                lease=lease,
                from_holder="a",
                to_holder="b",
                observed_at=NOW - timedelta(minutes=index),
            )
    overview = leases_overview(NOW)
    assert len(overview.clusters) == clusters
    for card in overview.clusters:
        # The newest expiries and holder changes first, `limit` of each.
        assert [link.name for link in card.expired_nodes] == [
            f"node-{index:02d}" for index in range(limit)
        ]
        assert [row.name for row in card.transitions] == [
            f"leader-{index:02d}" for index in range(limit)
        ]
        assert card.nodes_expired == limit + 2
    text = engineer_client.get("/", headers={"HX-Request": "true", "HX-Target": "lease-overview"})
    page = " ".join(text.content.decode().split())
    assert page.count(f">all {limit + 2}</a>") == clusters
    assert (
        '<a href="/leases/?cluster=c07&amp;state=expired&amp;class=node_heartbeat">all 10</a>'
        in page
    )


def _problem_lists_rows_read() -> tuple[list[str], int]:
    """The overview's problem lists (both lists of every card, the top expired list) and
    the lease rows their queries read, planned as at scale: with statistics, and told to
    avoid sequential scans, a read that no index serves still scans the table."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leases_lease, leases_leasedeadline")
        cursor.execute("SET LOCAL enable_seqscan = off")
    before = rows_read()
    soon, nodes = soon_and_expired_nodes(
        NOW,
        EXPIRING_SOON,
        [cluster.pk for cluster in KubeCluster.objects.all()],
        [cluster.pk for cluster in KubeCluster.objects.all()],
        10,
        ("id", "name"),
    )
    problems = lease_problems(NOW)
    read = rows_read() - before
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = on")
    names = sorted(row["name"] for rows in (*soon.values(), *nodes.values()) for row in rows)
    return [*names, *(row.name for row in problems.expired)], read


@pytest.mark.postgres
def test_the_problem_lists_read_the_due_leases_not_the_healthy_ones() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL counts the rows it reads; SQLite does not")
    cluster = make_cluster()
    make_lease(cluster, "node-dead", namespace="kube-node-lease", renewed_ago=100, duration=40)
    make_lease(cluster, "leader-soon", namespace="apps", renewed_ago=10, duration=15)
    make_many_leases(cluster, 20)
    small = _problem_lists_rows_read()
    make_many_leases(cluster, 400, namespace="more-nodes")
    large = _problem_lists_rows_read()
    assert small[0] == large[0] == ["leader-soon", "node-dead", "node-dead"]
    assert small[1] == large[1]


def test_the_expired_lists_hold_the_expired_leases_and_not_the_renewed_ones() -> None:
    cluster = make_cluster()
    make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40)
    renewed = make_lease(cluster, "node-2", namespace="kube-node-lease", renewed_ago=100)
    # Renewed since: its schedule moves on with it (Lease.save writes both).
    renewed.renew_time = NOW - timedelta(seconds=1)
    renewed.expires_at = NOW + timedelta(seconds=39)
    renewed.save()
    overview = leases_overview(NOW)
    assert [link.name for link in overview.clusters[0].expired_nodes] == ["node-1"]
    problems = lease_problems(NOW)
    assert [row.name for row in problems.expired] == ["node-1"] and problems.expired_total == 1


def test_state_counts_per_class_carry_extra_aggregates_and_say_unknown_when_stale() -> None:
    live = make_cluster("live")
    stale = make_cluster("stale", fresh=False)
    for cluster in (live, stale):
        make_lease(cluster, "leader")
        make_lease(cluster, "gone", renewed_ago=100)
        make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40)
        make_lease(cluster, "node-2", namespace="kube-node-lease", holder="")
    counts = lease_state_counts(
        NOW, EXPIRING_SOON, by_class=True, extra={"newest": Max("renew_time")}
    )
    nodes = counts[(live.pk, LeaseClass.NODE_HEARTBEAT)]
    assert (nodes.total, nodes.held, nodes.expired, nodes.released, nodes.unknown) == (
        2,
        0,
        1,
        1,
        0,
    )
    assert nodes.nodes_expired == 1 and nodes.current
    assert nodes.extra == {"newest": NOW - timedelta(seconds=2)}  # node-2, renewed 2 s ago
    others = [found for (cluster, _), found in counts.items() if cluster == live.pk]
    assert sum(found.total for found in others) == 4
    assert sum(found.expired for found in others) == 2
    for (cluster, _), found in counts.items():
        if cluster == stale.pk:
            assert not found.current and found.unknown == found.total
            assert found.held == found.expired == found.released == found.nodes_expired == 0
    per_cluster = counts_by_cluster(NOW, EXPIRING_SOON)
    assert per_cluster[live.pk]["expired"] == 2 and per_cluster[stale.pk]["unknown"] == 4


def _mixed_fleet() -> None:
    """Leases in every state in a current cluster, one whose data is behind and a stale
    one: held (one with no expiry, one renewed for minutes), released, deleted, expiring
    soon, expired before and after the cluster's as-of moment, expired node heartbeats."""
    live = make_cluster("live")
    behind = make_cluster("behind")
    stale = make_cluster("stale", fresh=False)
    known_until(behind, NOW - timedelta(seconds=8))
    for cluster in (live, behind, stale):
        make_lease(cluster, "held")
        make_lease(cluster, "forever", duration=None)
        make_lease(cluster, "long", renewed_ago=30, duration=600)
        make_lease(cluster, "gone", renewed_ago=20, duration=15)
        make_lease(cluster, "old", renewed_ago=100, duration=15)
        make_lease(cluster, "soon", renewed_ago=10, duration=15)
        make_lease(cluster, "free", holder="")
        make_lease(cluster, "deleted", renewed_ago=100, deleted_at=NOW - timedelta(minutes=1))
        make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40)
        make_lease(cluster, "node-2", namespace="kube-node-lease", holder="")
        make_many_leases(cluster, 5)


@pytest.mark.parametrize("by_class", [False, True])
@pytest.mark.parametrize("within", [EXPIRING_SOON, timedelta(0), timedelta(seconds=3)])
def test_counts_from_the_expiry_schedule_are_the_counts_of_every_lease(
    by_class: bool, within: timedelta
) -> None:
    _mixed_fleet()
    # An extra aggregate makes the count read every live lease: the rule written once.
    every = lease_state_counts(NOW, within, by_class=by_class, extra={"n": Count("id")})
    scheduled = lease_state_counts(NOW, within, by_class=by_class)
    assert {key: found.as_dict() for key, found in scheduled.items()} == {
        key: found.as_dict() for key, found in every.items()
    }
    assert {key: found.current for key, found in scheduled.items()} == {
        key: found.current for key, found in every.items()
    }
    live = next(cluster for cluster in KubeCluster.objects.filter(name="live"))
    counted = counts_by_cluster(NOW, EXPIRING_SOON)[live.pk]
    # held: held, forever, long, soon (renewing), the five nodes; expired: gone, old, node-1.
    assert counted == {
        "total": 14,
        "held": 9,
        "released": 2,
        "expired": 3,
        "unknown": 0,
        "expiring_soon": 1,
        "nodes_expired": 1,
    }


def _lease_scans(statement: str, params: Any) -> list[tuple[str, str, str]]:
    """(node type, index, condition) of each node of the plan that reads the lease table."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    found = []
    nodes = [plan[0]["Plan"]]
    while nodes:
        node = nodes.pop()
        nodes.extend(node.get("Plans", []))
        if node.get("Relation Name") == "leases_lease":
            found.append(
                (node["Node Type"], node.get("Index Name", ""), node.get("Index Cond", ""))
            )
    return found


@pytest.mark.postgres
def test_the_state_counts_read_no_healthy_lease_row() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    cluster = make_cluster()
    make_lease(cluster, "node-dead", namespace="kube-node-lease", renewed_ago=100, duration=40)
    make_lease(cluster, "free", holder="")
    make_many_leases(cluster, 400)
    with connection.cursor() as cursor:
        # Planned as at scale: with statistics, and told to avoid sequential scans (cheapest
        # for 400 rows), a read that no index serves still scans the table.
        cursor.execute("ANALYZE leases_lease, leases_leasedeadline")
        cursor.execute("SET LOCAL enable_seqscan = off")
    with CaptureQueriesContext(connection) as queries:
        counts = lease_state_counts(NOW, EXPIRING_SOON)
    assert (counts[(cluster.pk, "")].held, counts[(cluster.pk, "")].expired) == (400, 1)
    plans = [_lease_scans(query["sql"], None) for query in queries.captured_queries]
    # The first query counts the live leases: from an index (lease_live_class answers it
    # alone once VACUUM has marked the pages all-visible, as it has at scale; in this test's
    # transaction the planner may prefer the cluster index), never the table.
    totals, *others = plans
    assert len(totals) == 1 and totals[0][0] in {"Index Only Scan", "Index Scan"}
    assert totals[0][1] in {"lease_live_class", "leases_lease_cluster_id_de08923e"}
    # The rest read the released leases from their own index and the due ones by primary
    # key: not one healthy lease row.
    scans = [scan for plan in others for scan in plan]
    assert {(kind, index) for kind, index, _ in scans} == {
        ("Index Only Scan", "lease_released"),
        ("Index Scan", "leases_lease_pkey"),
    }
    assert all("id = ANY" in cond for kind, _, cond in scans if kind == "Index Scan")


def _changes(lease: Lease, count: int, *, since: float) -> None:
    LeaseTransition.objects.bulk_create(
        LeaseTransition(
            lease=lease,
            from_holder=f"h{i}",
            to_holder=f"h{i + 1}",
            observed_at=NOW - timedelta(seconds=since + i),
        )
        for i in range(count)
    )


def test_a_quiet_clusters_last_changes_are_shown_beside_a_busy_clusters() -> None:
    busy = make_lease(make_cluster("busy"), "chatty")
    quiet = make_lease(make_cluster("quiet"), "calm")
    # The quiet cluster's changes are older than every one of the busy cluster's newest
    # (RECENT_TRANSITIONS_READ rows per row shown): read again, among all changes.
    _changes(quiet, 4, since=3600)
    _changes(busy, RECENT_TRANSITIONS_READ * 3 * 2 + 10, since=1)
    found = recent_transitions([busy.cluster_id, quiet.cluster_id], 3)
    assert [t.to_holder for t in found[busy.cluster_id]] == ["h1", "h2", "h3"]
    assert [t.to_holder for t in found[quiet.cluster_id]] == ["h1", "h2", "h3"]
    assert [t.lease.name for t in found[quiet.cluster_id]] == ["calm"] * 3


def _transition_rows_read(cluster_ids: list[int]) -> tuple[list[str], int]:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leases_leasetransition")
        cursor.execute("SET LOCAL enable_seqscan = off")
        before = rows_read("leases_leasetransition")
        found = recent_transitions(cluster_ids, 3)
        after = rows_read("leases_leasetransition")
        cursor.execute("SET LOCAL enable_seqscan = on")
    names = [t.to_holder for cluster in cluster_ids for t in found.get(cluster, [])]
    return names, after - before


@pytest.mark.postgres
def test_the_last_changes_read_the_same_transitions_with_ten_times_the_history() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL counts the rows it reads; SQLite does not")
    leases = [make_lease(make_cluster(f"c{n}"), "leader") for n in range(2)]
    for lease in leases:
        _changes(lease, 40, since=1000)
    ids = [lease.cluster_id for lease in leases]
    small = _transition_rows_read(ids)
    for lease in leases:
        _changes(lease, 400, since=5000)
    large = _transition_rows_read(ids)
    assert small[0] == large[0] == ["h1", "h2", "h3"] * 2
    assert small[1] == large[1]
