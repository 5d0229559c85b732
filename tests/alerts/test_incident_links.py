"""Incidents link to what they are about (Lease, nodes, NKS cluster, nodegroup, Lease source)
while it exists, worked out from the rule, key, cluster and items at display time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from alerts.models import Incident, Rule, Severity
from alerts.presenters.incident_links import incident_links, node_url
from leases.models import Node
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_account, make_incident, make_nks_cluster, make_nodegroup
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("erin", email="erin@example.org")


@pytest.fixture
def client_in(client: Client, engineer: Any) -> Client:
    client.force_login(engineer)
    return client


def kinds(incident: Incident) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for link in incident_links([incident])[incident.pk]:
        out.setdefault(link.kind, []).append((link.name, link.url))
    return out


def test_a_lease_incident_links_to_its_lease_and_its_source(clock: Clock) -> None:
    prod = make_cluster("prod")
    make_lease(prod, "kube-scheduler")
    incident = make_incident()  # lease_expired:prod/kube-system/kube-scheduler
    assert kinds(incident) == {
        "lease": [("kube-system/kube-scheduler", "/leases/prod/kube-system/kube-scheduler/")],
        "source": [("prod", "/leases/clusters/#watchers")],
    }


@pytest.mark.parametrize("rule", [Rule.LEASE_FLAPPING, Rule.FENCING_TOKEN_REUSED])
def test_other_lease_rules_link_to_their_lease(clock: Clock, rule: str) -> None:
    make_lease(make_cluster("prod"), "leader", namespace="ops")
    incident = make_incident(f"{rule}:prod/ops/leader", rule=rule)
    assert kinds(incident)["lease"] == [("ops/leader", "/leases/prod/ops/leader/")]


def test_no_link_to_a_deleted_lease_or_node_nor_to_a_removed_source(clock: Clock) -> None:
    prod = make_cluster("prod")
    make_lease(prod, "kube-scheduler", deleted_at=NOW - timedelta(minutes=1))
    Node.objects.create(cluster=prod, name="gone", deleted_at=NOW - timedelta(minutes=1))
    lease = make_incident()
    nodes = make_incident(
        "node_heartbeats_expired:prod",
        rule=Rule.NODE_HEARTBEATS_EXPIRED,
        details={"items": ["gone", "never-seen"]},
    )
    assert "lease" not in kinds(lease)
    assert "node" not in kinds(nodes)

    prod.delete()
    assert kinds(lease) == {} and kinds(nodes) == {}


def test_a_node_heartbeat_incident_links_each_node_that_exists(
    clock: Clock, client_in: Client
) -> None:
    prod = make_cluster("prod")
    for name in ("node-a", "node-b"):
        Node.objects.create(cluster=prod, name=name)
    incident = make_incident(
        "node_heartbeats_expired:prod",
        rule=Rule.NODE_HEARTBEATS_EXPIRED,
        title="3 nodes stopped heart-beating",
        details={"items": ["node-a", "node-b", "node-c"], "items_total": 3},
    )
    assert kinds(incident)["node"] == [
        ("node-a", "/leases/clusters/prod/nodes/node-a/"),
        ("node-b", "/leases/clusters/prod/nodes/node-b/"),
    ]

    html = client_in.get(f"/alerts/{incident.pk}/").content.decode()
    assert '<li><a href="/leases/clusters/prod/nodes/node-a/">node-a</a></li>' in html
    assert "<li>node-c</li>" in html, "a node the watcher never saw stays plain text"
    listed = client_in.get("/alerts/").content.decode()
    assert 'data-link-kind="node">node-a</a>' in listed


def test_nks_incidents_link_to_the_cluster_and_the_nodegroup(clock: Clock) -> None:
    cluster = make_nks_cluster(make_account("kr1"), "shop", uuid="c-uuid-1")
    make_nodegroup(cluster, "workers")
    unhealthy = make_incident(
        "cluster_unhealthy:kr1/shop", rule=Rule.CLUSTER_UNHEALTHY, cluster="shop"
    )
    failed = make_incident(
        "resize_failed:kr1/shop/workers", rule=Rule.RESIZE_FAILED, cluster="shop"
    )
    stale = make_incident("source_stale:nks-cluster:kr1/shop", rule=Rule.SOURCE_STALE, cluster="")

    assert kinds(unhealthy) == {"nks_cluster": [("shop", "/clusters/c-uuid-1/")]}
    assert kinds(failed) == {
        "nks_cluster": [("shop", "/clusters/c-uuid-1/")],
        "nodegroup": [("workers", "/clusters/c-uuid-1/nodegroups/workers/")],
    }
    assert kinds(stale) == {"nks_cluster": [("shop", "/clusters/c-uuid-1/")]}


def test_a_nodegroup_incident_links_its_not_ready_nodes_in_the_kube_cluster(clock: Clock) -> None:
    kube = make_cluster("prod")
    Node.objects.create(cluster=kube, name="workers-node-1")
    cluster = make_nks_cluster(make_account("kr1"), "shop", uuid="c-uuid-2")
    make_nodegroup(cluster, "workers")
    incident = make_incident(
        "nodegroup_not_ready:kr1/shop/workers",
        rule=Rule.NODEGROUP_NOT_READY,
        cluster="prod",  # grouped under the linked Lease source's name
        details={"items": ["workers-node-1"]},
    )
    found = kinds(incident)
    assert found["nodegroup"] == [("workers", "/clusters/c-uuid-2/nodegroups/workers/")]
    assert found["node"] == [("workers-node-1", "/leases/clusters/prod/nodes/workers-node-1/")]
    assert found["source"] == [("prod", "/leases/clusters/#watchers")]


def test_no_link_to_a_gone_nodegroup_or_a_deleted_nks_cluster(clock: Clock) -> None:
    cluster = make_nks_cluster(make_account("kr1"), "shop")
    make_nodegroup(cluster, "workers", gone_at=NOW)
    incident = make_incident(
        "nodegroup_mismatch:kr1/shop/workers", rule=Rule.NODEGROUP_MISMATCH, cluster="shop"
    )
    assert "nodegroup" not in kinds(incident)
    cluster.delete()
    assert kinds(incident) == {}


def test_a_stale_watcher_links_to_the_lease_sources(clock: Clock) -> None:
    make_cluster("dev")
    incident = make_incident("source_stale:watch:dev", rule=Rule.SOURCE_STALE, cluster="dev")
    assert kinds(incident) == {"source": [("dev", "/leases/clusters/#watchers")]}


def test_links_for_a_page_of_incidents_take_one_query_per_kind(clock: Clock) -> None:
    prod = make_cluster("prod")
    nks = make_nks_cluster(make_account("kr1"), "shop")
    incidents = []
    for n in range(10):
        make_lease(prod, f"lease-{n}")
        Node.objects.create(cluster=prod, name=f"node-{n}")
        make_nodegroup(nks, f"group-{n}")
        incidents += [
            make_incident(f"lease_expired:prod/kube-system/lease-{n}"),
            make_incident(
                f"node_heartbeats_expired:prod{n}",
                rule=Rule.NODE_HEARTBEATS_EXPIRED,
                details={"items": [f"node-{n}"]},
            ),
            make_incident(
                f"resize_failed:kr1/shop/group-{n}", rule=Rule.RESIZE_FAILED, cluster="shop"
            ),
        ]
    with CaptureQueriesContext(connection) as queries:
        links = incident_links(incidents)
    assert sum(len(found) for found in links.values()) == 10 * (2 + 2 + 2)
    assert len(queries) == 5  # leases, NKS clusters, nodegroups, nodes, Lease sources


def test_the_list_draws_links_in_one_query_per_kind_whatever_the_rows(
    clock: Clock, client_in: Client
) -> None:
    prod = make_cluster("prod")

    def queries_for_rows(count: int) -> int:
        for n in range(count):
            make_lease(prod, f"l-{count}-{n}")
            make_incident(
                f"lease_expired:prod/kube-system/l-{count}-{n}", severity=Severity.WARNING
            )
        with CaptureQueriesContext(connection) as queries:
            assert client_in.get("/alerts/").status_code == 200
        Incident.objects.all().delete()
        return len(queries)

    assert queries_for_rows(2) == queries_for_rows(12)


def test_node_urls_agree_with_reverse() -> None:
    assert node_url(reverse("leases:clusters"), "prod", "node-a") == reverse(
        "leases:node", args=["prod", "node-a"]
    )


def test_hostile_names_are_escaped_in_links(clock: Clock, client_in: Client) -> None:
    prod = make_cluster("prod")
    hostile = '"><script>alert(1)</script>'
    make_lease(prod, hostile, namespace="ops")
    Node.objects.create(cluster=prod, name=hostile)
    lease = make_incident(f"lease_expired:prod/ops/{hostile}", title="a lease expired")
    nodes = make_incident(
        "node_heartbeats_expired:prod",
        rule=Rule.NODE_HEARTBEATS_EXPIRED,
        title="nodes",
        details={"items": [hostile]},
    )
    for url in ("/alerts/", f"/alerts/{lease.pk}/", f"/alerts/{nodes.pk}/"):
        html = client_in.get(url).content.decode()
        assert "<script>alert(1)</script>" not in html, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url
    html = client_in.get(f"/alerts/{lease.pk}/").content.decode()
    assert 'href="/leases/prod/ops/%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E/"' in html
