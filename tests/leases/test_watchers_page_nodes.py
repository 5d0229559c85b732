"""The watchers page's Node watch column: each state in words, the node count, and how fresh
the Node rows are, from status rows written straight with the ORM (the clock is frozen)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from leases.models import Node, ResourceWatchState
from tests.leases.factories import NOW, make_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def erin_client(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    return client


def node_cell(text: str, cluster: str) -> str:
    match = re.search(rf'<td class="wrap" data-node-watch="{cluster}"[^>]*>(.*?)</td>', text, re.S)
    assert match, f"no Node watch cell for {cluster}"
    return " ".join(match.group(1).split())


def watchers_page(client: Client) -> str:
    response = client.get("/leases/clusters/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_live_node_watch_shows_watching_its_count_and_live(erin_client: Client) -> None:
    cluster = make_cluster(
        "prod",
        nodes_watch=ResourceWatchState.WATCHING,
        nodes_last_list_at=NOW - timedelta(hours=1),
        nodes_last_event_at=NOW - timedelta(seconds=4),
    )
    for name in ("worker-1", "worker-2"):
        Node.objects.create(cluster=cluster, name=name)
    Node.objects.create(cluster=cluster, name="gone", deleted_at=NOW - timedelta(minutes=5))
    cell = node_cell(watchers_page(erin_client), "prod")
    assert '<span class="pill pill-ok">watching</span>' in cell
    assert "2 nodes, live; last event" in cell
    assert ">4 s ago</time>" in cell


@pytest.mark.parametrize(
    ("fields", "pill", "words"),
    [
        (
            {"nodes_watch": ResourceWatchState.FORBIDDEN},
            '<span class="pill pill-bad">forbidden (RBAC)</span>',
            "forbidden: the dashboard&#x27;s ServiceAccount may not list nodes; "
            "grant get/list/watch on nodes",
        ),
        (
            {"nodes_watch": ResourceWatchState.NOT_SERVED},
            '<span class="pill pill-bad">not served</span>',
            "not served: this API server answers 404 for v1 Nodes",
        ),
        (
            {
                "nodes_watch": ResourceWatchState.RECONNECTING,
                "nodes_last_error": "Could not connect to the API server at 10.0.0.1:6443",
            },
            '<span class="pill pill-warn">reconnecting</span>',
            "Could not connect to the API server at 10.0.0.1:6443",
        ),
        (
            {"nodes_watch": ResourceWatchState.ERROR, "nodes_last_error": "<b>odd</b> failure"},
            '<span class="pill pill-bad">error</span>',
            "&lt;b&gt;odd&lt;/b&gt; failure",
        ),
    ],
)
def test_a_node_watch_in_trouble_says_so_in_words(
    erin_client: Client, fields: dict[str, Any], pill: str, words: str
) -> None:
    make_cluster("prod", **fields)
    cell = node_cell(watchers_page(erin_client), "prod")
    assert pill in cell
    assert words in cell
    assert "0 nodes, no data yet" in cell


def test_node_rows_of_a_failing_watch_are_shown_as_old_as_their_as_of_moment(
    erin_client: Client,
) -> None:
    make_cluster(
        "prod",
        nodes_watch=ResourceWatchState.RECONNECTING,
        nodes_last_list_at=NOW - timedelta(hours=1),
        nodes_last_error="The API server at 10.0.0.1:6443 answered 503",
        nodes_last_error_at=NOW - timedelta(minutes=3),
        # The last moment the Node data was proved current: when the trouble began.
        nodes_as_of=NOW - timedelta(minutes=3),
    )
    assert "data 3 min old" in node_cell(watchers_page(erin_client), "prod")


def test_a_watching_node_watch_of_a_silent_watcher_is_stale(erin_client: Client) -> None:
    make_cluster(
        "prod",
        fresh=False,
        nodes_watch=ResourceWatchState.WATCHING,
        nodes_last_list_at=NOW - timedelta(hours=1),
    )
    cell = node_cell(watchers_page(erin_client), "prod")
    assert '<span class="pill pill-bad">stale</span>' in cell
    assert "data 70 s old" in cell
    assert "the cluster&#x27;s watcher has gone quiet: Nodes are as last seen" in cell
