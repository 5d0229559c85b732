"""Every region of the Leases pages, the lease page, the groups pages and the API's first
pages costs the same number of queries at 20 leases as at 200 (issue 22: flat cost where a
person waits): nothing is read per lease, per row or per cluster's lease."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlencode

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.models import ApiToken
from dashboard.natural import natural_key
from leases.cursors import SORT_KEYS, encode_cursor
from leases.models import KubeCluster, Lease
from leases.queries import Problem
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition
from tests.leases.group_factories import make_slot

pytestmark = pytest.mark.django_db

HX_TABLE = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}
FILTERED = "cluster=alpha&class=node_heartbeat&state=held"


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def problems_and_groups(alpha: KubeCluster) -> None:
    """What both sizes share: one lease of each problem, a slot group, a lease with history."""
    make_lease(alpha, "gone-quiet", namespace="ops", renewed_ago=100, duration=15)
    make_lease(alpha, "fenced", namespace="ops", fencing_reused_at=NOW - timedelta(hours=1))
    flappy = make_lease(alpha, "flappy", namespace="ops", name_key=natural_key("flappy"))
    for seconds_ago in (300, 200, 100):
        make_transition(flappy, "a", "b", seconds_ago=seconds_ago)
    make_lease(alpha, "soon", namespace="ops", renewed_ago=6, duration=15)
    for slot in range(3):
        make_slot(alpha, "orders", slot)


def add_leases(clusters: list[KubeCluster], start: int, stop: int) -> None:
    """Node leases, some election leases with holder changes, and a few problems, spread
    over the clusters: what grows from one size to the other."""
    for index in range(start, stop):
        cluster = clusters[index % len(clusters)]
        if index % 10 == 0:
            lease = make_lease(cluster, f"controller-{index:04d}", namespace="apps")
            make_transition(lease, "pod-a", "pod-b", seconds_ago=600 + index)
        elif index % 25 == 0:
            make_lease(cluster, f"node-{index:04d}", namespace="kube-node-lease", renewed_ago=60)
        else:
            make_lease(cluster, f"node-{index:04d}", namespace="kube-node-lease", duration=3600)
        if index % 40 == 0:
            make_slot(cluster, f"group-{index:04d}", 0)


def urls(alpha: KubeCluster) -> dict[str, tuple[str, dict[str, str]]]:
    """Each region and page to count, as (path, headers); the second table page starts
    after a flapping lease, so it holds the last problems and the first of the rest."""
    flappy = Lease.objects.get(cluster=alpha, name="flappy")
    values = [Problem.FLAPPING, flappy.name_key, "flappy", "ops", alpha.id]
    after = urlencode({"after": encode_cursor(values, flappy.id, SORT_KEYS["problems"])})
    return {
        "leases page": ("/leases/", {}),
        "lease table": ("/leases/", HX_TABLE),
        "lease table, filtered": (f"/leases/?{FILTERED}", HX_TABLE),
        "lease table, page 2": (f"/leases/?{after}", HX_TABLE),
        "lease table, descending": ("/leases/?sort=-problems", HX_TABLE),
        "lease page": ("/leases/alpha/ops/flappy/", {}),
        "lease page region": (
            "/leases/alpha/ops/flappy/",
            {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-detail"},
        ),
        "groups page": ("/leases/groups/", {}),
        "groups region": (
            "/leases/groups/",
            {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "groups"},
        ),
        "group page": ("/leases/clusters/alpha/groups/apps/orders/", {}),
        "group region": (
            "/leases/clusters/alpha/groups/apps/orders/",
            {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "group-detail"},
        ),
    }


API_URLS = {
    "api leases": "/api/v1/leases",
    "api leases, problems first": "/api/v1/leases?sort=problems",
    "api leases, filtered": f"/api/v1/leases?{FILTERED}",
    "api lease": "/api/v1/leases/alpha/ops/flappy",
    "api leader groups": "/api/v1/leader-groups",
}


def counted(client: Client, api: Client, alpha: KubeCluster) -> dict[str, int]:
    counts = {}
    for name, (path, headers) in urls(alpha).items():
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path, **headers)
        assert response.status_code == 200, (name, response.status_code)
        counts[name] = len(queries)
    for name, path in API_URLS.items():
        with CaptureQueriesContext(connection) as queries:
            response = api.get(path)
        assert response.status_code == 200, (name, response.content[:200])
        counts[name] = len(queries)
    return counts


def test_every_region_costs_as_many_queries_at_200_leases_as_at_20(
    engineer_client: Client, client: Client, django_user_model, settings
) -> None:  # type: ignore[no-untyped-def]
    # Uncached: every request renders (the shared cache would hide what a render costs).
    settings.LEASE_TABLE_CACHE_SECONDS = 0
    api = Client()
    _, token = ApiToken.issue(django_user_model.objects.create_user("script"), name="tests")
    api.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    # A token's first use records it (then at most once a while): not part of a page's cost.
    api.get("/api/v1/leader-groups")
    clusters = [make_cluster("alpha"), make_cluster("beta")]
    problems_and_groups(clusters[0])
    add_leases(clusters, 0, 20)
    small = counted(engineer_client, api, clusters[0])
    add_leases(clusters, 20, 200)
    large = counted(engineer_client, api, clusters[0])
    assert large == small
