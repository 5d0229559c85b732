"""What the benchmarks share (bench/fleet_data.py, bench/serving.py, bench/benchdb.py) builds
what the dashboard reads as the ingest's own rows, and measures what it says it measures:
a benchmark that loads rows the pages do not see as current, or counts the wrong
connections, prints figures of nothing."""

from __future__ import annotations

import random
import time
from datetime import datetime, timedelta

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from bench.benchdb import create_bench_database
from bench.fleet import ConnectionPeak
from bench.fleet_data import current_clusters, flapping, lease_row, store_leases
from bench.serving import percentile, signed_in_session, timed_client_gets
from leases.flapping import flapping_lease_ids
from leases.models import Lease, LeaseDeadline, LeaseTransition

HX_TABLE = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}


def fleet_of_one(now: datetime) -> list[Lease]:
    (cluster,) = current_clusters(
        ["alpha"], now, current_until=now + timedelta(hours=1), observed_since=now
    )
    rows = [
        lease_row(
            cluster,
            "kube-node-lease",
            f"node-{index}",
            uid=f"uid-{index}",
            holder=f"node-{index}",
            renewed=now - timedelta(seconds=2),
            duration=3_600,
            resource_version=str(index),
        )
        for index in range(3)
    ]
    rows.append(
        lease_row(
            cluster,
            "kube-node-lease",
            "node-9-gone",
            uid="uid-9",
            holder="node-9-gone",
            renewed=now - timedelta(minutes=10),
            duration=40,
            resource_version="9",
        )
    )
    return store_leases(rows)


@pytest.mark.django_db
def test_stored_leases_are_scheduled_and_the_expired_one_comes_first() -> None:
    now = timezone.now()
    leases = fleet_of_one(now)
    assert LeaseDeadline.objects.count() == len(leases)
    client = Client()
    client.cookies["sessionid"] = signed_in_session(User.objects.create_user("bench"))
    body = client.get("/leases/", **HX_TABLE).content.decode()
    # Problems first: the expired lease, found through its schedule, before the held ones.
    assert 0 <= body.index("node-9-gone") < body.index("node-0")


@pytest.mark.django_db
def test_flapping_rows_make_the_lease_flap() -> None:
    now = timezone.now()
    _, flappy, *_ = fleet_of_one(now)
    LeaseTransition.objects.bulk_create(flapping([flappy.pk], now, random.Random(1)))
    flapping_now = set(flapping_lease_ids(now).values_list("lease_id", flat=True))
    assert flapping_now == {flappy.pk}


@pytest.mark.django_db
def test_a_signed_in_session_opens_the_pages_and_its_gets_are_timed() -> None:
    fleet_of_one(timezone.now())
    client = Client()
    client.cookies["sessionid"] = signed_in_session(User.objects.create_user("bench"))
    sample = timed_client_gets(client, "/leases/", 3, HX_TABLE, warm_up=True)
    assert sample.status == 200  # not a redirect to the login page
    assert len(sample.times_ms) == len(sample.database_ms) == 3
    assert sample.queries > 0 and sample.bytes > 0
    anonymous = timed_client_gets(Client(), "/leases/", 2, {})
    assert anonymous.status == 302 and anonymous.times_ms == []


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 4.0, 2.0, 3.0], 95) == 5.0
    assert percentile([5.0, 1.0, 4.0, 2.0, 3.0], 50) == 3.0
    assert percentile([2.0, 1.0], 95) == 2.0  # of two samples, the slower
    assert percentile([], 95) != percentile([], 95)  # NaN: nothing measured


def test_only_bench_databases_are_dropped() -> None:
    with pytest.raises(ValueError):
        create_bench_database("h_bench")
    with pytest.raises(ValueError):
        create_bench_database("bench_x; DROP DATABASE postgres")


@pytest.mark.django_db
@pytest.mark.usefixtures("postgres_database")
def test_the_connection_peak_counts_one_application_on_one_database() -> None:
    database = connection.settings_dict["NAME"]
    # The test database's own server and name, as libpq takes them.
    conninfo = psycopg.conninfo.make_conninfo(
        **{
            key: str(connection.settings_dict[name])
            for key, name in (("host", "HOST"), ("port", "PORT"), ("user", "USER"))
            if connection.settings_dict[name]
        },
        dbname=database,
    )
    peak = ConnectionPeak(conninfo, database, "bench-test-peak")
    peak.start()
    held = [
        psycopg.connect(conninfo, application_name="bench-test-peak", autocommit=True)
        for _ in range(2)
    ]
    other = psycopg.connect(conninfo, application_name="someone-else", autocommit=True)
    try:
        deadline = time.monotonic() + 10
        while peak.peak < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for opened in [*held, other]:
            opened.close()
    assert peak.stop() == 2
