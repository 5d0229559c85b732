"""Holder spans as the ingestor writes them (leases/holder_spans.py): takeovers, releases,
late renewals (also when coalesced between flushes), deletion and recreation, a restarted
ingestor and a flush that fails and is retried. Direct LeaseIngestor sequences, with the
clock frozen where the moment an event is seen matters."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import OperationalError, connection

from fakes.kube import FakeApiServer
from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease, LeaseHolderSpan, LeaseTransition
from tests.leases.test_watcher import RunningWatcher, eventually, register

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 29, 7, 0, 0, tzinfo=UTC)
KEY = ("operators", "op-leader")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def stamp(seconds: float) -> str:
    return at(seconds).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(
    holder: str | None,
    renew: float | None,
    *,
    acquire: float | None = None,
    duration: int = 15,
    transitions: int = 0,
    namespace: str = "operators",
    name: str = "op-leader",
    version: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration, "leaseTransitions": transitions}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renew is not None:
        spec["renewTime"] = stamp(renew)
    if acquire is not None:
        spec["acquireTime"] = stamp(acquire)
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": str(version)},
        "spec": spec,
    }


def spans(name: str = "op-leader") -> list[tuple[str, datetime, datetime | None]]:
    return list(
        LeaseHolderSpan.objects.filter(lease__name=name)
        .order_by("started_at", "id")
        .values_list("holder", "started_at", "ended_at")
    )


@pytest.fixture
def cluster() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


@pytest.fixture
def clock() -> Iterator[time_machine.Coordinates]:
    with time_machine.travel(at(0), tick=False) as traveller:
        yield traveller


def test_first_sight_opens_a_span_at_the_acquire_time(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 30, acquire=10))
    result = ingestor.flush()
    assert spans() == [("op-a", at(10), None)]
    assert (result.spans_opened, result.spans_closed) == (1, 0)


def test_without_acquire_time_a_span_starts_at_the_renewal(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 30))
    ingestor.flush()
    assert spans() == [("op-a", at(30), None)]


def test_without_any_time_a_span_starts_when_it_was_seen(
    cluster: KubeCluster, clock: time_machine.Coordinates
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    clock.move_to(at(42))
    ingestor.observe(lease("op-a", None))
    ingestor.flush()
    assert spans() == [("op-a", at(42), None)]


def test_takeover_after_expiry_closes_the_old_span_at_its_expiry(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 0, acquire=0))
    ingestor.observe(lease("op-a", 10, acquire=0))  # expires at 25
    ingestor.flush()
    ingestor.observe(lease("op-b", 40, acquire=40, transitions=1))
    result = ingestor.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-b", at(40), None)]
    assert (result.spans_opened, result.spans_closed) == (1, 1)


def test_takeover_before_expiry_closes_the_old_span_at_the_new_start(
    cluster: KubeCluster,
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))  # expires at 25
    ingestor.flush()
    ingestor.observe(lease("op-b", 18, acquire=18, transitions=1))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(18)), ("op-b", at(18), None)]


def test_release_closes_the_span_and_nobody_holds_until_the_next_acquisition(
    cluster: KubeCluster,
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))
    ingestor.flush()
    ingestor.observe(lease(None, 12, acquire=0))  # leader-k8s: holderIdentity null, renewTime now
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(12))]
    ingestor.observe(lease("op-b", 30, acquire=30, transitions=1))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(12)), ("op-b", at(30), None)]


def test_a_release_stamped_after_the_expiry_closes_at_the_expiry(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))  # expires at 25
    ingestor.flush()
    ingestor.observe(lease("", 60, acquire=0))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(25))]


def test_a_late_renewal_splits_the_span_at_the_old_expiry(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))  # expires at 25
    ingestor.flush()
    ingestor.observe(lease("op-a", 31, acquire=0, version=2))
    result = ingestor.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-a", at(31), None)]
    assert (result.spans_opened, result.spans_closed) == (1, 1)
    assert not LeaseTransition.objects.exists()


def test_renewals_in_time_keep_one_span(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    for second in range(0, 120, 10):
        ingestor.observe(lease("op-a", second, acquire=0, version=second + 1))
        ingestor.flush()
    assert spans() == [("op-a", at(0), None)]


def test_a_late_renewal_inside_a_coalesced_batch_is_found(cluster: KubeCluster) -> None:
    """Three renewals wait for one flush; only the middle one came late (against the one
    before it, not against what the database last held)."""
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 0, acquire=0))
    ingestor.flush()
    ingestor.observe(lease("op-a", 10, acquire=0, version=2))  # in time: expires at 25
    ingestor.observe(lease("op-a", 27, acquire=0, version=3))  # 2 s after that expiry
    ingestor.observe(lease("op-a", 37, acquire=0, version=4))  # in time again
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-a", at(27), None)]


def test_a_takeover_and_a_release_inside_one_batch_are_all_recorded(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))
    ingestor.observe(lease("op-b", 30, acquire=30, transitions=1))
    ingestor.observe(lease("", 35, acquire=30, transitions=1))
    ingestor.observe(lease("op-c", 50, acquire=50, transitions=2))
    ingestor.flush()
    assert spans() == [
        ("op-a", at(0), at(25)),
        ("op-b", at(30), at(35)),
        ("op-c", at(50), None),
    ]


def test_deletion_closes_at_the_expiry_or_when_seen(
    cluster: KubeCluster, clock: time_machine.Coordinates
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))  # expires at 25
    ingestor.observe(lease("op-x", 10, acquire=0, name="other"))
    ingestor.flush()
    clock.move_to(at(20))
    ingestor.observe_deleted(KEY)
    clock.move_to(at(60))
    ingestor.observe_deleted(("operators", "other"))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(20))]
    assert spans("other") == [("op-x", at(0), at(25))]
    assert Lease.objects.get(name="op-leader").deleted_at is not None


def test_a_recreated_lease_opens_a_new_span(
    cluster: KubeCluster, clock: time_machine.Coordinates
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))
    ingestor.flush()
    clock.move_to(at(20))
    ingestor.observe_deleted(KEY)
    ingestor.flush()
    ingestor.observe(lease("op-a", 40, acquire=40))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(20)), ("op-a", at(40), None)]


def test_deleted_and_recreated_between_two_flushes(
    cluster: KubeCluster, clock: time_machine.Coordinates
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))
    ingestor.flush()
    clock.move_to(at(20))
    ingestor.observe_deleted(KEY)
    ingestor.observe(lease("op-b", 40, acquire=40))
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(20)), ("op-b", at(40), None)]


def test_a_relist_that_misses_the_lease_closes_its_span(
    cluster: KubeCluster, clock: time_machine.Coordinates
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 100, acquire=0))
    ingestor.flush()
    clock.move_to(at(105))
    assert ingestor.reconcile(set()) == 1
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(105))]


def test_node_heartbeats_and_api_server_identities_have_no_spans(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("worker-1", 10, namespace="kube-node-lease", name="worker-1"))
    ingestor.observe(lease("apiserver-x", 10, namespace="kube-system", name="apiserver-abc"))
    ingestor.observe(lease("master-0_1", 10, namespace="kube-system", name="kube-scheduler"))
    ingestor.flush()
    ingestor.observe(lease("worker-2", 50, namespace="kube-node-lease", name="worker-1"))
    ingestor.flush()
    assert list(LeaseHolderSpan.objects.values_list("lease__name", flat=True)) == ["kube-scheduler"]


# --- restart safety ----------------------------------------------------------------------


def test_a_restarted_ingestor_continues_the_open_span(cluster: KubeCluster) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(lease("op-a", 10, acquire=0))
    first.flush()
    # The worker dies; the next one relists and sees the same holder, renewing in time.
    second = LeaseIngestor(cluster.id)
    second.observe(lease("op-a", 20, acquire=0, version=2))
    second.flush()
    assert spans() == [("op-a", at(0), None)]
    second.observe(lease("op-b", 50, acquire=50, transitions=1, version=3))
    second.flush()
    assert spans() == [("op-a", at(0), at(35)), ("op-b", at(50), None)]


def test_a_restart_that_finds_a_late_renewal_splits_once(cluster: KubeCluster) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(lease("op-a", 10, acquire=0))  # expires at 25
    first.flush()
    second = LeaseIngestor(cluster.id)
    second.observe(lease("op-a", 90, acquire=0, version=2))
    second.flush()
    third = LeaseIngestor(cluster.id)
    third.observe(lease("op-a", 95, acquire=0, version=3))
    third.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-a", at(90), None)]


def test_a_change_unflushed_by_a_dead_ingestor_is_spanned_by_the_next(
    cluster: KubeCluster,
) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(lease("op-a", 10, acquire=0))
    first.flush()
    first.observe(lease("op-b", 40, acquire=40, transitions=1))  # dies before the flush
    second = LeaseIngestor(cluster.id)
    second.observe(lease("op-b", 42, acquire=40, transitions=1))
    second.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-b", at(40), None)]


def test_leases_stored_before_spans_were_kept_get_one_at_the_next_start(
    cluster: KubeCluster,
) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(lease("op-a", 10, acquire=0))
    first.observe(lease("", 10, name="free"))
    first.flush()
    LeaseHolderSpan.objects.all().delete()  # as a database from before this feature
    LeaseIngestor(cluster.id)
    LeaseIngestor(cluster.id)
    assert spans() == [("op-a", at(0), None)]
    assert spans("free") == []


# --- a flush that fails ------------------------------------------------------------------

_SPAN_INSERT = re.compile(r'INSERT INTO "?leases_leaseholderspan"?', re.IGNORECASE)


@contextmanager
def span_inserts_fail(times: int = 1) -> Iterator[list[str]]:
    failed: list[str] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        if len(failed) < times and _SPAN_INSERT.match(sql.lstrip()):
            failed.append(sql)
            raise OperationalError("the database went away (injected)")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield failed


def test_a_failed_flush_retried_writes_each_span_once(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("op-a", 10, acquire=0))
    ingestor.flush()
    ingestor.observe(lease("op-b", 40, acquire=40, transitions=1))
    ingestor.observe(lease("op-b", 50, acquire=40, transitions=1, version=2))
    with span_inserts_fail() as failed, pytest.raises(OperationalError):
        ingestor.flush()
    assert failed
    assert spans() == [("op-a", at(0), None)]  # rolled back with the lease row
    assert Lease.objects.get().holder == "op-a"
    ingestor.observe(lease("op-b", 60, acquire=40, transitions=1, version=3))
    ingestor.flush()
    ingestor.flush()
    assert spans() == [("op-a", at(0), at(25)), ("op-b", at(40), None)]
    assert LeaseTransition.objects.count() == 1


# --- over real HTTP ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_spans_through_the_watcher_across_deletion_recreation_and_a_restart(
    apiserver: FakeApiServer,
) -> None:
    start = datetime.now(UTC).replace(microsecond=0)

    def spec(holder: str, seconds: int, transitions: int = 0) -> dict[str, Any]:
        moment = start + timedelta(seconds=seconds)
        return {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": moment,
            "renewTime": moment,
            "leaseTransitions": transitions,
        }

    apiserver.store.apply_lease("kube-system", "kube-scheduler", spec("master-0", 0))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: spans("kube-scheduler") == [("master-0", start, None)])
        apiserver.store.delete_lease("kube-system", "kube-scheduler")
        eventually(lambda: spans("kube-scheduler")[0][2] is not None)
        apiserver.store.apply_lease("kube-system", "kube-scheduler", spec("master-1", 40))
        eventually(lambda: len(spans("kube-scheduler")) == 2)
    with RunningWatcher(cluster):  # a new watcher continues the open span
        apiserver.store.apply_lease("kube-system", "kube-scheduler", spec("master-2", 50, 1))
        eventually(lambda: len(spans("kube-scheduler")) == 3)
        time.sleep(0.3)
    (first, second, third) = spans("kube-scheduler")
    # Deleted while its holder was valid: closed when the deletion was seen.
    assert first[0] == "master-0" and start < first[2] <= start + timedelta(seconds=15)
    assert second == ("master-1", start + timedelta(seconds=40), start + timedelta(seconds=50))
    assert third == ("master-2", start + timedelta(seconds=50), None)


def test_an_acquisition_after_a_release_that_keeps_the_old_acquire_time_starts_at_its_write(
    cluster: KubeCluster,
) -> None:
    """leader-k8s stamps a new acquireTime only over another holder: taking a released lease
    keeps the old one, so the new tenure starts at the write's renewTime, and the leaderless
    stretch after the release stays a gap."""
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("b4k-a", 10, acquire=0))
    ingestor.flush()
    ingestor.observe(lease(None, 12, acquire=0))
    ingestor.flush()
    ingestor.observe(lease("b4k-b", 40, acquire=0))  # acquireTime from before the release
    ingestor.flush()
    assert spans() == [("b4k-a", at(0), at(12)), ("b4k-b", at(40), None)]


def test_a_restarted_ingestor_knows_the_release_from_the_stored_row(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("b4k-a", 10, acquire=0))
    ingestor.flush()
    ingestor.observe(lease(None, 12, acquire=0))
    ingestor.flush()
    restarted = LeaseIngestor(cluster.id)
    restarted.observe(lease("b4k-b", 40, acquire=0, version=3))
    restarted.flush()
    assert spans() == [("b4k-a", at(0), at(12)), ("b4k-b", at(40), None)]


def test_a_stale_holder_writing_back_its_old_acquire_time_starts_its_span_at_the_write(
    cluster: KubeCluster,
) -> None:
    """A paused pod writes its old view back (old token, old acquireTime): its tenure starts
    at that write, and the one it ends closes there, not hours before it began."""
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("b4k-a", 10, acquire=0))
    ingestor.flush()
    ingestor.observe(lease("b4k-b", 20, acquire=20, transitions=1, version=2))
    ingestor.flush()
    ingestor.observe(lease("b4k-b", 30, acquire=20, transitions=1, version=3))
    ingestor.flush()
    ingestor.observe(lease("b4k-a", 40, acquire=0, transitions=0, version=4))
    ingestor.flush()
    assert spans() == [
        ("b4k-a", at(0), at(20)),
        ("b4k-b", at(20), at(40)),
        ("b4k-a", at(40), None),
    ]
