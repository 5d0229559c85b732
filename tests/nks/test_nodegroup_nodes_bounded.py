"""A large nodegroup's page: its Nodes table shows a bounded page, those needing a look first,
with a link to every node; the resize form lists a bounded number of removable nodes and
accepts every one, typed by name or UUID."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client

from dashboard.natural import natural_key
from fakes.nks import FakeNks
from leases.models import ConditionStatus
from nks.forms import NODES_OFFERED
from nks.models import NksAccount, NksCluster, ResizeRequest
from nks.presenters.nodegroup_detail import NODES_SHOWN
from tests.nks.nodes import make_node, nodes_like_the_fake

pytestmark = pytest.mark.django_db

EXTRA = NODES_SHOWN + 5


def nodes_card(text: str) -> str:
    return text.split('<section class="card" id="nodes">', 1)[1].split("</section>", 1)[0]


def table_nodes(text: str) -> list[str]:
    return re.findall(r'<tr class="[^"]*" data-node="([^"]+)"', nodes_card(text))


def choices(text: str) -> list[str]:
    return re.findall(r'<input type="checkbox" name="nodes_to_remove" value="([^"]+)"', text)


@pytest.fixture
def big_nodegroup(polled: NksAccount, fake_nks: FakeNks) -> tuple[str, int, str]:
    """default-worker of prod-api with EXTRA more Nodes; one NotReady node named last.
    Returns the page's URL, how many member Nodes it has, and the NotReady node's name."""
    kube, made = nodes_like_the_fake(fake_nks, "prod-api")
    members = sum(1 for node in made.values() if node.nodegroup_label == "default-worker")
    for index in range(EXTRA):
        make_node(
            kube,
            f"zz-worker-{index:03d}",
            nodegroup="default-worker",
            instance=str(uuid.UUID(int=index + 1)),
            ready=ConditionStatus.FALSE if index == EXTRA - 1 else ConditionStatus.TRUE,
        )
    cluster = NksCluster.objects.get(name="prod-api")
    url = f"/clusters/{cluster.uuid}/nodegroups/default-worker/"
    return url, members + EXTRA, f"zz-worker-{EXTRA - 1:03d}"


def test_the_table_shows_a_page_troubled_first_and_links_to_every_node(
    big_nodegroup: tuple[str, int, str], operator_client: Client
) -> None:
    url, total, sick = big_nodegroup
    text = operator_client.get(url).content.decode()
    shown = table_nodes(text)
    assert len(shown) == NODES_SHOWN
    # The NotReady node sorts last by name but is shown first.
    assert shown[0] == sick
    card = " ".join(nodes_card(text).split())
    more = total - NODES_SHOWN
    assert f"Those needing a look first, {NODES_SHOWN} shown:" in card
    assert f'<a href="{url}?nodes=all#nodes">show {more} more</a>' in card
    # The form lists as many removable nodes, best candidates first (the NotReady one
    # ticked), and says how many more can be typed in.
    offered = choices(text)
    assert len(offered) == NODES_OFFERED and offered[0] == str(uuid.UUID(int=EXTRA))
    assert f'data-nodes-unlisted="{total - NODES_OFFERED}"' in text
    assert f"({total - NODES_OFFERED} more can be removed than the list shows)" in text
    assert 'name="nodes_to_remove_more"' in text

    every = operator_client.get(f"{url}?nodes=all").content.decode()
    listed = table_nodes(every)
    assert len(listed) == total and len(set(listed)) == total
    # All of them: natural order again, and the region's refresh keeps showing all.
    assert listed.index("zz-worker-002") < listed.index("zz-worker-010")
    assert "data-nodes-more" not in every
    assert f'hx-get="{url}?nodes=all"' in every
    region = operator_client.get(
        f"{url}?nodes=all", headers={"HX-Request": "true", "HX-Target": "nks-nodegroup"}
    ).content.decode()
    assert len(table_nodes(region)) == total


def test_a_node_beyond_the_table_can_still_be_named_for_removal(
    big_nodegroup: tuple[str, int, str], operator_client: Client
) -> None:
    url, _, _ = big_nodegroup
    text = operator_client.get(url).content.decode()
    hidden, instance = f"zz-worker-{EXTRA - 2:03d}", str(uuid.UUID(int=EXTRA - 1))
    assert hidden not in table_nodes(text)
    assert instance not in choices(text)
    # A name that is no node of the nodegroup is refused, with the reason on the page, and
    # is typed in again as it was (no checkbox shows it).
    refused = operator_client.post(
        f"{url}resize/",
        {
            "node_count": "2",
            "nodes_to_remove_more": "no-such-node",
            "reason": "typo",
            "confirm_name": "default-worker",
        },
        follow=True,
    )
    assert not ResizeRequest.objects.exists()
    page = refused.content.decode()
    assert "no-such-node is not a node of nodegroup default-worker" in page
    assert 'name="nodes_to_remove_more" value="no-such-node"' in page
    # Typed by name, a node the list does not show is removed by its instance UUID; one
    # named twice (by name and ticked UUID) is refused as the checkboxes alone would be.
    twice = operator_client.post(
        f"{url}resize/",
        {
            "node_count": "2",
            "nodes_to_remove": [str(uuid.UUID(int=EXTRA))],
            "nodes_to_remove_more": f"zz-worker-{EXTRA - 1:03d}",
            "reason": "the same node twice",
            "confirm_name": "default-worker",
        },
        follow=True,
    )
    assert "is chosen more than once" in twice.content.decode()
    assert not ResizeRequest.objects.exists()
    response = operator_client.post(
        f"{url}resize/",
        {
            "node_count": "2",
            "nodes_to_remove_more": f" {hidden}, ",
            "reason": "a node the table does not show",
            "confirm_name": "default-worker",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ResizeRequest.objects.get().nodes_to_remove == [instance]


def test_a_small_nodegroup_lists_every_node_in_natural_order_without_a_link(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    kube, _ = nodes_like_the_fake(fake_nks, "prod-api")
    make_node(kube, "zz-worker-10", nodegroup="default-worker", ready=ConditionStatus.FALSE)
    cluster = NksCluster.objects.get(name="prod-api")
    text = operator_client.get(f"/clusters/{cluster.uuid}/nodegroups/default-worker/")
    shown = table_nodes(text.content.decode())
    # Every node, the NotReady one in its place by name (worker-2 before worker-10).
    assert shown == sorted(shown, key=natural_key) and "zz-worker-10" in shown
    assert "data-nodes-more" not in text.content.decode()
