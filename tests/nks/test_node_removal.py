"""Removing the right nodes: the scale-in form and the API name the cluster's own Nodes.

Over real HTTP to the fake NKS (what it received is checked); the watched cluster's Node rows
and heartbeat Leases are written with the ORM, as the Node watch would.
"""

from __future__ import annotations

import html
import re
from typing import Any

import orjson
import pytest
from django.test import Client
from django.utils import timezone

from dashboard.models import ApiToken
from fakes.nks import FakeNks
from leases.models import ConditionStatus, Lease, Node
from nks.models import NksAccount, NksNodegroup, ResizeRequest, ResizeState
from nks.resize_progress import follow_resize
from nks.resizes import submit_resize
from tests.nks.nodes import heartbeat, make_node, nodes_like_the_fake, set_ready
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db

RESIZE_POSTS = r"/v1/clusters/[^/]+/actions/resize"


def default_worker() -> NksNodegroup:
    return NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )


def page_url(query: str = "") -> str:
    group = default_worker()
    return f"/clusters/{group.cluster.uuid}/nodegroups/{group.name}/{query}"


def fake_nodes(fake: FakeNks) -> list[tuple[str, str]]:
    """(name, instance uuid) of prod-api's default-worker nodes in the fake NKS."""
    with fake.state.lock:
        group = fake.state.find_cluster("prod-api").nodegroups[0]
        return [(node.name, node.uuid) for node in group.nodes]


def ticked(text: str) -> list[str]:
    found = re.findall(
        r'<input type="checkbox" name="nodes_to_remove" value="([^"]+)"([^>]*)>', text
    )
    return [value for value, rest in found if "checked" in rest]


def choices(text: str) -> list[str]:
    return re.findall(r'<input type="checkbox" name="nodes_to_remove" value="([^"]+)"', text)


@pytest.fixture
def troubled(polled: NksAccount, fake_nks: FakeNks) -> list[tuple[str, str]]:
    """prod-api watched; node 0 cordoned, node 1 silent (Lease expired), node 2 NotReady."""
    kube, nodes = nodes_like_the_fake(fake_nks, "prod-api")
    (name0, _), (name1, _), (name2, _) = fake_nodes(fake_nks)
    Node.objects.filter(pk=nodes[name0].pk).update(unschedulable=True)
    heartbeat(kube, name1, renewed_ago=300)
    set_ready(nodes[name2], ConditionStatus.FALSE, "KubeletNotReady", "PLEG is not healthy")
    return fake_nodes(fake_nks)


def test_the_form_offers_notready_then_silent_then_cordoned_and_ticks_as_many_as_removed(
    troubled: list[tuple[str, str]], operator_client: Client
) -> None:
    (name0, uuid0), (name1, uuid1), (name2, uuid2) = troubled
    text = operator_client.get(page_url()).content.decode()
    assert choices(text) == [uuid2, uuid1, uuid0], "NotReady, then silent, then cordoned"
    assert ticked(text) == [uuid2, uuid1, uuid0], "no target yet: every troubled node"
    labels = html.unescape(text)
    assert f"{name2} (NotReady: KubeletNotReady) · {uuid2}" in labels
    assert f"{name1} (heartbeat lease expired) · {uuid1}" in labels
    assert f"{name0} (cordoned) · {uuid0}" in labels

    # ?node_count=2 (the pre-select form, or a link) removes one node: the NotReady one alone
    # is ticked.
    assert "data-preselect" in text and 'name="node_count" min="1" max="10"' in text
    text = operator_client.get(page_url("?node_count=2")).content.decode()
    assert ticked(text) == [uuid2]
    assert 'name="node_count" value="2"' in text
    text = operator_client.get(page_url("?node_count=1")).content.decode()
    assert ticked(text) == [uuid2, uuid1]


def test_the_chosen_nodes_instance_uuids_reach_nks(
    troubled: list[tuple[str, str]],
    operator_client: Client,
    fake_nks: FakeNks,
) -> None:
    (_, _), (_, uuid1), (_, uuid2) = troubled
    response = operator_client.post(
        page_url("resize/"),
        {
            "node_count": "1",
            "nodes_to_remove": [uuid2, uuid1],
            "reason": "a sick node and a silent one",
            "confirm_name": "default-worker",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    request = ResizeRequest.objects.get()
    assert request.nodes_to_remove == [uuid2, uuid1]
    assert submit_resize(request.pk) == ResizeState.SUBMITTED
    posts = fake_nks.requests_seen(RESIZE_POSTS, method="POST")
    assert len(posts) == 1
    assert posts[0].body == {
        "nodegroup": default_worker().uuid,
        "node_count": 1,
        "nodes_to_remove": [uuid2, uuid1],
    }


def test_a_node_without_the_label_or_a_providerid_is_never_offered(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    kube, _ = nodes_like_the_fake(fake_nks, "prod-api")
    make_node(kube, "stray-node", nodegroup=None, instance="0b7c1e52-1111-4222-8333-444455556666")
    make_node(kube, "prod-api-default-worker-node-9", provider_id="kind://docker/kind/node-9")
    make_node(kube, "bare-node", provider_id="", ready=ConditionStatus.FALSE)
    text = operator_client.get(page_url()).content.decode()
    offered_uuids = choices(text)
    assert len(offered_uuids) == 3 and "0b7c1e52-1111-4222-8333-444455556666" not in offered_uuids
    readable = html.unescape(text)
    assert (
        "prod-api-default-worker-node-9 cannot be chosen: providerID 'kind://docker/kind/node-9'"
        in (readable)
    )
    assert "bare-node cannot be chosen: the node has no providerID." in readable
    unknown = readable.split("<h3>Nodegroup unknown</h3>", 1)[1].split("</table>", 1)[0]
    assert 'data-node="stray-node"' in unknown

    # Named anyway (a crafted POST, or the API): refused with the reason.
    response = operator_client.post(
        page_url("resize/"),
        {
            "node_count": "1",
            "nodes_to_remove": ["stray-node", "bare-node"],
            "reason": "x",
            "confirm_name": "default-worker",
        },
        follow=True,
    )
    assert_refused_back_on_the_page(response)
    errors = html.unescape(response.content.decode())
    assert (
        "stray-node cannot be chosen: it has no magnum.openstack.org/nodegroup label, so its "
        "nodegroup is unknown." in errors
    )
    assert "bare-node cannot be chosen: the node has no providerID." in errors
    assert not ResizeRequest.objects.exists()


def test_an_unwatched_cluster_lets_nks_pick_and_offers_to_watch_it(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    text = html.unescape(operator_client.get(page_url()).content.decode())
    assert "This cluster is not watched, so no node can be chosen: when scaling in, NKS will " in (
        text
    )
    assert "pick the nodes it removes." in text
    assert "Watch this cluster's Leases and Nodes" in text
    assert choices(text) == []
    response = operator_client.post(
        page_url("resize/"),
        {"node_count": "2", "reason": "cost", "confirm_name": "default-worker"},
    )
    assert response.status_code == 302
    submit_resize(ResizeRequest.objects.get().pk)
    body = fake_nks.requests_seen(RESIZE_POSTS, method="POST")[0].body
    assert "nodes_to_remove" not in body and body["node_count"] == 2

    # Naming a node anyway (a crafted POST, or the API) says why none can be named.
    refused = operator_client.post(
        page_url("resize/"),
        {
            "node_count": "1",
            "nodes_to_remove": ["some-node"],
            "reason": "cost",
            "confirm_name": "default-worker",
        },
        follow=True,
    )
    assert_refused_back_on_the_page(refused)
    assert "The cluster is not watched, so its nodes are unknown and none can be named" in (
        html.unescape(refused.content.decode())
    )

    # The one click, from the nodegroup page, comes back to it.
    group = default_worker()
    response = operator_client.post(
        f"/clusters/{group.cluster.uuid}/watch-leases/", {"next": page_url()}
    )
    assert response.status_code == 302 and response["Location"] == page_url()
    response = operator_client.post(
        f"/clusters/{group.cluster.uuid}/watch-leases/", {"next": "https://evil.example/"}
    )
    assert response["Location"] == f"/clusters/{group.cluster.uuid}/"


def test_the_api_takes_node_names_or_uuids_and_sends_uuids(
    troubled: list[tuple[str, str]], operator: Any, fake_nks: FakeNks
) -> None:
    (_, _), (name1, uuid1), (_, uuid2) = troubled
    _, token = ApiToken.issue(operator, name="tests", scope=ApiToken.Scope.WRITE)
    api = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    group = default_worker()
    path = f"/api/v1/nks/clusters/{group.cluster.uuid}/nodegroups/{group.name}/resize"

    # A node's name and its own UUID are one node twice.
    refused = api.post(
        path,
        orjson.dumps({"node_count": 1, "nodes_to_remove": [name1, uuid1], "reason": "x"}),
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert "chosen more than once" in orjson.loads(refused.content)["fields"]["nodes_to_remove"][0]

    answer = api.post(
        path,
        orjson.dumps({"node_count": 1, "nodes_to_remove": [uuid2, name1], "reason": "x"}),
        content_type="application/json",
    )
    assert answer.status_code == 202, answer.content
    body = orjson.loads(answer.content)
    assert body["nodes_to_remove"] == [uuid2, uuid1]
    submit_resize(body["id"])
    sent = fake_nks.requests_seen(RESIZE_POSTS, method="POST")[0].body
    assert sent["nodes_to_remove"] == [uuid2, uuid1]


def test_the_resize_page_confirms_each_removed_node_deleted_from_the_cluster(
    troubled: list[tuple[str, str]], operator: Any, fake_nks: FakeNks, client: Client
) -> None:
    from nks.resizes import request_resize

    (_, _), (_, _), (name2, uuid2) = troubled
    request = request_resize(
        user=operator,
        nodegroup=default_worker(),
        node_count=2,
        nodes_to_remove=[uuid2],
        reason="sick node",
    )
    submit_resize(request.pk)
    fake_nks.state.finish_all_resizes()
    ResizeRequest.objects.filter(pk=request.pk).update(last_checked_at=None)
    follow_resize(request.pk)
    request.refresh_from_db()
    assert request.state == ResizeState.SUCCEEDED
    client.force_login(operator)

    text = html.unescape(client.get(f"/clusters/resizes/{request.pk}/").content.decode())
    assert f"node {name2}: NKS finished, waiting for the cluster to delete its Node object" in text
    assert 'hx-trigger="every' in text, "the page keeps looking until the Node is gone"

    deleted = timezone.now()
    Node.objects.filter(name=name2).update(deleted_at=deleted)
    Lease.objects.filter(name=name2).update(deleted_at=deleted)
    text = html.unescape(client.get(f"/clusters/resizes/{request.pk}/").content.decode())
    stamp = deleted.isoformat().replace("+00:00", "Z")
    assert f"node {name2} deleted from the cluster at {stamp}" in text
    assert "its heartbeat Lease is still there" not in text
    assert 'hx-trigger="every' not in text
