"""History that is what happened (issue 20, section 5), each found against a real
kube-apiserver driven by real client-go electors:

1. no leaderless gap before a lease's first holder (client-go creates the Lease with its
   holder: a whole-second creationTimestamp just before the microsecond acquireTime);
2. a Node whose Ready lastTransitionTime moved while its status stayed changed and changed
   back unseen: a missed change, shown as one;
3. one rule for unobserved time in every availability figure: a gap (and its takeover) that
   overlaps time the watch did not see counts in none of them;
4. a fencing token counts as reused only in the API server's own order (resourceVersion,
   within one uid): replays, relists and old events after a stall never do, and the
   incident's times come from one order.

Objects go into the ingestors as a watch delivers them, or through the fake API server over
real HTTP; availability is read back with the clock frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation
from kubernetes import client

from alerts.models import Incident, Rule
from fakes.kube import FakeApiServer, add_node
from leases.availability import (
    SegmentKind,
    group_availability,
    lease_availability,
    lease_timeline,
    recent_gaps,
)
from leases.ingest import LeaseIngestor
from leases.models import (
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseHolderSpan,
    LeaseTransition,
    NodeReadyChange,
    WatchCoverage,
)
from leases.node_ingest import NodeIngestor
from tests.alerts.conftest import evaluate
from tests.leases.factories import NOW, make_cluster, make_lease
from tests.leases.test_node_ingest import node
from tests.leases.test_watcher import RunningWatcher, eventually, register
from tests.nks.nodes import watched_cluster

pytestmark = pytest.mark.django_db

MIN = 60.0


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def stamp(moment: datetime, *, whole: bool = False) -> str:
    """metav1.Time (whole seconds, creationTimestamp) or MicroTime (acquire/renewTime)."""
    if whole:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def cover(cluster: KubeCluster, start: float, end: float) -> None:
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(start), last_seen_at=ago(end))


def span(lease: Lease, holder: str, start: float, end: float | None = None) -> None:
    LeaseHolderSpan.objects.create(
        lease=lease,
        holder=holder,
        started_at=ago(start),
        ended_at=ago(end) if end is not None else None,
    )


@pytest.fixture
def frozen() -> Iterator[time_machine.Coordinates]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def live(frozen: time_machine.Coordinates) -> KubeCluster:
    """A cluster whose watcher is live and has watched for eight days."""
    cluster = make_cluster()
    cover(cluster, 8 * 24 * 60, 1 / 60)
    return cluster


# --- 1. no leaderless gap before a lease's first holder ----------------------------------


def elector_lease(
    holder: str | None,
    *,
    created: datetime,
    acquired: datetime | None,
    renewed: datetime | None = None,
    version: int = 1,
) -> dict[str, Any]:
    """A Lease as client-go's LeaseLock writes it (or created empty, holder None)."""
    spec: dict[str, Any] = {"leaseDurationSeconds": 3600, "leaseTransitions": 0}
    if holder is not None:
        spec["holderIdentity"] = holder
    if acquired is not None:
        spec["acquireTime"] = stamp(acquired)
        spec["renewTime"] = stamp(renewed or acquired)
    return {
        "metadata": {
            "namespace": "kube-system",
            "name": "demo-controller",
            "uid": "uid-demo-controller",
            "resourceVersion": str(version),
            "creationTimestamp": stamp(created, whole=True),
        },
        "spec": spec,
    }


def test_a_lease_created_with_its_holder_has_no_gap_before_the_first_acquisition(
    live: KubeCluster, frozen: time_machine.Coordinates
) -> None:
    """creationTimestamp 07:30:00 (whole seconds), acquireTime 07:30:00.417311: every window
    counted that 0.4 s as a gap, and the overview listed it as "0 s, ended 30 min ago"."""
    acquired = ago(30) + timedelta(microseconds=417_311)
    ingestor = LeaseIngestor(live.id)
    ingestor.observe(elector_lease("pod-a_1", created=ago(30), acquired=acquired))
    ingestor.flush()
    lease = Lease.objects.get()
    assert lease.created_at == ago(30) < acquired == lease.acquire_time

    figures = lease_availability(lease, NOW)

    assert {window: (found.gaps, found.ratio) for window, found in figures.items()} == {
        "1h": (0, 1.0),
        "24h": (0, 1.0),
        "7d": (0, 1.0),
    }
    assert figures["1h"].observed_seconds == pytest.approx(30 * MIN - 0.417311)
    assert recent_gaps(NOW) == []
    assert [segment.kind for segment in lease_timeline(lease, NOW, timedelta(hours=1))] == [
        SegmentKind.UNOBSERVED,
        SegmentKind.HELD,
    ]


def test_a_lease_created_empty_is_no_election_until_its_first_holder(
    live: KubeCluster, frozen: time_machine.Coordinates
) -> None:
    """Created by hand 40 minutes ago, first acquired 10 minutes later: the lease did not
    exist as an election before that, so those minutes are no gap."""
    ingestor = LeaseIngestor(live.id)
    ingestor.observe(elector_lease(None, created=ago(40), acquired=None))
    ingestor.flush()
    ingestor.observe(elector_lease("pod-a_1", created=ago(40), acquired=ago(30), version=2))
    ingestor.flush()

    hour = lease_availability(Lease.objects.get(), NOW)["1h"]

    assert (hour.observed_seconds, hour.gaps, hour.ratio) == (30 * MIN, 0, 1.0)
    assert recent_gaps(NOW) == []


def test_a_lease_no_holder_was_ever_seen_on_has_no_figures(live: KubeCluster) -> None:
    lease = make_lease(live, "never-held", holder="", expires_at=None, created_at=ago(600))

    figures = lease_availability(lease, NOW)

    assert all((found.ratio, found.gaps) == (None, 0) for found in figures.values())
    assert recent_gaps(NOW) == []


def test_a_release_after_the_first_holder_is_still_a_gap(live: KubeCluster) -> None:
    lease = make_lease(live, "released", holder="", expires_at=None, created_at=ago(120))
    span(lease, "pod-a_1", 120, 20)

    hour = lease_availability(lease, NOW)["1h"]

    assert (hour.gaps, hour.longest_gap_seconds, hour.ratio) == (1, 20 * MIN, 40 / 60)
    [gap] = recent_gaps(NOW)
    assert (gap.started_at, gap.ended_at) == (ago(20), None)


@pytest.mark.django_db(transaction=True)
def test_a_lease_created_by_an_elector_over_http_counts_no_gap(
    apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], client.ApiClient]
) -> None:
    """As client-go creates it: one create carrying the holder and a microsecond
    acquireTime; the API server stamps creationTimestamp in whole seconds."""
    api = client.CoordinationV1Api(make_api_client(apiserver))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: WatchCoverage.objects.filter(cluster=cluster).exists())
        moment = datetime.now(UTC)
        api.create_namespaced_lease(
            "kube-system",
            client.V1Lease(
                metadata=client.V1ObjectMeta(name="demo-controller", namespace="kube-system"),
                spec=client.V1LeaseSpec(
                    holder_identity="pod-a_1",
                    lease_duration_seconds=15,
                    acquire_time=moment,
                    renew_time=moment,
                    lease_transitions=0,
                ),
            ),
        )
        eventually(lambda: LeaseHolderSpan.objects.filter(lease__name="demo-controller").exists())
        lease = Lease.objects.get(name="demo-controller")
        # Whole seconds of the server's clock at the create: before the acquireTime, or
        # (when the create crossed a second) after it. Neither is a gap.
        assert lease.created_at is not None
        assert lease.created_at.microsecond == 0
        now = timezone.now()
        figures = lease_availability(lease, now)
        gaps = recent_gaps(now)
    assert [found.gaps for found in figures.values()] == [0, 0, 0]
    assert gaps == []


# --- 2. a Node's Ready that changed and changed back unseen ------------------------------


@pytest.fixture
def nodes() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


def ready_changes() -> list[tuple[str, str, datetime | None]]:
    return list(
        NodeReadyChange.objects.order_by("id").values_list(
            "from_status", "to_status", "transitioned_at"
        )
    )


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2027-01-15T{clock}+00:00")


def test_a_relist_that_finds_ready_moved_on_with_the_same_status_records_a_missed_change(
    nodes: KubeCluster,
) -> None:
    """Ready True since 08:00; the watcher is away; the node goes NotReady and back, so a
    new watcher's list finds Ready True since 08:20. That episode was a change."""
    first = NodeIngestor(nodes.id)
    first.observe(node())
    first.flush()

    restarted = NodeIngestor(nodes.id)
    restarted.observe(node(since="2027-01-15T08:20:00Z", beat=1500, resource_version=9))
    result = restarted.flush()

    assert result.ready_changes_written == 1
    assert ready_changes() == [
        ("", "True", at("08:00:00")),
        ("True", "True", at("08:20:00")),
    ]
    missed = NodeReadyChange.objects.order_by("id").last()
    assert missed is not None
    # The node's own words, as it reported them; "missed" is from == to.
    assert (missed.reason, missed.message) == ("KubeletReady", "kubelet is posting ready status")
    # Written once: the next watcher starts from the new lastTransitionTime.
    again = NodeIngestor(nodes.id)
    again.observe(node(since="2027-01-15T08:20:00Z", beat=1510, resource_version=9))
    assert again.flush().ready_changes_written == 0


def test_a_watch_event_with_a_newer_ready_transition_and_the_same_status_is_a_missed_change(
    nodes: KubeCluster,
) -> None:
    ingestor = NodeIngestor(nodes.id)
    ingestor.observe(node(ready="False", reason="KubeletNotReady"))
    ingestor.flush()

    ingestor.observe(
        node(ready="False", reason="KubeletNotReady", since="2027-01-15T08:05:00Z", beat=300)
    )
    ingestor.flush()

    assert ready_changes()[1:] == [("False", "False", at("08:05:00"))]


def test_heartbeats_and_an_older_or_missing_transition_time_are_no_missed_change(
    nodes: KubeCluster,
) -> None:
    ingestor = NodeIngestor(nodes.id)
    ingestor.observe(node(since="2027-01-15T08:00:00Z"))
    ingestor.flush()
    ingestor.observe(node(since="2027-01-15T08:00:00Z", beat=10))  # a heartbeat
    ingestor.observe(node(since="2027-01-15T07:59:00Z", beat=20))  # an older time
    ingestor.observe(node(since="", beat=30))  # none at all
    ingestor.observe(node(since="2027-01-15T08:00:00Z", beat=40))  # none before it
    ingestor.flush()

    assert ready_changes() == [("", "True", at("08:00:00"))]


def test_a_ready_change_seen_as_it_happens_is_not_also_missed(nodes: KubeCluster) -> None:
    ingestor = NodeIngestor(nodes.id)
    ingestor.observe(node())
    ingestor.observe(node(ready="False", since="2027-01-15T08:01:00Z", beat=60))
    ingestor.observe(node(ready="True", since="2027-01-15T08:02:00Z", beat=120))
    ingestor.flush()

    assert [(old, new) for old, new, _ in ready_changes()] == [
        ("", "True"),
        ("True", "False"),
        ("False", "True"),
    ]


@pytest.mark.django_db(transaction=True)
def test_a_notready_episode_while_no_watcher_ran_is_found_by_the_next_one(
    apiserver: FakeApiServer,
) -> None:
    add_node(apiserver.store, "worker-1", provider_id="openstack:///worker-1")
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: NodeReadyChange.objects.filter(node__name="worker-1").exists())
    start = datetime.now(UTC).replace(microsecond=0)
    # lastTransitionTime is whole seconds: the episode is stamped well after the first sight.
    apiserver.store.set_node_ready("worker-1", False, at=start + timedelta(seconds=5))
    apiserver.store.set_node_ready("worker-1", True, at=start + timedelta(seconds=10))
    with RunningWatcher(cluster):
        eventually(lambda: NodeReadyChange.objects.filter(node__name="worker-1").count() == 2)
        eventually(
            lambda: cluster.nodes.get(name="worker-1").ready_since == start + timedelta(seconds=10)
        )
    assert ready_changes()[1:] == [
        (ConditionStatus.TRUE, ConditionStatus.TRUE, start + timedelta(seconds=10))
    ]


def test_the_node_page_shows_a_missed_change_in_words(
    client: Client, django_user_model: Any
) -> None:
    cluster = watched_cluster("prod")
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()
    ingestor.observe(node(since="2027-01-15T08:20:00Z", beat=1500))
    ingestor.observe(node(ready="False", since="2027-01-15T08:30:00Z", beat=2100))
    ingestor.flush()
    client.force_login(django_user_model.objects.create_user("erin"))

    text = client.get(reverse("leases:node", args=["prod", "worker-0"])).content.decode()
    history = text.split("<h2>Ready history</h2>", 1)[1].split("</section>", 1)[0]

    rows = history.split("<tr")[2:]  # after the header row
    # Newest first: the change seen, then the missed one, then the first appearance.
    assert "data-missed" not in rows[0] and "data-missed" not in rows[2]
    assert 'class="row-warn missed" data-missed' in rows[1]
    assert "missed: Ready changed and changed back while the dashboard was not watching" in rows[1]
    assert rows[1].count('class="pill') == 1  # the status it came back to, shown once


def test_the_missed_change_reads_in_korean(client: Client, django_user_model: Any) -> None:
    cluster = watched_cluster("prod")
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()
    ingestor.observe(node(since="2027-01-15T08:20:00Z", beat=1500))
    ingestor.flush()
    client.force_login(django_user_model.objects.create_user("erin"))

    # LocaleMiddleware leaves Korean active in this thread: restore the language after.
    with translation.override(translation.get_language()):
        text = client.get(
            reverse("leases:node", args=["prod", "worker-0"]), HTTP_ACCEPT_LANGUAGE="ko"
        ).content.decode()

    assert "대시보드가 감시하지 않는 동안 Ready가 바뀌었다가 되돌아왔습니다" in text
    assert "missed: Ready changed" not in text


# --- 3. one rule for unobserved time ------------------------------------------------------


def outage(cluster: KubeCluster, start: float, end: float) -> None:
    """The watcher away from `start` to `end` minutes ago, live for eight days otherwise."""
    cover(cluster, 8 * 24 * 60, start)
    cover(cluster, end, 1 / 60)


def test_a_takeover_across_an_outage_counts_in_no_figure(frozen: time_machine.Coordinates) -> None:
    """a's validity ended 50 min ago and b took over 30 min ago, but from 45 to 40 min ago
    nobody watched: the median takeover counted its 20 minutes while the gap count, the
    longest gap and the ratio left that time out. Now none of them counts it."""
    cluster = make_cluster()
    outage(cluster, 45, 40)
    lease = make_lease(cluster, "my-app", namespace="apps", holder="b", created_at=ago(300))
    span(lease, "a", 120, 50)
    span(lease, "b", 30)

    for window, found in lease_availability(lease, NOW).items():
        assert (found.gaps, found.longest_gap_seconds) == (0, 0), window
        assert found.median_takeover_seconds is None, window
        assert found.ratio == 1.0, window
    assert recent_gaps(NOW) == []


def test_of_two_takeovers_only_the_wholly_watched_one_counts_in_every_figure(
    frozen: time_machine.Coordinates,
) -> None:
    """a until 50 min ago, b from 44 to 30, c from 25: the first gap (50..44) has the outage
    48..46 inside, the second (30..25) was watched whole."""
    cluster = make_cluster()
    outage(cluster, 48, 46)
    lease = make_lease(cluster, "my-app", namespace="apps", holder="c", created_at=ago(300))
    span(lease, "a", 120, 50)
    span(lease, "b", 44, 30)
    span(lease, "c", 25)

    hour = lease_availability(lease, NOW)["1h"]

    # Observed: the hour less the outage and the watched minutes of the first gap (6 min).
    assert hour.observed_seconds == 54 * MIN
    assert hour.available_seconds == 49 * MIN
    assert hour.ratio == pytest.approx(49 / 54)
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 5 * MIN)
    assert hour.median_takeover_seconds == 5 * MIN
    assert [(gap.started_at, gap.seconds) for gap in recent_gaps(NOW)] == [(ago(30), 5 * MIN)]
    kinds = [
        (segment.kind, segment.start, segment.end)
        for segment in lease_timeline(lease, NOW, timedelta(hours=1))
    ]
    assert kinds == [
        (SegmentKind.HELD, ago(60), ago(50)),
        (SegmentKind.UNOBSERVED, ago(50), ago(44)),
        (SegmentKind.HELD, ago(44), ago(30)),
        (SegmentKind.GAP, ago(30), ago(25)),
        (SegmentKind.HELD, ago(25), NOW),
    ]


def test_a_takeover_without_a_wait_at_an_unwatched_moment_is_left_out(
    frozen: time_machine.Coordinates,
) -> None:
    """b took over from a 30 min ago, before a expired, but nobody watched from 35 to 25 min
    ago: a third holder may have come and gone in between."""
    cluster = make_cluster()
    outage(cluster, 35, 25)
    lease = make_lease(cluster, "my-app", namespace="apps", holder="b", created_at=ago(300))
    span(lease, "a", 120, 30)
    span(lease, "b", 30)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.median_takeover_seconds is None
    assert (hour.gaps, hour.ratio) == (0, 1.0)


def test_a_watched_takeover_before_the_window_still_counts_its_whole_wait(
    frozen: time_machine.Coordinates,
) -> None:
    """The rule is judged on the whole gap: one that began before the window and was
    watched all along counts, with its whole wait, in the window it ends in."""
    cluster = make_cluster()
    outage(cluster, 400, 390)  # long before the gap
    lease = make_lease(cluster, "my-app", namespace="apps", holder="b", created_at=ago(600))
    span(lease, "a", 600, 240)
    span(lease, "b", 30)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.median_takeover_seconds == 210 * MIN
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 30 * MIN)


def test_a_group_stretch_with_no_slot_held_across_an_outage_counts_in_no_figure(
    frozen: time_machine.Coordinates,
) -> None:
    cluster = make_cluster()
    outage(cluster, 35, 30)
    slot0 = make_lease(cluster, "workers-slot-0", namespace="apps", holder="", created_at=ago(300))
    slot1 = make_lease(cluster, "workers-slot-1", namespace="apps", holder="", created_at=ago(300))
    span(slot0, "a", 120, 40)
    span(slot1, "b", 20, 10)
    span(slot1, "c", 5)

    hour = group_availability([slot0, slot1], NOW)["1h"]

    # 40..20 has the outage inside: left out; 10..5 was watched whole.
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 5 * MIN)
    assert hour.median_takeover_seconds == 5 * MIN
    assert hour.observed_seconds == 40 * MIN
    assert hour.available_seconds == 35 * MIN


# --- 4. fencing in the API server's order -------------------------------------------------

TOKEN_A, TOKEN_B, TOKEN_C = ("b4k-" + letter * 22 for letter in "ABC")


def leader_k8s(
    holder: str | None,
    version: int | str,
    *,
    transitions: int = 0,
    uid: str = "uid-billing",
    acquired: str = "2026-11-29T07:00:00.000000Z",
) -> dict[str, Any]:
    node_id = f"node-{holder[-1]}" if holder else ""
    return {
        "metadata": {
            "namespace": "operators",
            "name": "billing",
            "uid": uid,
            "resourceVersion": str(version),
            "creationTimestamp": "2026-11-29T06:00:00Z",
            "annotations": {
                "leader.bluetape4k.io/managed-by": "bluetape4k-leader-k8s",
                "leader.bluetape4k.io/node-id": node_id,
                "leader.bluetape4k.io/audit-leader-id": node_id,
            },
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": acquired,
            "renewTime": acquired,
            "leaseTransitions": transitions,
        },
    }


def history() -> list[tuple[str, str, bool]]:
    return list(
        LeaseTransition.objects.order_by("id").values_list(
            "from_holder", "to_holder", "fencing_reused"
        )
    )


def feed(ingestor: LeaseIngestor, *objects: dict[str, Any], flush_each: bool = True) -> None:
    for obj in objects:
        ingestor.observe(obj)
        if flush_each:
            ingestor.flush()
    ingestor.flush()


@pytest.fixture
def elections() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


def test_a_token_back_after_another_in_resource_version_order_is_reused(
    elections: KubeCluster,
) -> None:
    feed(
        LeaseIngestor(elections.id),
        leader_k8s(TOKEN_A, 10),
        leader_k8s(TOKEN_B, 20, transitions=1),
        leader_k8s(TOKEN_A, 30, transitions=2),
    )
    assert history() == [(TOKEN_A, TOKEN_B, False), (TOKEN_B, TOKEN_A, True)]
    assert Lease.objects.get().fencing_reused_at is not None


@pytest.mark.parametrize("flush_each", [True, False], ids=["flushed", "one-batch"])
def test_old_events_after_a_stall_are_no_reuse_no_transition_and_no_span(
    elections: KubeCluster, flush_each: bool
) -> None:
    """A took the lease over from B; after an API server stall the burst delivers B's old
    objects after A's newer ones. By resourceVersion nothing changed back."""
    feed(
        LeaseIngestor(elections.id),
        leader_k8s(TOKEN_B, 100, acquired="2026-11-29T07:01:16.000000Z"),
        leader_k8s(TOKEN_A, 200, transitions=1, acquired="2026-11-29T07:16:16.000000Z"),
        leader_k8s(TOKEN_B, 150, acquired="2026-11-29T07:01:16.000000Z"),  # old
        leader_k8s(TOKEN_B, 120, acquired="2026-11-29T07:01:16.000000Z"),  # older
        leader_k8s(TOKEN_A, 210, transitions=1, acquired="2026-11-29T07:16:16.000000Z"),
        flush_each=flush_each,
    )
    assert history() == [(TOKEN_B, TOKEN_A, False)]
    lease = Lease.objects.get()
    assert (lease.holder, lease.resource_version, lease.fencing_reused_at) == (
        TOKEN_A,
        "210",
        None,
    )
    spans = LeaseHolderSpan.objects.order_by("started_at").values_list("holder", flat=True)
    assert list(spans) == [TOKEN_B, TOKEN_A]


def test_a_relist_showing_the_same_state_is_not_a_reuse(elections: KubeCluster) -> None:
    feed(
        LeaseIngestor(elections.id),
        leader_k8s(TOKEN_A, 10),
        leader_k8s(TOKEN_B, 20, transitions=1),
    )
    # A new watcher lists: the same object; then an old one replayed from before it.
    restarted = LeaseIngestor(elections.id)
    feed(restarted, leader_k8s(TOKEN_B, 20, transitions=1), leader_k8s(TOKEN_A, 10))
    assert history() == [(TOKEN_A, TOKEN_B, False)]
    assert Lease.objects.get().holder == TOKEN_B


def test_a_token_back_in_another_life_of_the_lease_is_not_a_reuse(elections: KubeCluster) -> None:
    """Deleted and created again while nobody watched (a new uid): its first holder is no
    token coming back, whatever the old life held."""
    feed(
        LeaseIngestor(elections.id),
        leader_k8s(TOKEN_A, 10),
        leader_k8s(TOKEN_B, 20, transitions=1),
        leader_k8s(TOKEN_A, 5, uid="uid-billing-2"),
    )
    assert history() == [(TOKEN_A, TOKEN_B, False), (TOKEN_B, TOKEN_A, False)]
    assert Lease.objects.get().fencing_reused_at is None


def test_resource_versions_that_are_not_integers_are_not_judged(elections: KubeCluster) -> None:
    feed(
        LeaseIngestor(elections.id),
        leader_k8s(TOKEN_A, "a1"),
        leader_k8s(TOKEN_B, "b2", transitions=1),
        leader_k8s(TOKEN_A, "c3", transitions=2),
    )
    assert history() == [(TOKEN_A, TOKEN_B, False), (TOKEN_B, TOKEN_A, False)]


def test_a_reuse_incident_tells_its_times_in_one_order() -> None:
    """A takes over from C, B from A, then A writes again with its old view. B's client
    clock is behind, so its acquireTime (07:35) comes before A's (07:40): told by the
    acquireTimes, A "first held" the lease after B "took over". The incident tells the
    moments each change was seen, in the order they were: 07:40 < 07:50 < 08:00."""
    cluster = make_cluster(name="prod")
    with time_machine.travel(NOW - timedelta(minutes=30), tick=False) as clock:
        ingestor = LeaseIngestor(cluster.id)
        feed(ingestor, leader_k8s(TOKEN_C, 1, acquired="2026-11-29T07:30:00.000000Z"))
        clock.shift(timedelta(minutes=10))
        feed(ingestor, leader_k8s(TOKEN_A, 2, transitions=1, acquired="2026-11-29T07:40:00Z"))
        clock.shift(timedelta(minutes=10))
        feed(ingestor, leader_k8s(TOKEN_B, 3, transitions=2, acquired="2026-11-29T07:35:00Z"))
        clock.shift(timedelta(minutes=10))
        feed(ingestor, leader_k8s(TOKEN_A, 4, transitions=2, acquired="2026-11-29T07:40:00Z"))
    with time_machine.travel(NOW, tick=False):
        evaluate(cluster)

    incident = Incident.objects.get(rule=Rule.FENCING_TOKEN_REUSED)
    facts = {item["label"]: item for item in incident.details["facts"]}
    assert (
        facts["That token first held the lease"]["at"],
        facts["The holder in between took over"]["at"],
        facts["The old token was seen again"]["at"],
    ) == ("2026-11-29T07:40:00Z", "2026-11-29T07:50:00Z", "2026-11-29T08:00:00Z")
    assert facts["Reused token's holder (node id)"]["token"] == TOKEN_A
    assert facts["Holder in between (node id)"]["token"] == TOKEN_B
