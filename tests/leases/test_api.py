from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
import time_machine
from django.test import Client

from dashboard.models import ApiToken
from leases.models import KubeCluster
from tests.leases.factories import (
    NOW,
    make_candidate,
    make_cluster,
    make_lease,
    make_many_leases,
    make_transition,
)

pytestmark = pytest.mark.django_db

LEASE_KEYS = {
    "as_of",
    "stale",
    "cluster",
    "namespace",
    "name",
    "class",
    "holder",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "state",
    "transitions",
    "deleted",
    # Issue 11: who really leads, beside the raw holder.
    "identity",
    "library",
    "token",
    "group",
    "foreign_writer",
    "fencing_reused_at",
}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def api(client: Client, django_user_model) -> Client:  # type: ignore[no-untyped-def]
    """A client that sends a bearer token, as scripts do (no session)."""
    user = django_user_model.objects.create_user("script")
    _, token = ApiToken.issue(user, name="tests")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def get(client: Client, url: str, status: int = 200) -> Any:
    response = client.get(url)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return orjson.loads(response.content)


def test_list_returns_the_specified_shape(api: Client) -> None:
    make_lease(
        make_cluster(),
        "kube-scheduler",
        holder="master-0",
        renewed_ago=3,
        duration=15,
        lease_transitions=4,
    )

    body = get(api, "/api/v1/leases")

    assert set(body) == {"results", "next"}
    assert body["next"] is None
    (lease,) = body["results"]
    assert set(lease) == LEASE_KEYS
    assert lease == {
        "cluster": "prod",
        "namespace": "kube-system",
        "name": "kube-scheduler",
        "class": "control_plane",
        "holder": "master-0",
        "acquire_time": "2026-11-29T07:54:57Z",
        "renew_time": "2026-11-29T07:59:57Z",
        "lease_duration_seconds": 15,
        "expires_at": "2026-11-29T08:00:12Z",
        "state": "held",
        "transitions": 4,
        "deleted": False,
        "as_of": "2026-11-29T07:59:59Z",
        "stale": False,
        "identity": "",
        "library": "plain",
        "token": "",
        "group": None,
        "foreign_writer": False,
        "fencing_reused_at": None,
    }


def test_state_is_computed_from_the_clock_at_request_time(api: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=3, duration=15)

    first = get(api, "/api/v1/leases")["results"][0]
    assert (first["state"], first["stale"]) == ("held", False)
    assert first["as_of"] == "2026-11-29T07:59:59Z"
    with time_machine.travel(NOW + timedelta(seconds=13), tick=False):
        # The data is known only until 07:59:59: past WATCH_STALE_SECONDS it says nothing
        # of now, and the lease is neither held nor expired.
        late = get(api, "/api/v1/leases")["results"][0]
        assert (late["state"], late["stale"]) == ("unknown", True)
        KubeCluster.objects.filter(pk=cluster.pk).update(
            leases_as_of=NOW + timedelta(seconds=12, milliseconds=500)
        )
        assert get(api, "/api/v1/leases")["results"][0]["state"] == "expired"


def test_an_expiry_after_the_data_as_of_moment_is_unknown_not_expired(api: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=14, duration=15)  # expires NOW + 1 s
    with time_machine.travel(NOW + timedelta(seconds=3), tick=False):
        # Current data (4 s old), but it vouches only up to NOW - 1 s: a renewal may be
        # on its way, so the lease is not expired yet for the dashboard.
        lease = get(api, "/api/v1/leases")["results"][0]
        assert (lease["state"], lease["stale"]) == ("unknown", False)
        assert get(api, "/api/v1/leases?state=unknown")["results"][0]["name"] == "kube-scheduler"
        assert get(api, "/api/v1/leases?state=expired")["results"] == []
        KubeCluster.objects.filter(pk=cluster.pk).update(leases_as_of=NOW + timedelta(seconds=2))
        assert get(api, "/api/v1/leases")["results"][0]["state"] == "expired"
        assert get(api, "/api/v1/leases?state=unknown")["results"] == []


def test_list_filters_like_the_page(api: Client) -> None:
    prod, staging = make_cluster("prod"), make_cluster("staging")
    make_lease(prod, "kube-scheduler", holder="master-0")
    make_lease(prod, "node-1", namespace="kube-node-lease", holder="node-1", renewed_ago=90)
    make_lease(staging, "kube-scheduler", holder="")

    def names(query: str) -> list[tuple[str, str]]:
        return [(r["cluster"], r["name"]) for r in get(api, f"/api/v1/leases?{query}")["results"]]

    assert names("cluster=staging") == [("staging", "kube-scheduler")]
    assert names("class=node_heartbeat&state=expired") == [("prod", "node-1")]
    assert names("state=released") == [("staging", "kube-scheduler")]
    assert names("namespace=kube-system&q=MASTER") == [("prod", "kube-scheduler")]
    assert names("cluster=unknown") == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("class=bogus", "class"),
        ("state=dead", "state"),
        ("deleted=maybe", "deleted"),
        ("sort=holder;drop", "sort"),
        ("after=not-a-cursor", "after"),
    ],
)
def test_bad_filter_value_is_a_400_naming_the_field(api: Client, query: str, field: str) -> None:
    body = get(api, f"/api/v1/leases?{query}", status=400)

    assert body["error"] == "invalid filter"
    assert set(body["fields"]) == {field}


def test_api_needs_a_token(client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    for url in ("/api/v1/leases", "/api/v1/leases/prod/kube-system/kube-scheduler"):
        response = client.get(url)
        assert response.status_code == 401
        assert "error" in orjson.loads(response.content)
        assert client.get(url, HTTP_AUTHORIZATION="Bearer ldb_wrong").status_code == 401


def test_unknown_lease_is_a_json_404(api: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    assert get(api, "/api/v1/leases/prod/kube-system/nope", status=404) == {
        "error": "no such lease"
    }


def test_detail_adds_history_oldest_first_and_candidates(api: Client) -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder="master-2")
    make_transition(lease, "master-0", "master-1", seconds_ago=600, lease_transitions=5)
    make_transition(lease, "master-1", "master-2", seconds_ago=60, lease_transitions=8, missed=2)
    make_candidate(lease, "master-0-scheduler", renewed_ago=5)
    make_candidate(lease, "gone", deleted_at=NOW)

    response = api.get("/api/v1/leases/prod/kube-system/kube-scheduler")
    body = orjson.loads(response.content)

    assert set(body) == LEASE_KEYS | {"history", "candidates", "availability"}
    assert "X-History-Truncated" not in response
    assert body["history"] == [
        {
            "from_holder": "master-0",
            "to_holder": "master-1",
            "from_identity": "",
            "to_identity": "",
            "fencing_reused": False,
            "observed_at": "2026-11-29T07:50:00Z",
            "lease_transitions": 5,
            "missed": 0,
        },
        {
            "from_holder": "master-1",
            "to_holder": "master-2",
            "from_identity": "",
            "to_identity": "",
            "fencing_reused": False,
            "observed_at": "2026-11-29T07:59:00Z",
            "lease_transitions": 8,
            "missed": 2,
        },
    ]
    assert body["candidates"] == [
        {
            "name": "master-0-scheduler",
            "binary_version": "1.33.1",
            "emulation_version": "1.33",
            "strategy": "OldestEmulationVersion",
            "renew_time": "2026-11-29T07:59:55Z",
            "ping_time": "2026-11-29T07:59:55Z",
        }
    ]


def test_deleted_leases_are_left_out_of_the_list_unless_asked_for(api: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "old-leader", namespace="ops", deleted_at=NOW - timedelta(hours=1))

    assert [r["name"] for r in get(api, "/api/v1/leases")["results"]] == ["kube-scheduler"]
    listed = get(api, "/api/v1/leases?deleted=true")["results"]
    assert [(r["name"], r["deleted"]) for r in listed] == [
        ("kube-scheduler", False),
        ("old-leader", True),
    ]
    assert get(api, "/api/v1/leases/prod/ops/old-leader")["deleted"] is True


def test_following_next_walks_every_lease_once_and_keeps_filters(api: Client) -> None:
    cluster = make_cluster()
    make_many_leases(cluster, 520)
    make_lease(cluster, "kube-scheduler")

    first = get(api, "/api/v1/leases?namespace=kube-node-lease")
    assert len(first["results"]) == 500
    assert first["next"].startswith("http://testserver/api/v1/leases?namespace=kube-node-lease&")
    second = get(api, first["next"])
    assert second["next"] is None
    names = [r["name"] for r in first["results"] + second["results"]]
    assert names == [f"node-{index:04d}" for index in range(520)]


def test_untrusted_text_comes_back_as_plain_strings(api: Client) -> None:
    holder = '<script>alert("holder")</script>'
    make_lease(make_cluster(), "<script>x</script>", namespace="ops", holder=holder)

    (lease,) = get(api, "/api/v1/leases")["results"]

    assert (lease["name"], lease["holder"]) == ("<script>x</script>", holder)


# --- Metrics ---------------------------------------------------------------------------------


def test_metrics_expose_watch_counters_lease_counts_and_leader_leases(client: Client) -> None:
    prod = make_cluster("prod")
    make_cluster("staging", fresh=False)
    make_lease(prod, "kube-scheduler", renewed_ago=5, duration=15, lease_transitions=9)
    make_lease(prod, "op-leader", namespace="ops", renewed_ago=20, duration=15)
    make_lease(prod, "node-1", namespace="kube-node-lease", renewed_ago=3, duration=40)
    make_lease(prod, "node-2", namespace="kube-node-lease", holder="")

    text = client.get("/metrics").content.decode()

    for line in (
        'lease_dashboard_watch_events_total{cluster="prod"} 1000.0',
        'lease_dashboard_watch_reconnects_total{cluster="prod"} 3.0',
        'lease_dashboard_watch_relists_total{cluster="prod"} 1.0',
        'lease_dashboard_watch_lag_seconds{cluster="prod"} 0.25',
        'lease_dashboard_watch_connected{cluster="prod"} 1.0',
        'lease_dashboard_watch_connected{cluster="staging"} 0.0',
        'lease_dashboard_watch_stale{cluster="staging"} 1.0',
        'lease_dashboard_watch_last_event_age_seconds{cluster="prod"} 1.0',
        'lease_dashboard_watch_last_event_age_seconds{cluster="staging"} 70.0',
        # How old each resource's data is: now minus its as-of moment.
        'lease_dashboard_watch_data_age_seconds{cluster="prod",resource="leases"} 1.0',
        'lease_dashboard_watch_data_age_seconds{cluster="staging",resource="nodes"} 70.0',
        'lease_dashboard_leases{class="node_heartbeat",cluster="prod",state="held"} 1.0',
        'lease_dashboard_leases{class="node_heartbeat",cluster="prod",state="released"} 1.0',
        'lease_dashboard_leases{class="leader_election",cluster="prod",state="expired"} 1.0',
        'lease_dashboard_leases{class="control_plane",cluster="staging",state="held"} 0.0',
        'lease_dashboard_lease_seconds_until_expiry{cluster="prod",name="kube-scheduler",'
        'namespace="kube-system"} 10.0',
        'lease_dashboard_lease_seconds_until_expiry{cluster="prod",name="op-leader",'
        'namespace="ops"} -5.0',
        'lease_dashboard_lease_transitions{cluster="prod",name="kube-scheduler",'
        'namespace="kube-system"} 9.0',
        "lease_dashboard_lease_metrics_up 1.0",
    ):
        assert line in text, line
    # Node leases never get a series each: thousands of nodes would mean thousands of series.
    assert 'name="node-1"' not in text
