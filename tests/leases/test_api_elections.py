"""Who really leads and how available the leadership was, in the JSON API and /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.models import ApiToken
from leases.models import (
    KubeCluster,
    Lease,
    LeaseHolderSpan,
    LeaseLibrary,
    LeaseTransition,
    WatchCoverage,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db

TOKEN_A = "b4k-" + "A" * 22
TOKEN_B = "b4k-" + "B" * 22


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def api(client: Client, django_user_model) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("script")
    _, token = ApiToken.issue(user, name="tests")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def get(client: Client, url: str) -> Any:
    response = client.get(url)
    assert response.status_code == 200, response.content
    return orjson.loads(response.content)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


@pytest.fixture
def cluster() -> KubeCluster:
    cluster = make_cluster()
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(8 * 1440), last_seen_at=ago(0))
    return cluster


def slot_lease(cluster: KubeCluster, name: str = "billing-slot-1", **fields: Any) -> Lease:
    values: dict[str, Any] = {
        "holder": TOKEN_B,
        "library": LeaseLibrary.LEADER_K8S,
        "identity": "worker-7 / audit-7",
        "token": TOKEN_B,
        "group_name": "billing",
        "group_slot": 1,
        "created_at": ago(120),
    }
    values.update(fields)
    return make_lease(cluster, name, namespace="apps", **values)


def test_list_keeps_the_raw_holder_and_says_who_really_leads(
    api: Client, cluster: KubeCluster
) -> None:
    slot_lease(cluster, fencing_reused_at=ago(3))
    make_lease(cluster, "plain-app", namespace="apps", holder="pod-1", identity="pod-1")

    results = {lease["name"]: lease for lease in get(api, "/api/v1/leases")["results"]}

    slot = results["billing-slot-1"]
    assert slot["holder"] == TOKEN_B
    assert (slot["identity"], slot["token"], slot["library"]) == (
        "worker-7 / audit-7",
        TOKEN_B,
        "leader_k8s",
    )
    assert slot["group"] == {"name": "billing", "slot": 1}
    assert (slot["foreign_writer"], slot["fencing_reused_at"]) == (False, "2026-11-29T07:57:00Z")
    plain = results["plain-app"]
    assert (plain["identity"], plain["token"], plain["group"], plain["library"]) == (
        "pod-1",
        "",
        None,
        "plain",
    )


def test_list_costs_the_same_queries_for_two_leases_or_twenty(
    api: Client, cluster: KubeCluster
) -> None:
    for index in range(2):
        slot_lease(cluster, f"billing-slot-{index}", group_slot=index)
    get(api, "/api/v1/leases")  # the first request also reads what is cached after it
    with CaptureQueriesContext(connection) as few:
        get(api, "/api/v1/leases")
    for index in range(2, 20):
        slot_lease(cluster, f"billing-slot-{index}", group_slot=index)
    with CaptureQueriesContext(connection) as many:
        assert len(get(api, "/api/v1/leases")["results"]) == 20

    assert len(many) == len(few)


def test_detail_has_an_availability_block_per_window(api: Client, cluster: KubeCluster) -> None:
    lease = slot_lease(cluster)
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_A, identity="worker-3", started_at=ago(120), ended_at=ago(40)
    )
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_B, identity="worker-7", started_at=ago(30)
    )
    change = make_transition(lease, TOKEN_A, TOKEN_B, seconds_ago=1800)
    LeaseTransition.objects.filter(pk=change.pk).update(
        from_identity="worker-3", to_identity="worker-7"
    )

    body = get(api, "/api/v1/leases/prod/apps/billing-slot-1")

    assert set(body["availability"]) == {"1h", "24h", "7d"}
    assert body["availability"]["1h"] == {
        "ratio": pytest.approx(50 / 60),
        "observed_seconds": 3600.0,
        "available_seconds": 3000.0,
        "gaps": 1,
        "longest_gap_seconds": 600.0,
        "median_takeover_seconds": 600.0,
    }
    # Before the lease was created is not observed: two hours of the day.
    assert body["availability"]["24h"]["observed_seconds"] == 7200.0
    [change] = body["history"]
    assert (change["from_identity"], change["to_identity"], change["fencing_reused"]) == (
        "worker-3",
        "worker-7",
        False,
    )


def test_detail_of_a_heartbeat_lease_has_no_availability(api: Client, cluster: KubeCluster) -> None:
    make_lease(cluster, "node-1", namespace="kube-node-lease", holder="node-1")

    assert get(api, "/api/v1/leases/prod/kube-node-lease/node-1")["availability"] is None


def test_detail_availability_is_null_per_window_when_nothing_was_observed(api: Client) -> None:
    lease = slot_lease(make_cluster(fresh=False))
    LeaseHolderSpan.objects.create(lease=lease, holder=TOKEN_B, started_at=ago(30))

    block = get(api, "/api/v1/leases/prod/apps/billing-slot-1")["availability"]

    assert block["1h"]["ratio"] is None
    assert block["1h"]["observed_seconds"] == 0


def scrape(client: Client) -> str:
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    return response.content.decode()


def test_metrics_export_availability_and_longest_gap_per_window(
    client: Client, cluster: KubeCluster
) -> None:
    lease = slot_lease(cluster)
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_A, started_at=ago(120), ended_at=ago(40)
    )
    LeaseHolderSpan.objects.create(lease=lease, holder=TOKEN_B, started_at=ago(30))
    make_lease(cluster, "node-1", namespace="kube-node-lease", holder="node-1")

    text = scrape(client)

    labels = 'cluster="prod",name="billing-slot-1",namespace="apps"'
    assert f'lease_dashboard_lease_availability_ratio{{{labels},window="1h"}} 0.8333' in text
    assert f'lease_dashboard_lease_longest_gap_seconds{{{labels},window="1h"}} 600.0' in text
    assert f'lease_dashboard_lease_availability_ratio{{{labels},window="7d"}} 0.9166' in text
    assert (
        'name="node-1"'
        not in text.split("lease_dashboard_lease_availability_ratio", 1)[1].split("# HELP", 1)[0]
    )


def test_metrics_leave_out_a_ratio_nobody_observed(client: Client) -> None:
    lease = slot_lease(make_cluster(fresh=False))
    LeaseHolderSpan.objects.create(lease=lease, holder=TOKEN_B, started_at=ago(30))

    text = scrape(client)

    assert 'lease_dashboard_lease_availability_ratio{cluster="prod"' not in text
    # Nor a longest gap: an unobserved window had none that anybody saw.
    assert 'lease_dashboard_lease_longest_gap_seconds{cluster="prod"' not in text
    labels = 'cluster="prod",name="billing-slot-1",namespace="apps"'
    assert f"lease_dashboard_lease_transitions{{{labels}}}" in text


def test_metrics_cost_the_same_queries_for_one_election_lease_or_many(
    client: Client, cluster: KubeCluster
) -> None:
    slot_lease(cluster, "billing-slot-0", group_slot=0)
    with CaptureQueriesContext(connection) as one:
        scrape(client)
    for index in range(1, 12):
        lease = slot_lease(cluster, f"billing-slot-{index}", group_slot=index)
        LeaseHolderSpan.objects.create(lease=lease, holder=TOKEN_B, started_at=ago(30))
    with CaptureQueriesContext(connection) as many:
        scrape(client)

    assert len(many) == len(one)


def test_the_api_keeps_cluster_order_while_the_page_puts_problems_first(api: Client) -> None:
    """Problems first is the page's default; the API's stays an order whose values never
    change, so a script following `next` sees every lease once."""
    cluster = make_cluster()
    for index in range(6):
        make_lease(cluster, f"op-{index}", namespace="operators")
    make_lease(cluster, "op-5-expired", namespace="operators", renewed_ago=600)

    first = orjson.loads(api.get("/api/v1/leases?namespace=operators&limit=4").content)
    names = [row["name"] for row in first["results"]]
    assert "sort=" not in (first["next"] or "")
    if first["next"]:
        names += [row["name"] for row in orjson.loads(api.get(first["next"]).content)["results"]]
    assert names == ["op-0", "op-1", "op-2", "op-3", "op-4", "op-5", "op-5-expired"]
