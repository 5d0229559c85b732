"""Names in natural order (worker-2 before worker-10): the Leases table's Name sort across
pages both ways, and the watched clusters (tests/nks/test_natural_sort.py: NKS's lists)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from dashboard.flapping import flap_policy
from dashboard.natural import natural_key
from leases.cursors import SORT_KEYS, Cursor, decode_cursor
from leases.models import KubeCluster, Lease
from leases.presenters.lease_table import lease_table
from leases.presenters.watchers import cluster_statuses
from leases.queries import LeaseFilters, filter_leases, keyset_page, table_page
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db

# Natural order; node-01 and node-1 share a key, and then sort by the name itself.
NATURAL = ["node-01", "node-1", "node-2", "node-9", "node-10", "node-11", "node-100", "node-b"]


@pytest.fixture
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def named_leases(frozen_clock: None) -> KubeCluster:
    cluster = make_cluster()
    for name in sorted(NATURAL):  # written in byte order: the order must not come from ids
        make_lease(cluster, name, namespace="kube-node-lease", name_key=natural_key(name))
    return cluster


def walk(sort: str, limit: int) -> tuple[list[str], list[str], list[str]]:
    """The table's names forward, then back, and the ORM's names, in `sort`."""
    filters = LeaseFilters(sort=sort)
    key, policy = SORT_KEYS[sort.removeprefix("-")], flap_policy()
    ids = dict(KubeCluster.objects.values_list("name", "pk"))
    names = dict(Lease.objects.values_list("pk", "name"))

    def page(cursor: Cursor | None) -> tuple[list[str], str | None, str | None]:
        found = table_page(filters, NOW, ids, policy, cursor, limit)
        return [names[row[0]] for row in found.rows], found.next_cursor, found.previous_cursor

    rows, after, before = page(None)
    forward = list(rows)
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, key)))
        forward += rows
    backward = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, key)))
        backward = rows + backward
    leases = filter_leases(filters, NOW, ids)
    orm = [row["name"] for row in keyset_page(leases, filters, None, 100, ("name",)).rows]
    return forward, backward, orm


def test_the_name_sort_is_natural_across_pages_both_ways(named_leases: KubeCluster) -> None:
    assert walk("name", 3) == (NATURAL, NATURAL, NATURAL)
    assert walk("-name", 3) == (NATURAL[::-1], NATURAL[::-1], NATURAL[::-1])


@pytest.mark.parametrize("sort", ["cluster", "namespace"])
def test_the_cluster_and_namespace_sorts_list_names_naturally_across_pages_both_ways(
    named_leases: KubeCluster, sort: str
) -> None:
    assert walk(sort, 3) == (NATURAL, NATURAL, NATURAL)
    assert walk(f"-{sort}", 3) == (NATURAL[::-1], NATURAL[::-1], NATURAL[::-1])


def test_problems_first_sorts_names_naturally_within_a_rank(named_leases: KubeCluster) -> None:
    assert walk("problems", 2) == (NATURAL, NATURAL, NATURAL)


def test_the_leases_page_follows_its_links_in_natural_order(
    named_leases: KubeCluster, engineer_client: Client
) -> None:
    url: str | None = "/leases/?sort=name"
    seen: list[str] = []
    while url is not None:
        text = engineer_client.get(url).content.decode()
        seen += re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', text)
        found = re.search(r'<a href="([^"]+)"[^>]*rel="next"', text)
        url = html.unescape(found.group(1)) if found else None
    assert seen == NATURAL


def test_watched_clusters_are_listed_in_natural_order(frozen_clock: None) -> None:
    for name in ("prod-10", "prod-2", "prod-1"):
        make_cluster(name)

    assert [status.name for status in cluster_statuses(NOW)] == ["prod-1", "prod-2", "prod-10"]
    table = lease_table(LeaseFilters(), timezone.now())
    assert [status.name for status in table.clusters] == ["prod-1", "prod-2", "prod-10"]


def test_the_cluster_filter_offers_clusters_in_natural_order(
    frozen_clock: None, engineer_client: Client
) -> None:
    for name in ("prod-10", "prod-2"):
        make_lease(make_cluster(name), "kube-scheduler")

    page = engineer_client.get("/leases/").content.decode()

    select = page.split('<select name="cluster"', 1)[1].split("</select>", 1)[0]
    assert re.findall(r'<option value="([^"]*)"', select) == ["", "prod-2", "prod-10"]
