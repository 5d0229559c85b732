"""NKS names and uuids are data: any of them makes working, escaped links to the right page.

A nodegroup named "a/b" once broke its whole cluster page (NoReverseMatch), and one named
".." would have linked to the cluster itself (browsers resolve dot segments).
"""

from __future__ import annotations

import html
import re
import uuid
from typing import Any
from urllib.parse import urljoin, urlsplit

import orjson
import pytest
from django.test import Client
from django.urls import reverse

from dashboard.models import ApiToken
from leases.models import KubeCluster, Node
from nks.models import NksCluster, NksNodegroup, ResizeState
from nks.services import kube_name
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, make_resize
from tests.nks.nodes import make_node, watched_cluster
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db

HOSTILE_NAMES = [
    "a/b",
    "../x",
    "..",
    ".",
    "</script><script>alert(1)</script>",
    "~",
    "a~2Fb",
    "x y?z#w&v=1",
    "100%",
    "ß²𝟘\u200f",
    "back\\slash",
    "%2e%2e",
    "/leading",
    "trailing/",
]


@pytest.fixture
def cluster() -> NksCluster:
    return make_nks_cluster(make_account(), name="prod-api")


def worker(cluster: NksCluster, name: str, nodes: int = 2) -> NksNodegroup:
    """A worker nodegroup of Ready nodes whose instance uuids are known (so removable): the
    cluster is watched, and each node is a Node labelled with the nodegroup's name."""
    group = make_nodegroup(cluster, name, node_count=nodes, ready=nodes)
    kube = KubeCluster.objects.filter(name=kube_name(cluster.name)).first()
    kube = kube or watched_cluster(kube_name(cluster.name))
    for index in range(nodes):
        make_node(kube, f"node-{group.pk}-{index}", nodegroup=name, instance=str(uuid.uuid4()))
    return group


def instances(group: NksNodegroup) -> list[str]:
    """The instance UUIDs of the nodegroup's Nodes, by node name."""
    nodes = Node.objects.filter(nodegroup_label=group.name).order_by("name")
    return [node.provider_id.removeprefix("openstack:///") for node in nodes]


def browse(client: Client, base: str, href: str, status: int = 200) -> str:
    """Follow a link as a browser does: unescape it, resolve it (dot segments too), GET it."""
    url = urljoin(f"http://testserver{base}", html.unescape(href))
    response = client.get(urlsplit(url).path)
    assert response.status_code == status, (href, url, response.status_code)
    return response.content.decode()


def nodegroup_heading(text: str) -> str:
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", text, re.S)
    assert heading is not None
    return html.unescape(heading.group(1).rsplit("</a> / ", 1)[1]).strip()


def test_a_cluster_page_links_every_hostile_nodegroup_name_to_its_own_page(
    operator_client: Client, cluster: NksCluster
) -> None:
    for name in HOSTILE_NAMES:
        worker(cluster, name)
    base = reverse("nks:cluster", args=[cluster.uuid])

    text = browse(operator_client, "/", base)

    assert "<script>alert(1)</script>" not in text
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in text
    links = dict(
        (html.unescape(label), href)
        for href, label in re.findall(r'<td><a href="([^"]+)">([^<]*)</a>', text)
    )
    for name in HOSTILE_NAMES:
        page = browse(operator_client, base, links[name])
        assert nodegroup_heading(page) == name


def test_a_hostile_nodegroup_name_resizes_through_its_form_and_the_api(
    operator_client: Client, operator: Any, cluster: NksCluster
) -> None:
    group = worker(cluster, "../a/b")
    page_url = reverse("nks:nodegroup", args=[cluster.uuid, group.name])
    page = browse(operator_client, "/", page_url)
    action = re.search(r'<form method="post" action="([^"]+)" class="resize-form">', page)
    assert action is not None

    # Same size: refused by the form, which proves the POST reached this nodegroup's view.
    target = urljoin(f"http://testserver{page_url}", html.unescape(action.group(1)))
    response = operator_client.post(
        urlsplit(target).path, {"node_count": 2, "reason": "x"}, follow=True
    )
    assert_refused_back_on_the_page(response)
    assert "../a/b already has 2 nodes: no change." in html.unescape(response.content.decode())

    _, token = ApiToken.issue(operator, name="tests", scope=ApiToken.Scope.WRITE)
    api_url = reverse("api:nks_resize", args=[cluster.uuid, group.name])
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        api_url, b'{"node_count": 2, "reason": "x"}', content_type="application/json"
    )
    assert response.status_code == 400
    assert orjson.loads(response.content)["fields"]["node_count"] == [
        "../a/b already has 2 nodes: no change."
    ]


def test_a_hostile_cluster_uuid_and_name_make_working_links(operator_client: Client) -> None:
    cluster = make_nks_cluster(make_account(), name="<b>prod</b>", uuid="../c/../d")
    worker(cluster, "default-worker")

    listing = browse(operator_client, "/", "/clusters/")
    assert "&lt;b&gt;prod&lt;/b&gt;" in listing and "<b>prod</b>" not in listing
    href = re.search(r'<a href="([^"]+)">&lt;b&gt;prod&lt;/b&gt;</a>', listing)
    assert href is not None

    page = browse(operator_client, "/clusters/", href.group(1))
    group_href = re.search(r'<td><a href="([^"]+)">default-worker</a>', page)
    assert group_href is not None
    group_page = browse(operator_client, "/clusters/", group_href.group(1))
    assert nodegroup_heading(group_page) == "default-worker"


def test_resize_pages_link_to_a_hostile_nodegroup(operator_client: Client, operator: Any) -> None:
    cluster = make_nks_cluster(make_account())
    group = worker(cluster, "a/b")
    request = make_resize(group, state=ResizeState.SUCCEEDED, user=operator)

    for url in ("/clusters/resizes/", reverse("nks:resize_detail", args=[request.pk])):
        text = browse(operator_client, "/", url)
        href = re.search(r'<a href="([^"]+)">a/b</a>', text)
        assert href is not None, url
        assert nodegroup_heading(browse(operator_client, url, href.group(1))) == "a/b"


@pytest.mark.parametrize("segment", ["~zz", "a~", "~~", "%7E1"])
def test_a_segment_with_a_stray_escape_is_a_404(
    operator_client: Client, cluster: NksCluster, segment: str
) -> None:
    worker(cluster, "~1")

    response = operator_client.get(f"/clusters/{cluster.uuid}/nodegroups/{segment}/")

    assert response.status_code == 404


def test_plain_names_keep_their_readable_urls(cluster: NksCluster) -> None:
    group = worker(cluster, "default-worker")

    assert reverse("nks:nodegroup", args=[cluster.uuid, group.name]) == (
        f"/clusters/{cluster.uuid}/nodegroups/default-worker/"
    )
    assert reverse("nks:nodegroup", args=[cluster.uuid, "a/b"]).endswith("/nodegroups/a~2Fb/")


# --- Duplicate nodes to remove ---------------------------------------------------------------


def test_the_form_refuses_the_same_node_chosen_twice(
    operator_client: Client, cluster: NksCluster
) -> None:
    group = worker(cluster, "default-worker", nodes=3)
    victim = instances(group)[0]

    # 3 -> 1 removes two nodes: the same one twice once passed "choose exactly 2".
    response = operator_client.post(
        reverse("nks:resize", args=[cluster.uuid, group.name]),
        {
            "node_count": 1,
            "nodes_to_remove": [victim, victim],
            "reason": "scale in",
            "confirm_name": group.name,
        },
        follow=True,
    )

    assert_refused_back_on_the_page(response)
    text = html.unescape(response.content.decode())
    assert f"{victim} is chosen more than once: choose each node to remove once." in text
    assert not NksNodegroup.objects.get(pk=group.pk).resizes.exists()


def test_the_api_refuses_the_same_node_given_twice(operator: Any, cluster: NksCluster) -> None:
    group = worker(cluster, "default-worker", nodes=3)
    victim = instances(group)[0]
    _, token = ApiToken.issue(operator, name="tests", scope=ApiToken.Scope.WRITE)

    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        reverse("api:nks_resize", args=[cluster.uuid, group.name]),
        orjson.dumps({"node_count": 1, "nodes_to_remove": [victim, victim], "reason": "x"}),
        content_type="application/json",
    )

    assert response.status_code == 400
    body = orjson.loads(response.content)
    assert body["error"] == "invalid resize"
    assert body["fields"] == {"nodes_to_remove": [f"{victim} is given more than once."]}
    assert not NksNodegroup.objects.get(pk=group.pk).resizes.exists()
