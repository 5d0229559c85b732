"""In Chromium: the nodegroup page shows a node going NotReady without a reload.

Twice: with the Node row updated in the database while the page is open (as the Node watch
writes it: the page's part alone), and end to end, with a live watcher reading the fake
Kubernetes API whose Node's Ready condition is flipped.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from fakes.kube import FakeApiServer
from fakes.kube.node_scenarios import add_node
from leases.models import NODEGROUP_LABEL, ConditionStatus, KubeCluster
from nks.models import NksCluster
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup
from tests.e2e.login import log_in
from tests.leases.test_watcher import RunningWatcher, register
from tests.nks.nodes import make_node, set_ready, watched_cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

INSTANCES = [f"3f1c2b7e-0000-4000-8000-00000000000{index}" for index in range(3)]


@pytest.fixture
def pool_a(settings: Any, engineer: Any) -> NksCluster:
    """NKS cluster prod, whose nodegroup pool-a has 3 nodes, all ready in NKS's eyes; pages
    refresh every second, and erin may log in."""
    settings.PAGE_REFRESH_SECONDS = 1
    cluster = make_nks_cluster(make_account(), "prod")
    make_nodegroup(cluster, "pool-a", node_count=3, ready=3, not_ready=0)
    return cluster


def open_nodegroup_page(page: Any, live_server: Any, cluster: NksCluster) -> None:
    """pool-a's page, logged in as erin on the way."""
    page.goto(f"{live_server.url}/login/?next=/clusters/{cluster.uuid}/nodegroups/pool-a/")
    log_in(page)


def test_nodegroup_page_shows_a_node_going_notready_without_a_reload(
    live_server: Any, page: Any, pool_a: NksCluster
) -> None:
    kube = watched_cluster("prod")
    nodes = [
        make_node(kube, f"prod-pool-a-{index}", nodegroup="pool-a", instance=INSTANCES[index])
        for index in range(3)
    ]

    open_nodegroup_page(page, live_server, pool_a)
    row = page.locator('#nodes tr[data-node="prod-pool-a-2"]')
    expect(row).to_have_attribute("data-ready", "True")
    expect(page.locator("#nodes [data-cross-check]")).to_have_attribute("data-agrees", "true")
    page.evaluate("window.__still_the_same_page = true")

    KubeCluster.objects.filter(pk=kube.pk).update(
        last_flush_at=timezone.now(), leases_as_of=timezone.now(), nodes_as_of=timezone.now()
    )
    set_ready(nodes[2], ConditionStatus.FALSE, "KubeletNotReady", "container runtime is down")

    expect(row).to_have_attribute("data-ready", "False", timeout=15_000)
    expect(row).to_contain_text("NotReady")
    expect(row).to_contain_text("KubeletNotReady")
    expect(row).to_have_class("row-bad")
    # NKS still counts it ready: the cross-check says so in words.
    expect(page.locator("#nodes [data-cross-check]")).to_contain_text(
        "NKS counts 3:0 ready:not ready in pool-a; the cluster's Nodes say 2:1."
    )
    assert page.evaluate("window.__still_the_same_page === true"), "the page was reloaded"


def test_a_node_the_live_watcher_sees_go_notready_changes_the_open_page(
    live_server: Any, page: Any, pool_a: NksCluster, apiserver: FakeApiServer
) -> None:
    for index in range(3):
        add_node(
            apiserver.store,
            f"prod-pool-a-{index}",
            provider_id=f"openstack:///{INSTANCES[index]}",
            labels={NODEGROUP_LABEL: "pool-a"},
        )
    kube = register(apiserver, name="prod")  # the NKS cluster's name: linked by it

    with RunningWatcher(kube):
        open_nodegroup_page(page, live_server, pool_a)
        row = page.locator('#nodes tr[data-node="prod-pool-a-1"]')
        expect(row).to_have_attribute("data-ready", "True", timeout=15_000)
        expect(row).to_contain_text(INSTANCES[1])
        page.evaluate("window.__still_the_same_page = true")

        apiserver.store.set_node_ready("prod-pool-a-1", False, reason="KubeletNotReady")

        expect(row).to_have_attribute("data-ready", "False", timeout=15_000)
        expect(row).to_contain_text("KubeletNotReady")
        assert page.evaluate("window.__still_the_same_page === true"), "the page was reloaded"
