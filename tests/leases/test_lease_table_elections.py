"""Who really leads, in the Leases table: leader-k8s holders by identity with the token muted
beside them, foreign writers flagged, hostile text escaped, and the library filter."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import time_machine
from django.test import Client

from leases.models import KubeCluster, LeaseLibrary
from leases.queries import LeaseFilters, filter_leases, keyset_page
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db

TOKEN = "b4k-7YpQ2mXc9KdR4tWz6HbN3e"
HOSTILE = '<img src=x onerror="alert(1)">'
REFRESH = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def leader_k8s(cluster: KubeCluster, name: str, identity: str, token: str = TOKEN) -> None:
    make_lease(
        cluster,
        name,
        namespace="ops",
        holder=token,
        library=LeaseLibrary.LEADER_K8S,
        identity=identity,
        token=token,
    )


def holder_cell(region: str, name: str) -> str:
    """The holder <td> of the row that links to `name`."""
    row = region.split(f">{name}</a>", 1)[1].split("</tr>", 1)[0]
    match = re.search(r'<td class="truncate".*?</td>', row, re.S)
    assert match is not None, row
    return match.group(0)


def regions(client: Client, url: str) -> list[str]:
    """The table region of the full page and of the htmx refresh: they must say the same."""
    page = client.get(url).content.decode()
    refresh = client.get(url, **REFRESH).content.decode()
    return [page, refresh]


def test_a_leader_k8s_holder_is_shown_by_identity_with_its_token_muted(
    engineer_client: Client,
) -> None:
    leader_k8s(make_cluster(), "reconciler", "worker-7 / audit-9")

    for region in regions(engineer_client, "/leases/"):
        assert holder_cell(region, "reconciler") == (
            f'<td class="truncate" title="{TOKEN}">worker-7 / audit-9 '
            f'<span class="muted">{TOKEN}</span></td>'
        )


def test_plain_and_coordinated_holders_are_shown_as_written(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", identity="master-0_6f1c")
    make_lease(
        cluster,
        "kube-controller-manager",
        holder="master-1_aa",
        identity="master-1_aa",
        library=LeaseLibrary.COORDINATED,
        strategy="OldestEmulationVersion",
    )

    region = regions(engineer_client, "/leases/")[0]

    assert holder_cell(region, "kube-scheduler") == '<td class="truncate">master-0_6f1c</td>'
    assert holder_cell(region, "kube-controller-manager") == (
        '<td class="truncate">master-1_aa</td>'
    )


def test_a_leader_k8s_token_without_annotations_is_the_holder_once(
    engineer_client: Client,
) -> None:
    # leader_k8s.leadership() falls back to the token itself as the identity.
    leader_k8s(make_cluster(), "reconciler", TOKEN)

    region = regions(engineer_client, "/leases/")[0]

    assert holder_cell(region, "reconciler") == f'<td class="truncate">{TOKEN}</td>'


def test_a_foreign_writer_is_a_warning_with_the_holder_as_written(
    engineer_client: Client,
) -> None:
    make_lease(
        make_cluster(),
        "report-export",
        namespace="ops",
        holder="mallory",
        library=LeaseLibrary.LEADER_K8S,
        identity="worker-7",
        foreign_writer=True,
    )

    for region in regions(engineer_client, "/leases/"):
        cell = holder_cell(region, "report-export")
        assert cell.startswith('<td class="truncate">mallory')
        # The annotations name whoever leader-k8s last let lead, not whoever wrote "mallory".
        assert "worker-7" not in cell
        assert re.search(r'<span class="pill pill-warn" title="[^"]+">foreign writer</span>', cell)


def test_hostile_identity_and_holders_are_escaped_in_the_table(engineer_client: Client) -> None:
    cluster = make_cluster()
    leader_k8s(cluster, "reconciler", HOSTILE)
    make_lease(
        cluster,
        "report-export",
        namespace="ops",
        holder=HOSTILE,
        library=LeaseLibrary.LEADER_K8S,
        foreign_writer=True,
    )
    long_hostile = HOSTILE * 10  # longer than the cell: cut there, and whole in the title
    make_lease(cluster, "kube-scheduler", holder=long_hostile, identity=long_hostile)

    for region in regions(engineer_client, "/leases/"):
        assert "<img" not in region
        escaped = "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"
        assert f'<td class="truncate" title="{TOKEN}">{escaped} ' in region
        assert f'<td class="truncate">{escaped}' in holder_cell(region, "report-export")
        title = re.search(r'title="([^"]*)"', holder_cell(region, "kube-scheduler"))
        assert title is not None and title.group(1).startswith(escaped * 10)


def test_the_library_filter_keeps_one_library(engineer_client: Client) -> None:
    cluster = make_cluster()
    leader_k8s(cluster, "reconciler", "worker-7")
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "kube-controller-manager", library=LeaseLibrary.COORDINATED)

    def names(url: str) -> list[str]:
        region = regions(engineer_client, url)[1]
        return re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', region)

    assert names("/leases/?library=leader_k8s") == ["reconciler"]
    assert names("/leases/?library=coordinated") == ["kube-controller-manager"]
    assert names("/leases/?library=plain&sort=name") == ["kube-scheduler"]
    page = engineer_client.get("/leases/?library=leader_k8s").content.decode()
    assert '<option value="leader_k8s" selected>leader-k8s (bluetape4k)</option>' in page
    # The filter stays in the sort and page links.
    assert 'href="/leases/?library=leader_k8s&amp;sort=name"' in page


def test_an_unknown_library_is_reported_and_the_rest_still_applies(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "node-1", namespace="kube-node-lease")

    page = engineer_client.get("/leases/?library=bogus&namespace=kube-system").content.decode()

    assert "<code>library</code>" in page
    assert re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', page) == ["kube-scheduler"]


def test_the_library_filter_and_identity_search_agree_in_the_orm_query() -> None:
    cluster = make_cluster()
    leader_k8s(cluster, "reconciler", "worker-7 / audit-9")
    make_lease(cluster, "kube-scheduler", holder="worker-7x", identity="worker-7x")
    ids = {cluster.name: cluster.pk}

    def names(filters: LeaseFilters) -> list[str]:
        leases = filter_leases(filters, NOW, ids)
        return [row["name"] for row in keyset_page(leases, filters, None, 10, ("name",)).rows]

    assert names(LeaseFilters(library="leader_k8s")) == ["reconciler"]
    # The holder in human terms is searched too: the token says nothing to a person.
    assert names(LeaseFilters(q="AUDIT-9")) == ["reconciler"]
    assert names(LeaseFilters(q="worker-7", sort="name")) == ["kube-scheduler", "reconciler"]
