"""Leadership availability on scripted histories: spans and coverage rows written directly,
the clock frozen at NOW, the figures checked to the second."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from leases.availability import (
    WINDOWS,
    SegmentKind,
    availability_for_leases,
    group_availability,
    lease_availability,
    lease_timeline,
    recent_gaps,
)
from leases.models import KubeCluster, Lease, LeaseHolderSpan, WatchCoverage
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db

MIN = 60.0


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def span(lease: Lease, holder: str, start: float, end: float | None = None) -> LeaseHolderSpan:
    """A span from `start` minutes ago until `end` minutes ago (None: open)."""
    return LeaseHolderSpan.objects.create(
        lease=lease,
        holder=holder,
        identity=f"node-of-{holder}",
        started_at=ago(start),
        ended_at=ago(end) if end is not None else None,
    )


def cover(cluster: KubeCluster, start: float, end: float) -> None:
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(start), last_seen_at=ago(end))


@pytest.fixture
def cluster() -> KubeCluster:
    # Live: the watcher flushed a second ago; its stretch began eight days ago.
    cluster = make_cluster()
    cover(cluster, 8 * 24 * 60, 1 / 60)
    return cluster


def election(cluster: KubeCluster, name: str = "my-app", **fields: object) -> Lease:
    # Created when the first scripted span began: before it, nothing was leaderless.
    fields.setdefault("created_at", ago(300))
    return make_lease(cluster, name, namespace="apps", **fields)  # type: ignore[arg-type]


def test_takeover_leaves_one_gap_and_its_wait_is_the_takeover_time(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="b")
    span(lease, "a", 120, 50)
    span(lease, "b", 49)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.observed_seconds == 3600
    assert hour.available_seconds == 3600 - MIN
    assert hour.ratio == pytest.approx((3600 - MIN) / 3600)
    assert (hour.gaps, hour.longest_gap_seconds) == (1, MIN)
    assert hour.median_takeover_seconds == MIN


def test_release_leaves_the_lease_leaderless_until_now(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="", expires_at=None, created_at=ago(120))
    span(lease, "a", 120, 30)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.available_seconds == 30 * MIN
    assert hour.ratio == pytest.approx(0.5)
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 30 * MIN)
    assert hour.median_takeover_seconds is None
    [gap] = recent_gaps(NOW)
    assert (gap.lease.pk, gap.started_at, gap.ended_at) == (lease.pk, ago(30), None)


def test_late_renewal_by_the_same_holder_is_a_gap_but_no_takeover(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="a")
    span(lease, "a", 120, 40)  # closed at its old expiry
    span(lease, "a", 35)  # the late renewal

    hour = lease_availability(lease, NOW)["1h"]

    assert (hour.gaps, hour.longest_gap_seconds) == (1, 5 * MIN)
    assert hour.available_seconds == 55 * MIN
    assert hour.median_takeover_seconds is None


def test_a_gap_with_a_watcher_outage_inside_is_left_out_of_every_figure() -> None:
    """a's validity ends 40 min ago, b takes over 20 min ago, and the watcher was away from
    35 to 25 min ago: someone may have held the lease meanwhile, so neither the gap, its
    length, its takeover time nor its watched minutes count; the strip shows all of it as
    not observed, as the figures count it."""
    cluster = make_cluster()
    cover(cluster, 8 * 24 * 60, 35)
    cover(cluster, 25, 1 / 60)
    lease = election(cluster, holder="b")
    span(lease, "a", 120, 40)
    span(lease, "b", 20)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.observed_seconds == 40 * MIN
    assert hour.available_seconds == 40 * MIN
    assert hour.ratio == 1.0
    assert (hour.gaps, hour.longest_gap_seconds) == (0, 0)
    assert hour.median_takeover_seconds is None
    assert recent_gaps(NOW) == []
    kinds = [
        (segment.kind, segment.holder, segment.start, segment.end)
        for segment in lease_timeline(lease, NOW, timedelta(hours=1))
    ]
    assert kinds == [
        (SegmentKind.HELD, "a", ago(60), ago(40)),
        (SegmentKind.UNOBSERVED, "", ago(40), ago(20)),
        (SegmentKind.HELD, "b", ago(20), NOW),
    ]


def test_deleted_and_recreated_lease_is_leaderless_in_between(cluster: KubeCluster) -> None:
    # The same row: the ingestor clears deleted_at and takes the new creationTimestamp.
    lease = election(cluster, holder="b", created_at=ago(30))
    span(lease, "a", 180, 50)  # closed when the deletion was seen
    span(lease, "b", 30)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.observed_seconds == 3600
    assert hour.available_seconds == 40 * MIN
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 20 * MIN)
    assert hour.median_takeover_seconds == 20 * MIN


def test_a_deleted_lease_is_judged_until_its_deletion(cluster: KubeCluster) -> None:
    lease = election(
        cluster, holder="a", deleted_at=ago(30), expires_at=ago(29), created_at=ago(120)
    )
    span(lease, "a", 120)  # left open: the deletion bounds it

    hour = lease_availability(lease, NOW)["1h"]

    assert (hour.observed_seconds, hour.available_seconds, hour.gaps) == (30 * MIN, 30 * MIN, 0)
    assert recent_gaps(NOW) == []


def test_window_that_starts_mid_span_counts_from_the_window_start(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="a", created_at=ago(180))
    span(lease, "a", 180)

    figures = lease_availability(lease, NOW)

    assert figures["1h"].observed_seconds == 3600
    assert figures["1h"].ratio == 1.0
    # Before the lease existed is not observed time: 3 hours of 24, all held.
    assert figures["24h"].observed_seconds == 180 * MIN
    assert (figures["24h"].ratio, figures["24h"].gaps) == (1.0, 0)
    assert figures["7d"].median_takeover_seconds is None


def test_an_expired_open_span_ends_at_the_expiry(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="a", expires_at=ago(10))
    span(lease, "a", 120)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.available_seconds == 50 * MIN
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 10 * MIN)


def test_nothing_observed_has_no_ratio() -> None:
    cluster = make_cluster(fresh=False)
    cover(cluster, 600, 120)  # the watcher stopped two hours ago
    lease = election(cluster, holder="a")
    span(lease, "a", 300)

    hour = lease_availability(lease, NOW)["1h"]

    assert (hour.observed_seconds, hour.available_seconds, hour.ratio) == (0, 0, None)
    assert (hour.gaps, hour.longest_gap_seconds) == (0, 0)
    # Seen from the lease's creation until the watcher stopped.
    assert lease_availability(lease, NOW)["24h"].observed_seconds == 180 * MIN
    [segment] = lease_timeline(lease, NOW, timedelta(hours=1))
    assert segment.kind == SegmentKind.UNOBSERVED


def test_a_stale_watchers_last_stretch_does_not_reach_now() -> None:
    cluster = make_cluster(fresh=False)
    cover(cluster, 120, 20)
    lease = election(cluster, holder="a")
    span(lease, "a", 300)

    assert lease_availability(lease, NOW)["1h"].observed_seconds == 40 * MIN


def test_takeover_before_the_window_uses_the_span_before_it(cluster: KubeCluster) -> None:
    lease = election(cluster, holder="b")
    span(lease, "a", 300, 240)
    span(lease, "b", 30)

    hour = lease_availability(lease, NOW)["1h"]

    assert hour.median_takeover_seconds == 210 * MIN
    assert hour.longest_gap_seconds == 30 * MIN


def test_batched_availability_costs_the_same_queries_for_one_lease_or_many(
    cluster: KubeCluster,
) -> None:
    leases = [election(cluster, f"app-{index}") for index in range(6)]
    for index, lease in enumerate(leases):
        span(lease, "a", 120, 30 + index)
        span(lease, "b", 20)
    with CaptureQueriesContext(connection) as one:
        availability_for_leases(leases[:1], NOW)
    with CaptureQueriesContext(connection) as many:
        figures = availability_for_leases(leases, NOW, "1h")

    assert len(many) == len(one) <= 5
    assert figures[leases[3].pk].longest_gap_seconds == 13 * MIN
    assert figures[leases[3].pk] == lease_availability(leases[3], NOW)["1h"]
    assert set(WINDOWS) == {"1h", "24h", "7d"}


def test_group_is_available_while_any_slot_is_held(cluster: KubeCluster) -> None:
    slot0 = election(cluster, "workers-slot-0", holder="")
    slot1 = election(cluster, "workers-slot-1", holder="")
    span(slot0, "a", 120, 40)
    span(slot1, "b", 50, 20)

    hour = group_availability([slot0, slot1], NOW)["1h"]

    assert hour.available_seconds == 40 * MIN
    assert (hour.gaps, hour.longest_gap_seconds) == (1, 20 * MIN)
    assert hour.median_takeover_seconds is None


def test_recent_gaps_are_newest_first(cluster: KubeCluster) -> None:
    old = election(cluster, "old", holder="b")
    span(old, "a", 300, 200)
    span(old, "b", 190)
    ongoing = election(cluster, "ongoing", holder="", expires_at=None)
    span(ongoing, "a", 300, 5)
    node = make_lease(cluster, "node-1", namespace="kube-node-lease")
    span(node, "kubelet", 300, 100)

    gaps = recent_gaps(NOW)

    assert [(gap.lease.name, gap.seconds) for gap in gaps] == [
        ("ongoing", 5 * MIN),
        ("old", 10 * MIN),
    ]
    assert gaps[1].ended_at == ago(190)
