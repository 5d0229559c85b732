"""The benchmark fleet's fake clusters (fakes/kube/fleet.py): every lease it is asked for is
stored under its own name, with the Nodes and the kinds of election bench/fleet.py measures,
at the 2,000 and the 100,000 leases shapes."""

from __future__ import annotations

import http.client

import orjson

from fakes.kube.fleet import (
    CONTROL_PLANE,
    ClusterShape,
    fill_cluster,
    fleet_shapes,
    split_evenly,
)
from fakes.kube.node_scenarios import NODE_LEASE_NAMESPACE
from fakes.kube.resources import LEASES, NODES
from fakes.kube.server import FakeApiServer
from fakes.kube.store import ObjectStore

T0 = 1_800_000_000.0


def test_split_evenly_spreads_the_remainder_over_the_first_parts() -> None:
    assert split_evenly(2_003, 50)[:4] == [41, 41, 41, 40]
    assert sum(split_evenly(2_003, 50)) == 2_003


def test_a_small_fleet_still_has_every_kind_of_election() -> None:
    shapes = fleet_shapes(50, 2_000, 400)
    assert sum(shape.leases for shape in shapes) == 2_000
    names: list[str] = []
    for index, shape in enumerate(shapes):
        store = ObjectStore()
        fill_cluster(store, shape, index, T0)
        assert store.count(LEASES) == shape.leases  # no two leases share a name
        assert store.count(NODES) == shape.nodes
        names += [
            lease["metadata"]["name"]
            for lease in store.list_leases()
            if lease["metadata"]["namespace"] != NODE_LEASE_NAMESPACE
        ]
    assert set(CONTROL_PLANE) <= set(names)
    assert any("-slot-" in name for name in names)
    assert any(name.endswith("-leader-election") for name in names)


def test_a_full_cluster_is_served_over_http_with_its_nodes() -> None:
    """One of the 100,000 leases fleet's 50 clusters: 2,000 leases, 400 of them with Nodes."""
    shape = ClusterShape("fleet-07", 2_000, 400)
    store = ObjectStore()
    fill_cluster(store, shape, 7, T0)
    assert store.count(LEASES) == 2_000
    with FakeApiServer(store=store, token="t", candidate_versions=()) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.request(
            "GET",
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
            headers={"Authorization": "Bearer t"},
        )
        response = connection.getresponse()
        body = orjson.loads(response.read())
        connection.request("GET", "/api/v1/nodes?limit=500", headers={"Authorization": "Bearer t"})
        nodes = orjson.loads(connection.getresponse().read())
        connection.close()
    assert response.status == 200
    assert {item["metadata"]["name"] for item in body["items"]} == set(CONTROL_PLANE)
    assert len(nodes["items"]) == 400
    provider_ids = {item["spec"]["providerID"] for item in nodes["items"]}
    assert len(provider_ids) == 400
    assert all(provider.startswith("openstack:///") for provider in provider_ids)
