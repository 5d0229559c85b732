"""The nodegroup and cluster pages: the cluster's own Nodes, and NKS's counts beside them."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from fakes.nks import FakeNks
from leases.models import ConditionStatus, KubeCluster, Node, ResourceWatchState
from nks.models import NksAccount, NksCluster
from tests.nks.nodes import nodes_like_the_fake, set_ready

pytestmark = pytest.mark.django_db

HOSTILE = '<img src=x onerror="alert(1)">'


def node_name(fake: FakeNks, index: int) -> str:
    """The name of prod-api's default-worker node `index` in the fake NKS."""
    with fake.state.lock:
        return fake.state.find_cluster("prod-api").nodegroups[0].nodes[index].name


def cluster_url() -> str:
    return f"/clusters/{NksCluster.objects.get(name='prod-api').uuid}/"


def test_a_missing_node_is_said_in_words_on_the_nodegroup_and_cluster_pages(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    _, nodes = nodes_like_the_fake(fake_nks, "prod-api")
    Node.objects.filter(pk=nodes[node_name(fake_nks, 2)].pk).delete()
    expected = (
        "NKS says 3 nodes in default-worker; the cluster has 2 Node objects labelled with it."
    )
    for url in (f"{cluster_url()}nodegroups/default-worker/", cluster_url()):
        text = html.unescape(operator_client.get(url).content.decode())
        assert expected in text, url
        assert "NKS counts 3:0 ready:not ready in default-worker; the cluster's Nodes say 2:0." in (
            text
        )
    cluster_page = html.unescape(operator_client.get(cluster_url()).content.decode())
    batch = cluster_page.split('data-cross-check="batch-worker"', 1)[1].split("</div>", 1)[0]
    assert "NKS and the cluster agree." in batch


def test_no_verdict_while_the_node_watch_is_not_watching(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    nodes_like_the_fake(fake_nks, "prod-api")
    Node.objects.filter(name=node_name(fake_nks, 2)).delete()
    KubeCluster.objects.update(nodes_watch=ResourceWatchState.FORBIDDEN)
    text = html.unescape(
        operator_client.get(f"{cluster_url()}nodegroups/default-worker/").content.decode()
    )
    assert "No verdict: The Node watch of prod-api is forbidden (RBAC)." in text
    assert "NKS says 3 nodes" not in text


def test_node_reasons_and_messages_are_escaped_on_the_nodegroup_page(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    _, nodes = nodes_like_the_fake(fake_nks, "prod-api")
    sick = node_name(fake_nks, 1)
    set_ready(nodes[sick], ConditionStatus.FALSE, HOSTILE, HOSTILE)
    text = operator_client.get(f"{cluster_url()}nodegroups/default-worker/").content.decode()
    assert HOSTILE not in text
    escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
    row = text.split(f'data-node="{sick}"', 1)[1].split("</tr>", 1)[0]
    assert f'title="{escaped}"' in row and f">{escaped}</span>" in row
    assert f"{sick} (NotReady: {escaped})" in text, "the form's label too"
