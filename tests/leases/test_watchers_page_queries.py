"""The watchers page costs the same number of queries for 3 clusters as for 30 (issue 22:
50 clusters on one deployment): nothing is read per cluster, the Node counts included."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from leases.models import KubeCluster, Node, ResourceWatchState
from tests.leases.factories import NOW, make_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def add_clusters(first: int, count: int) -> list[KubeCluster]:
    """Clusters watching Nodes, cluster i with i present Nodes and one deleted."""
    clusters = []
    for index in range(first, first + count):
        cluster = make_cluster(f"c-{index:02}", nodes_watch=ResourceWatchState.WATCHING)
        Node.objects.bulk_create(
            [Node(cluster=cluster, name=f"n-{n}") for n in range(index % 4)]
            + [Node(cluster=cluster, name="gone", deleted_at=NOW)]
        )
        clusters.append(cluster)
    return clusters


def node_counts(text: str) -> dict[str, str]:
    cells = re.findall(r'<td class="wrap" data-node-watch="([^"]+)"[^>]*>(.*?)</td>', text, re.S)
    return {
        name: re.search(r"(\d+) nodes?,", " ".join(cell.split())).group(1)  # type: ignore[union-attr]
        for name, cell in cells
    }


def queries_of_page(client: Client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get("/leases/clusters/")
    assert response.status_code == 200
    return len(queries), response.content.decode()


def test_the_watchers_page_reads_the_same_for_3_and_30_clusters(
    client: Client, django_user_model: Any
) -> None:
    client.force_login(django_user_model.objects.create_user("erin"))
    add_clusters(0, 3)
    few, text = queries_of_page(client)
    assert node_counts(text) == {"c-00": "0", "c-01": "1", "c-02": "2"}
    add_clusters(3, 27)
    many, text = queries_of_page(client)
    counts = node_counts(text)
    assert len(counts) == 30
    assert counts["c-07"] == "3" and counts["c-08"] == "0" and counts["c-29"] == "1"
    assert many == few
