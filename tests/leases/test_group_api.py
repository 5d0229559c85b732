"""GET /api/v1/leader-groups: leader-k8s slot groups with their slots, a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.test import Client

from dashboard.models import ApiToken
from leases.models import LeaderGroup
from tests.leases.factories import NOW, make_cluster
from tests.leases.group_factories import make_leader_k8s_lease, make_slot, token

pytestmark = pytest.mark.django_db

URL = "/api/v1/leader-groups"


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def api(client: Client, django_user_model) -> Client:  # type: ignore[no-untyped-def]
    """A client that sends a bearer token, as scripts do (no session)."""
    user = django_user_model.objects.create_user("script")
    _, secret = ApiToken.issue(user, name="tests")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    return client


def results(client: Client, query: str = "") -> list[dict[str, Any]]:
    response = client.get(URL + query)
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_leader_groups_need_a_token(client: Client) -> None:
    assert client.get(URL).status_code == 401
    assert client.get(URL, HTTP_AUTHORIZATION="Bearer ldb_wrong").status_code == 401


def test_each_group_lists_its_slots_with_identity_and_token(api: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, seed=5, node_id="pod-a")
    make_slot(cluster, "orders", 3, holder="")
    make_leader_k8s_lease(cluster, "orders-slot-1", holder="pod-x", managed=False)
    [group] = results(api)
    assert {key: group[key] for key in ("cluster", "namespace", "name", "slots_seen")} == {
        "cluster": "prod",
        "namespace": "apps",
        "name": "orders",
        "slots_seen": 2,
    }
    assert (group["held"], group["expected"], group["highest_slot_seen"]) == (1, None, 3)
    assert (group["status"], group["unstaffed"], group["degraded"]) == ("staffed", False, False)
    assert group["url"] == "/leases/clusters/prod/groups/apps/orders/"
    assert group["free"] == [[3, 3]]
    assert group["unseen"] == [[1, 2]]  # the plain lease named like slot 1 is no member
    first, second = group["slots"]
    assert first == {
        "slot": 0,
        "lease": "orders-slot-0",
        "holder": token(5),
        "identity": "pod-a",
        "token": token(5),
        "foreign_writer": False,
        "acquire_time": "2026-11-29T07:54:58Z",
        "renew_time": "2026-11-29T07:59:58Z",
        "expires_at": "2026-11-29T08:00:13Z",
        "state": "held",
        "fencing_reused_at": None,
    }
    assert (second["slot"], second["state"], second["holder"], second["identity"]) == (
        3,
        "free",
        "",
        "",
    )
    assert group["stale"] is False


def test_expected_size_makes_a_group_degraded_and_none_held_unstaffed(api: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    make_slot(cluster, "billing", 0, renewed_ago=60)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=2)
    billing, orders = results(api)
    assert (orders["expected"], orders["held"], orders["status"]) == (2, 1, "degraded")
    assert (orders["degraded"], orders["understaffed"], orders["unseen"]) == (True, True, [[1, 1]])
    assert (billing["status"], billing["unstaffed"], billing["understaffed"]) == (
        "unstaffed",
        True,
        True,
    )


def test_filters_and_stale_clusters(api: Client) -> None:
    make_slot(make_cluster("prod"), "orders", 0)
    make_slot(make_cluster("stage", fresh=False), "orders", 0, namespace="jobs")
    # The stale cluster's group is of unknown staffing: it needs a look, so it comes first.
    assert [group["cluster"] for group in results(api)] == ["stage", "prod"]
    [stage] = results(api, "?cluster=stage")
    assert stage["stale"] is True
    assert results(api, "?namespace=nope") == []
    assert results(api, "?cluster=nope") == []


def test_pages_put_problem_groups_first_and_walk_every_group_once(api: Client) -> None:
    from leases.group_api import API_GROUPS_PAGE_SIZE

    cluster = make_cluster()
    count = API_GROUPS_PAGE_SIZE * 2 + 3
    for number in range(count):
        make_slot(cluster, f"g{number}", 0)
    # Two problem groups, far down the natural order: no slot held, fewer than recorded.
    make_slot(cluster, "z-down", 0, holder="")
    make_slot(cluster, "y-thin", 0)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="y-thin", expected_size=2)
    seen: list[str] = []
    url: str | None = URL
    first = True
    while url is not None:
        response = api.get(url)
        assert response.status_code == 200, response.content
        body = response.json()
        assert (body["total"], body["understaffed"]) == (count + 2, 2)
        assert len(body["results"]) <= API_GROUPS_PAGE_SIZE
        if first:
            # Unstaffed before degraded, both before every staffed group.
            assert [group["name"] for group in body["results"][:3]] == ["z-down", "y-thin", "g0"]
            first = False
        seen += [group["name"] for group in body["results"]]
        url = body["next"]
    assert len(seen) == len(set(seen)) == count + 2
    assert seen[2:] == [f"g{number}" for number in range(count)]  # natural order


def test_a_page_keeps_its_filters_and_refuses_a_bad_cursor(api: Client) -> None:
    from leases.group_api import API_GROUPS_PAGE_SIZE

    cluster = make_cluster()
    for number in range(API_GROUPS_PAGE_SIZE + 1):
        make_slot(cluster, f"g{number}", 0)
        make_slot(cluster, f"g{number}", 0, namespace="other")
    body = api.get(URL + "?namespace=other").json()
    assert "namespace=other" in body["next"]
    rest = api.get(body["next"]).json()
    assert [(group["namespace"], group["name"]) for group in rest["results"]] == [
        ("other", f"g{API_GROUPS_PAGE_SIZE}")
    ]
    assert rest["next"] is None
    refused = api.get(URL + "?after=not-a-cursor")
    assert refused.status_code == 400
    assert "after" in refused.json()["fields"]
