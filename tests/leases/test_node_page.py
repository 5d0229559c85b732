"""The node page: Ready and its history, conditions, taints, heartbeat Lease and NKS nodegroup.

Node rows are written with the ORM, as the Node watch would; node names, reasons and messages
come from the cluster (anyone who may patch a Node's status writes them): they are escaped.
"""

from __future__ import annotations

import html
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.urls import reverse

from leases.models import ConditionStatus, Node, ResourceWatchState
from nks.models import NksCluster
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup
from tests.leases.factories import NOW
from tests.nks.nodes import make_node, set_ready, watched_cluster

pytestmark = pytest.mark.django_db

INSTANCE = "3f1c2b7e-9a4d-4e8b-8f00-0123456789ab"
HOSTILE = '<script>alert("x")</script>'
HTMX = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "node-detail"}


@pytest.fixture
def frozen() -> Any:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def viewer(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    return client


@pytest.fixture
def prod(frozen: Any) -> tuple[NksCluster, Node]:
    """NKS cluster prod (nodegroup pool-a) watched as prod, with Node prod-pool-a-1."""
    cluster = make_nks_cluster(make_account(), "prod")
    make_nodegroup(cluster, "pool-a")
    kube = watched_cluster("prod", now=NOW)
    node = make_node(kube, "prod-pool-a-1", nodegroup="pool-a", instance=INSTANCE, now=NOW)
    return cluster, node


def node_url(cluster: str, name: str) -> str:
    return reverse("leases:node", args=[cluster, name])


def test_the_node_page_shows_ready_heartbeat_nks_place_and_instance(
    prod: tuple[NksCluster, Node], viewer: Client, frozen: Any
) -> None:
    cluster, node = prod
    frozen.shift(timedelta(seconds=5))
    set_ready(node, ConditionStatus.FALSE, "KubeletNotReady", "PLEG is not healthy")
    Node.objects.filter(pk=node.pk).update(
        unschedulable=True,
        taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
    )
    response = viewer.get(node_url("prod", "prod-pool-a-1"))
    assert response.status_code == 200
    text = html.unescape(response.content.decode())
    assert 'data-ready="False"' in text and ">NotReady</span>" in text
    assert "KubeletNotReady" in text and "PLEG is not healthy" in text
    assert ">cordoned</span>" in text and "node.kubernetes.io/not-ready" in text
    assert INSTANCE in text and "v1.29.3" in text and "192.168.0.10" in text
    # Ready history: the change just recorded.
    history = text.split("<h2>Ready history</h2>", 1)[1].split("</section>", 1)[0]
    assert ">True</span>" in history and ">False</span>" in history
    # MemoryPressure False is the good news.
    conditions = text.split("<h2>Other conditions</h2>", 1)[1].split("</section>", 1)[0]
    assert "MemoryPressure" in conditions and "pill-ok" in conditions
    # The heartbeat Lease, and the NKS cluster and nodegroup, are links.
    lease_link = reverse("leases:detail", args=["prod", "kube-node-lease", "prod-pool-a-1"])
    assert f'href="{lease_link}"' in text and 'data-heartbeat="held"' in text
    group_link = reverse("nks:nodegroup", args=[cluster.uuid, "pool-a"])
    assert f'href="{group_link}" data-nodegroup-link' in text
    assert f'href="{reverse("nks:cluster", args=[cluster.uuid])}"' in text


def test_links_go_both_ways_between_node_lease_and_nodegroup(
    prod: tuple[NksCluster, Node], viewer: Client
) -> None:
    cluster, _ = prod
    mine = node_url("prod", "prod-pool-a-1")
    lease_page = viewer.get(
        reverse("leases:detail", args=["prod", "kube-node-lease", "prod-pool-a-1"])
    )
    assert f'href="{mine}" data-node-link' in lease_page.content.decode()
    nodegroup_page = viewer.get(reverse("nks:nodegroup", args=[cluster.uuid, "pool-a"]))
    assert f'href="{mine}"' in nodegroup_page.content.decode()
    other = viewer.get(reverse("leases:detail", args=["prod", "kube-node-lease", "no-such-node"]))
    assert other.status_code == 404


def test_an_htmx_refresh_renders_only_the_region(
    prod: tuple[NksCluster, Node], viewer: Client
) -> None:
    text = viewer.get(node_url("prod", "prod-pool-a-1"), **HTMX).content.decode()
    assert text.lstrip().startswith('<div id="node-detail"') and "<html" not in text


def test_untrusted_node_text_is_escaped(frozen: Any, viewer: Client) -> None:
    kube = watched_cluster("prod", now=NOW)
    node = make_node(
        kube,
        "odd<b>node",
        nodegroup=HOSTILE,
        provider_id=f"openstack:///{HOSTILE}",
        reason=HOSTILE,
        message=HOSTILE,
        now=NOW,
        taints=[{"key": HOSTILE, "value": HOSTILE, "effect": "NoSchedule"}],
        labels={HOSTILE: HOSTILE},
    )
    set_ready(node, ConditionStatus.FALSE, HOSTILE, HOSTILE)
    text = viewer.get(node_url("prod", "odd<b>node")).content.decode()
    assert "<script>" not in text and "<b>node" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    assert "odd&lt;b&gt;node" in text


def test_an_unknown_node_is_404_and_a_deleted_one_says_when(
    prod: tuple[NksCluster, Node], viewer: Client
) -> None:
    assert viewer.get(node_url("prod", "nope")).status_code == 404
    assert viewer.get(node_url("elsewhere", "prod-pool-a-1")).status_code == 404
    Node.objects.update(deleted_at=NOW)
    text = viewer.get(node_url("prod", "prod-pool-a-1")).content.decode()
    assert "This node was deleted from the cluster at 2026-11-29T08:00:00Z" in text


def test_a_node_watch_that_is_not_watching_is_said_in_words(
    prod: tuple[NksCluster, Node], viewer: Client
) -> None:
    from leases.models import KubeCluster

    KubeCluster.objects.update(
        nodes_watch=ResourceWatchState.FORBIDDEN,
        nodes_last_error='nodes is forbidden: User "x" cannot list resource "nodes"',
    )
    text = html.unescape(viewer.get(node_url("prod", "prod-pool-a-1")).content.decode())
    assert "The Node watch of prod is forbidden (RBAC) (nodes is forbidden" in text


def test_ready_from_node_data_the_server_no_longer_confirms_is_unknown_with_the_last_known(
    prod: tuple[NksCluster, Node], viewer: Client, frozen: Any
) -> None:
    from leases.models import KubeCluster

    frozen.shift(timedelta(seconds=40))
    # The Lease data is current; the Node data was last proved at NOW (its stream stuck).
    KubeCluster.objects.update(leases_as_of=NOW + timedelta(seconds=40), nodes_as_of=NOW)
    text = html.unescape(viewer.get(node_url("prod", "prod-pool-a-1")).content.decode())
    assert "The Node data of prod has not been confirmed by its API server for 40 s" in text
    assert "Ready unknown" in text and "last known: True" in text
    assert "NotReady" not in text


def test_a_node_without_the_label_says_its_nodegroup_is_unknown(
    prod: tuple[NksCluster, Node], viewer: Client
) -> None:
    kube = prod[1].cluster
    make_node(kube, "stray", nodegroup=None, provider_id="", now=NOW)
    text = viewer.get(node_url("prod", "stray")).content.decode()
    assert "nodegroup unknown (no magnum.openstack.org/nodegroup label)" in text
    assert "unknown: the node has no providerID" in text
