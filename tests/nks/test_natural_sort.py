"""NKS's lists of names in natural order (worker-2 before worker-10): a nodegroup's nodes,
and the node heartbeat Leases on its cluster's page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from fakes.nks import FakeNks
from nks.models import NksAccount, NksCluster
from tests.nks.nodes import make_node, nodes_like_the_fake

pytestmark = pytest.mark.django_db


def test_nodegroup_nodes_and_node_leases_are_in_natural_order(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    kube, _ = nodes_like_the_fake(fake_nks, "prod-api")
    for name in ("zz-worker-10", "zz-worker-2", "zz-worker-1"):
        make_node(kube, name, nodegroup="default-worker")
    cluster = NksCluster.objects.get(name="prod-api")
    expected = ["zz-worker-1", "zz-worker-2", "zz-worker-10"]

    def order(text: str) -> list[str]:
        found = re.findall(r">(zz-worker-\d+)<", text)
        return list(dict.fromkeys(found))

    nodegroup = operator_client.get(f"/clusters/{cluster.uuid}/nodegroups/default-worker/")
    assert order(nodegroup.content.decode()) == expected
    cluster_page = operator_client.get(f"/clusters/{cluster.uuid}/")
    assert order(cluster_page.content.decode()) == expected
