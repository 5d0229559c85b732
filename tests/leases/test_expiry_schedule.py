"""Every lease's expiry schedule (LeaseDeadline.soon_at) is written with it, on every path
that writes renew_time or expires_at: the full upsert, the renewal fast path, Lease.save and
the bulk helper; and it is exactly leases.models.soon_at of the row as stored."""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease, LeaseDeadline, soon_at
from leases.queries import expiring_soon
from tests.leases.factories import make_cluster, make_lease, make_many_leases
from tests.leases.test_ingest_renewals import NAMES, lease, mutate

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 29, 7, 5, tzinfo=UTC)


def assert_every_schedule_matches(cluster_id: int) -> None:
    leases = Lease.objects.filter(cluster_id=cluster_id).values_list(
        "id", "holder", "expires_at", "lease_duration_seconds"
    )
    scheduled = dict(
        LeaseDeadline.objects.filter(lease__cluster_id=cluster_id).values_list(
            "lease_id", "soon_at"
        )
    )
    expected = {
        lease_id: soon_at(holder, expires_at, duration)
        for lease_id, holder, expires_at, duration in leases
    }
    assert scheduled == expected


@pytest.mark.parametrize("seed", range(4))
def test_every_ingest_path_writes_the_schedule_of_what_it_stored(seed: int) -> None:
    rng = random.Random(seed)
    cluster = KubeCluster.objects.create(name=f"schedule-{seed}", kubeconfig="x")
    ingestor = LeaseIngestor(cluster.id)
    current = {name: lease(name, index + 1) for index, name in enumerate(NAMES)}
    version, renewed = 100, 0
    with time_machine.travel(NOW, tick=False) as clock:
        for _step in range(30):
            for name in rng.sample(NAMES, rng.randint(1, len(NAMES))):
                version += 1
                if rng.random() < 0.05:
                    namespace = current[name]["metadata"]["namespace"]
                    ingestor.observe_deleted((namespace, name))
                else:
                    current[name] = mutate(rng, current[name], version)
                    ingestor.observe(copy.deepcopy(current[name]))
            renewed += ingestor.flush().leases_renewed
            assert_every_schedule_matches(cluster.id)
            clock.shift(1)
    assert renewed > 10  # the renewal fast path wrote schedules too


def test_a_renewal_moves_the_schedule_by_the_renewal() -> None:
    cluster = KubeCluster.objects.create(name="renewed", kubeconfig="x")
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(lease("node-a", 1))
    ingestor.flush()
    renewal = lease("node-a", 2)
    renewal["spec"]["renewTime"] = "2026-11-29T07:00:10.000000Z"
    ingestor.observe(renewal)
    assert ingestor.flush().leases_renewed == 1
    deadline = LeaseDeadline.objects.get(lease__cluster=cluster)
    # 40 s from 07:00:10, less 10 s (a quarter of 40 s is 10 s too).
    assert deadline.soon_at == datetime(2026, 11, 29, 7, 0, 40, tzinfo=UTC)


def test_saved_and_bulk_created_leases_are_scheduled() -> None:
    cluster = make_cluster()
    one = make_lease(cluster, "one", renewed_ago=0, duration=100)
    assert one.expires_at is not None
    assert LeaseDeadline.objects.get(lease=one).soon_at == one.expires_at - timedelta(seconds=25)
    one.holder = ""
    one.save()
    assert LeaseDeadline.objects.get(lease=one).soon_at is None
    make_many_leases(cluster, 5)
    assert_every_schedule_matches(cluster.id)


@pytest.mark.parametrize(
    ("duration", "before"),
    [
        (None, timedelta(seconds=10)),
        (0, timedelta(seconds=10)),
        (-5, timedelta(seconds=10)),
        (15, timedelta(seconds=10)),
        (40, timedelta(seconds=10)),
        (41, timedelta(seconds=10.25)),
        (3600, timedelta(minutes=15)),
        (2**31 - 1, timedelta(microseconds=(2**31 - 1) * 250_000)),
    ],
)
def test_soon_at_is_where_expiring_soon_begins(duration: int | None, before: timedelta) -> None:
    expires_at = NOW + timedelta(days=10_000)
    moment = soon_at("holder", expires_at, duration)
    assert moment == expires_at - before
    # Just before it the lease is not expiring soon; from just after it on, it is.
    tick = timedelta(microseconds=1)
    assert not expiring_soon("holder", expires_at, duration, moment - tick)
    assert expiring_soon("holder", expires_at, duration, moment + tick)


def test_no_schedule_without_a_holder_or_an_expiry() -> None:
    assert soon_at("", NOW, 40) is None
    assert soon_at("holder", None, 40) is None
    # An expiry near year 1 is due since the beginning, not an overflow.
    assert soon_at("holder", datetime(1, 1, 1, 0, 0, 5, tzinfo=UTC), 40) == datetime.min.replace(
        tzinfo=UTC
    )
