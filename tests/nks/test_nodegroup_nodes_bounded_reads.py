"""A large nodegroup read without a NodeLine per member: the nodegroup page's table and
cross-check for readers without the resize form (and its regions' refreshes), and the cluster
page's cross-checks, say what reading every member says, and of the lease table read only
the cluster's own heartbeat Leases, however many Leases the fleet has."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.utils import timezone

from fakes.nks import FakeNks
from leases.models import ConditionStatus, KubeCluster, Lease, LeaseClass
from nks.models import NksAccount, NksCluster
from nks.node_picture import cluster_cross_checks, counted_cluster_cross_checks
from nks.presenters.nodegroup_detail import NODES_SHOWN
from tests.nks.nodes import make_node, nodes_like_the_fake, watched_cluster
from tests.table_reads import rows_read

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    # The pages compared say "1 s ago": the same moment for each.
    with time_machine.travel(timezone.now(), tick=False):
        yield


REGION = {"HX-Request": "true", "HX-Target": "nks-nodegroup"}


def nodes_card(text: str) -> str:
    return text.split('<section class="card" id="nodes">', 1)[1].split("</section>", 1)[0]


def table_nodes(text: str) -> list[str]:
    return re.findall(r'<tr class="[^"]*" data-node="([^"]+)"', nodes_card(text))


def grow(kube: KubeCluster, start: int, stop: int) -> None:
    """Healthy members of default-worker, named to sort after the fake's nodes."""
    for index in range(start, stop):
        make_node(
            kube,
            f"zz-worker-{index:03d}",
            nodegroup="default-worker",
            instance=str(uuid.UUID(int=index + 1_000)),
        )


@pytest.fixture
def troubled(polled: NksAccount, fake_nks: FakeNks) -> tuple[KubeCluster, str]:
    """prod-api watched, its default-worker with NODES_SHOWN + 5 more healthy Nodes and, named
    last, one NotReady, one cordoned and one whose heartbeat Lease expired; an unlabelled
    Node too. Returns the Lease source and the nodegroup page's URL."""
    kube, _ = nodes_like_the_fake(fake_nks, "prod-api")
    grow(kube, 0, NODES_SHOWN + 5)
    make_node(kube, "zzz-sick", instance=str(uuid.uuid4()), ready=ConditionStatus.FALSE)
    make_node(kube, "zzz-cordoned", instance=str(uuid.uuid4()), cordoned=True)
    make_node(kube, "zzz-silent", instance=str(uuid.uuid4()), lease_renewed_ago=600)
    make_node(kube, "stray", nodegroup=None, instance=str(uuid.uuid4()))
    make_node(kube, "zzz-unnamed", instance=None)  # no providerID: cannot be chosen
    cluster = NksCluster.objects.get(name="prod-api")
    return kube, f"/clusters/{cluster.uuid}/nodegroups/default-worker/"


def test_the_bounded_table_and_check_are_those_of_every_member(
    troubled: tuple[KubeCluster, str], operator: Any, engineer: Any
) -> None:
    _, url = troubled
    operator_client, engineer_client = Client(), Client()
    operator_client.force_login(operator)
    engineer_client.force_login(engineer)
    # The operator's page reads every member for the resize form; the engineer's and every
    # region's refresh read the page of them.
    with_form = operator_client.get(url).content.decode()
    without = engineer_client.get(url).content.decode()
    assert 'name="nodes_to_remove"' in with_form and 'name="nodes_to_remove"' not in without
    every, bounded = nodes_card(with_form), nodes_card(without)
    region = nodes_card(engineer_client.get(url, headers=REGION).content.decode())
    operator_region = nodes_card(operator_client.get(url, headers=REGION).content.decode())
    assert bounded == every == region == operator_region
    shown = table_nodes(f'<section class="card" id="nodes">{bounded}')
    # The members' page, then the unlabelled Node's table.
    assert len(shown) == NODES_SHOWN + 1 and shown[-1] == "stray"
    assert shown[:3] == ["zzz-cordoned", "zzz-sick", "zzz-silent"]
    card = " ".join(bounded.split())
    assert "zzz-silent" in card and "heartbeat Lease expired" in card


def resize_form(text: str, url: str) -> str:
    form = text.split(f'action="{url}resize/"', 1)[1].split("</form>", 1)[0]
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", form)


@pytest.mark.parametrize("query", ["", "node_count=2"])
def test_the_bounded_resize_form_is_the_one_of_every_member(
    troubled: tuple[KubeCluster, str], operator_client: Client, query: str
) -> None:
    """The unbound form read as a page (the first removable nodes) is the form read from
    every member (as ?nodes=all and a refused resize read it): the same checkboxes, ticks,
    count of the others, and nodes that cannot be chosen."""
    _, url = troubled
    bounded = operator_client.get(f"{url}?{query}").content.decode()
    every = operator_client.get(f"{url}?{query}&nodes=all").content.decode()
    form = resize_form(bounded, url)
    assert form == resize_form(every, url)
    # The troubled nodes are listed first, the NotReady one ticked; the others are counted.
    assert form.index("zzz-sick (NotReady") < form.index("zz-worker-000 ·")
    assert re.search(r'value="[^"]+"[^>]*checked[^>]*>\s*zzz-sick', form)
    assert 'name="nodes_to_remove_more"' in form
    assert "zzz-unnamed cannot be chosen" in form


def test_the_cluster_pages_counted_checks_are_those_of_every_member(
    troubled: tuple[KubeCluster, str],
) -> None:
    cluster = NksCluster.objects.select_related("account", "kube_cluster").get(name="prod-api")
    now = timezone.now()
    counted = counted_cluster_cross_checks(cluster, now)
    assert counted == cluster_cross_checks(cluster, now)
    check = next(check for check in counted if check.nodegroup == "default-worker")
    assert check.heartbeats_expired == 1
    assert any("zzz-silent" in said for said in check.disagreements)


def _leases_read(read: object) -> int:
    """The lease rows `read()` reads, planned as at scale: with statistics, and told to avoid
    sequential scans, a read that no index serves still scans the table."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE leases_lease, leases_leasedeadline, leases_node")
        cursor.execute("SET LOCAL enable_seqscan = off")
    before = rows_read()
    read()  # type: ignore[operator]
    after = rows_read()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = on")
    return after - before


def _leases(kube: KubeCluster, namespace: str, prefix: str, number: int) -> None:
    """`number` held Leases renewed just now (heartbeats in kube-node-lease)."""
    now = timezone.now()
    Lease.objects.bulk_create(
        Lease(
            cluster=kube,
            namespace=namespace,
            name=f"{prefix}-{index:04d}",
            lease_class=LeaseClass.NODE_HEARTBEAT
            if namespace == "kube-node-lease"
            else LeaseClass.LEADER_ELECTION,
            holder=f"{prefix}-{index:04d}",
            renew_time=now,
            lease_duration_seconds=40,
            expires_at=now + timedelta(seconds=40),
            observed_at=now,
        )
        for index in range(number)
    )


@pytest.mark.postgres
def test_the_nodegroup_region_and_the_checks_read_only_this_clusters_heartbeats(
    troubled: tuple[KubeCluster, str], engineer_client: Client
) -> None:
    """What they read of the lease table: this cluster's node heartbeat Leases (one index
    range, for the expired ones) and a page of them by name; no other cluster's, nor this
    one's other Leases, however many (PostgreSQL counts the rows it reads)."""
    if connection.vendor != "postgresql":
        pytest.skip("rows read are PostgreSQL's statistics")
    kube, url = troubled
    cluster = NksCluster.objects.select_related("account", "kube_cluster").get(name="prod-api")
    engineer_client.get(url, headers=REGION)  # the session: read once, like a tab

    def region() -> None:
        assert engineer_client.get(url, headers=REGION).status_code == 200

    def checks() -> None:
        counted_cluster_cross_checks(cluster, timezone.now())

    small = (_leases_read(region), _leases_read(checks))
    other = watched_cluster("elsewhere")
    _leases(other, "kube-node-lease", "far-node", 3000)
    _leases(kube, "apps", "election", 3000)
    large = (_leases_read(region), _leases_read(checks))
    # No more (the plan of the page's lookup by name may change with the table's size).
    assert large[0] <= small[0] and large[1] == small[1], (small, large)
