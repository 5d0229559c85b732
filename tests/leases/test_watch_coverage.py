"""WatchCoverage rows (leases/watch_coverage.py): the stretches a cluster's Lease watch was
live, written by the real watcher against the fake API server over real HTTP."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from fakes.kube import FakeApiServer
from leases.freshness import stale_after
from leases.models import KubeCluster, WatchCoverage
from tests.leases.test_watcher import RunningWatcher, eventually, leader_spec, register
from tests.leases.test_watcher_signals import start_command

pytestmark = pytest.mark.django_db(transaction=True)


def rows(cluster: KubeCluster) -> list[tuple[datetime, datetime]]:
    return list(
        WatchCoverage.objects.filter(cluster=cluster)
        .order_by("started_at", "id")
        .values_list("started_at", "last_seen_at")
    )


def growing(cluster: KubeCluster, count: int = 1) -> bool:
    """`count` rows, the newest one still moving forward."""
    first = rows(cluster)
    time.sleep(0.3)
    second = rows(cluster)
    return len(first) == len(second) == count and second[-1][1] > first[-1][1]


def test_a_live_watch_is_covered_from_its_list_and_a_clean_stop_ends_the_row(
    apiserver: FakeApiServer,
) -> None:
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a"))
    cluster = register(apiserver)
    before = timezone.now()
    with RunningWatcher(cluster):
        eventually(lambda: growing(cluster))
        stopping = timezone.now()
    ((started_at, last_seen_at),) = rows(cluster)
    assert before <= started_at <= last_seen_at
    assert stopping <= last_seen_at <= timezone.now()
    time.sleep(0.3)
    assert rows(cluster) == [(started_at, last_seen_at)]  # nobody moves it any more


def test_a_watch_that_ends_and_resumes_at_once_continues_the_row(
    apiserver: FakeApiServer,
) -> None:
    apiserver.forbid("nodes")  # the one watch that ends is the Lease watch
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: growing(cluster))
        apiserver.end_watches()
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).reconnects_total >= 1)
        eventually(lambda: growing(cluster))
    assert len(rows(cluster)) == 1


def test_an_outage_longer_than_the_staleness_limit_starts_a_new_row(
    apiserver: FakeApiServer,
) -> None:
    apiserver.forbid("nodes")
    cluster = register(apiserver)
    with time_machine.travel(datetime.now(UTC), tick=True) as clock, RunningWatcher(cluster):
        eventually(lambda: growing(cluster))
        apiserver.set_auth_failure(401)
        apiserver.end_watches()
        eventually(lambda: not KubeCluster.objects.get(pk=cluster.pk).connected)
        ((_, stopped_at),) = rows(cluster)
        time.sleep(0.3)
        assert rows(cluster)[0][1] == stopped_at, "a failed watch must not read as covered"
        clock.shift(stale_after() + timedelta(seconds=5))
        apiserver.set_auth_failure(None)
        eventually(lambda: growing(cluster, count=2))
        (_, first_end), (second_start, _) = rows(cluster)
    assert first_end == stopped_at
    # The outage stays outside both rows: unobserved.
    assert second_start - first_end > stale_after()


def test_a_killed_worker_leaves_a_row_that_stops_growing_and_the_next_opens_its_own(
    apiserver: FakeApiServer,
) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    process = start_command(cluster.name, None)
    try:
        eventually(lambda: growing(cluster), timeout=30)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    (killed,) = rows(cluster)
    time.sleep(0.5)
    assert rows(cluster) == [killed]
    with RunningWatcher(cluster):
        eventually(lambda: growing(cluster, count=2))
    assert rows(cluster)[0] == killed


def test_sigterm_ends_the_row_at_the_stop(apiserver: FakeApiServer) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    process = start_command(cluster.name, None)
    try:
        eventually(lambda: growing(cluster), timeout=30)
        signalled = timezone.now()
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output.decode(errors="replace")
    ((_, last_seen_at),) = rows(cluster)
    assert signalled <= last_seen_at <= timezone.now()
