"""Nodes, the second resource of every watched cluster (issue 10, section 1), over real HTTP
against the fake API server: listed (paged) and watched under the cluster's one lock, Ready
flips recorded as history, resumed after a dropped stream, listed again on 410, and a 403 on
nodes said in words while the Lease watch keeps working."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from kubernetes import client as k8s

from fakes.kube import FakeApiServer, add_node, remove_node
from leases import kube
from leases.models import (
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseCandidate,
    Node,
    NodeReadyChange,
    ResourceWatchState,
)
from leases.services import run_watcher
from leases.watcher import Backoff
from tests.leases.test_watcher import (
    TOKEN,
    RunningWatcher,
    eventually,
    leader_spec,
    register,
    status,
)

pytestmark = pytest.mark.django_db(transaction=True)

NODE_WATCH_PATH = "/api/v1/nodes"


APISERVER_BOOKMARK_INTERVAL = 0.2


def nodes_match_server(server: FakeApiServer, cluster: KubeCluster) -> bool:
    on_server = {obj["metadata"]["name"]: obj for obj in server.store.list_nodes()}
    in_database = {node.name: node for node in Node.objects.filter(cluster=cluster).present()}
    assert set(in_database) == set(on_server)
    for name, obj in on_server.items():
        node = in_database[name]
        ready = next((c for c in obj["status"].get("conditions", []) if c["type"] == "Ready"), {})
        assert node.ready == ready.get("status", ""), name
        assert node.unschedulable == bool(obj["spec"].get("unschedulable")), name
        assert node.provider_id == obj["spec"].get("providerID", ""), name
        assert node.resource_version == obj["metadata"]["resourceVersion"], name
    return True


def node_watches_opened(server: FakeApiServer) -> int:
    return sum(
        1
        for record in server.requests
        if record.path == NODE_WATCH_PATH
        and record.query.get("watch") == "true"
        and record.status == 200
    )


def add_worker(server: FakeApiServer, name: str, nodegroup: str = "default-worker") -> None:
    add_node(
        server.store,
        name,
        provider_id=f"openstack:///{name}-0000-4000-8000-000000000000",
        internal_ip="10.0.0.7",
        labels={"magnum.openstack.org/nodegroup": nodegroup, "magnum.openstack.org/role": "worker"},
    )


def test_nodes_are_listed_then_watched_and_a_ready_flip_is_history(
    apiserver: FakeApiServer,
) -> None:
    add_worker(apiserver, "worker-1")
    add_worker(apiserver, "worker-2")
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: nodes_match_server(apiserver, cluster))
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.WATCHING)
        apiserver.store.set_node_ready("worker-1", False)
        apiserver.store.cordon_node("worker-2")
        add_worker(apiserver, "worker-3")
        remove_node(apiserver.store, "worker-2")
        eventually(lambda: nodes_match_server(apiserver, cluster))
        eventually(lambda: NodeReadyChange.objects.filter(to_status="False").exists())
        # The heartbeat Leases came along, on the same watcher.
        eventually(lambda: Lease.objects.filter(namespace="kube-node-lease").count() == 3)
        time.sleep(0.3)
    # Besides each node's first appearance ("" -> True), one flip of worker-1.
    change = NodeReadyChange.objects.exclude(from_status="").get()
    assert change.node.name == "worker-1"
    assert (change.from_status, change.to_status) == (ConditionStatus.TRUE, ConditionStatus.FALSE)
    assert Node.objects.get(name="worker-2").deleted_at is not None
    worker = Node.objects.get(name="worker-1")
    assert worker.nodegroup_label == "default-worker"
    assert worker.internal_address == "10.0.0.7"
    row = status(cluster)
    assert row.nodes_relists_total == 1 and row.nodes_last_list_at is not None
    assert row.nodes_events_total >= 4 and row.nodes_last_event_at is not None
    assert row.nodes_resource_version
    assert row.nodes_last_error == ""
    # Stopped: a watch no longer running is not shown as watching.
    assert row.nodes_watch == ResourceWatchState.NOT_STARTED


def test_a_dropped_node_watch_resumes_and_a_410_lists_again(apiserver: FakeApiServer) -> None:
    add_worker(apiserver, "worker-1")
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: nodes_match_server(apiserver, cluster))
        eventually(lambda: node_watches_opened(apiserver) >= 1)
        # A dropped stream: resumed from the last resourceVersion, no list.
        apiserver.end_watches()
        eventually(lambda: node_watches_opened(apiserver) >= 2)
        apiserver.store.set_node_ready("worker-1", False)
        eventually(lambda: nodes_match_server(apiserver, cluster))
        assert status(cluster).nodes_relists_total == 1
        eventually(lambda: status(cluster).nodes_reconnects_total >= 1)
        # Outage and compaction: the resume answers 410, the watcher lists again and
        # finds what changed meanwhile, a deletion included.
        apiserver.fail_next_requests(503, count=2)
        apiserver.end_watches()
        apiserver.store.set_node_ready("worker-1", True)
        add_worker(apiserver, "worker-2")
        apiserver.store.delete_node("worker-1")
        apiserver.store.compact()
        eventually(lambda: status(cluster).nodes_relists_total >= 2, timeout=15)
        eventually(lambda: nodes_match_server(apiserver, cluster))
    assert Node.objects.get(name="worker-1").deleted_at is not None


def test_a_403_on_nodes_is_said_in_words_and_leases_keep_working(
    apiserver: FakeApiServer, client: Client, django_user_model: Any
) -> None:
    add_worker(apiserver, "worker-1")
    apiserver.forbid("nodes")
    cluster = register(apiserver)
    # The Node watch retries a 403 every 10 s here: long enough to see that nothing else
    # waits for it.
    backoff = Backoff(base=0.2, maximum=0.5, auth_base=10.0, auth_maximum=10.0)
    with RunningWatcher(cluster, backoff=backoff):
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.FORBIDDEN)
        # Leases: listed, watched, changes written, no error on the Lease watch.
        eventually(lambda: Lease.objects.filter(name="worker-1").exists())
        apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
        eventually(lambda: Lease.objects.filter(name="kube-scheduler").exists())
        row = status(cluster)
        assert row.connected and row.last_error == ""
        assert "403 Forbidden" in row.nodes_last_error
        assert "grant get, list and watch on nodes" in row.nodes_last_error
        assert TOKEN not in row.nodes_last_error
        assert not Node.objects.exists()
        # Nor does the LeaseCandidates refresh pause while the Node watch waits to retry.
        apiserver.store.apply_candidate(
            "kube-system",
            "kube-scheduler-master-0",
            {
                "leaseName": "kube-scheduler",
                "binaryVersion": "1.33.4",
                "emulationVersion": "1.33.0",
                "strategy": "OldestEmulationVersion",
            },
        )
        eventually(lambda: LeaseCandidate.objects.exists(), timeout=4)
        client.force_login(django_user_model.objects.create_user("erin"))
        page = client.get("/leases/clusters/").content.decode()
        assert (
            "forbidden: the dashboard&#x27;s ServiceAccount may not list nodes; "
            "grant get/list/watch on nodes" in page
        )
        assert "banner-error" not in page, "the leases are live: no cluster banner"

        # Granted: the next attempt (backed off) lists the Nodes.
        apiserver.allow("nodes")
        eventually(lambda: nodes_match_server(apiserver, cluster), timeout=15)
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.WATCHING)
    assert status(cluster).nodes_last_error == ""


def test_one_lock_one_worker_and_one_watch_per_resource(apiserver: FakeApiServer) -> None:
    add_worker(apiserver, "worker-1")
    cluster = register(apiserver)
    stop = threading.Event()
    results: list[bool] = []

    def watch() -> None:
        try:
            results.append(run_watcher(cluster.id, owner="first", stop=stop))
        finally:
            connection.close()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.WATCHING)
        assert apiserver.wait_for_watches(2)
        assert run_watcher(cluster.id, owner="second", stop=threading.Event()) is False
        time.sleep(0.5)
        assert apiserver.store.open_watch_count == 2, "one Lease watch and one Node watch"
    finally:
        stop.set()
        thread.join(timeout=15)
    assert results == [True]
    assert not thread.is_alive()


def test_node_lists_are_paged(
    apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], k8s.ApiClient]
) -> None:
    for number in range(5):
        add_worker(apiserver, f"worker-{number}")
    api = make_api_client(apiserver)
    pages = [page.read() for page in kube.iter_all_nodes(api, limit=2)]
    assert [len(page.items) for page in pages] == [2, 2, 1]
    names = [item["metadata"]["name"] for page in pages for item in page.items]
    assert names == [f"worker-{number}" for number in range(5)]
    assert pages[-1].resource_version and not pages[-1].continue_token
    stream = kube.open_node_watch(api, pages[-1].resource_version, timeout_seconds=5)
    try:
        apiserver.store.set_node_ready("worker-0", False)
        line = next(line for line in stream.lines() if b'"BOOKMARK"' not in line)
    finally:
        stream.close()
    assert b'"MODIFIED"' in line and b"worker-0" in line


def test_metrics_say_where_each_node_watch_stands(apiserver: FakeApiServer, client: Client) -> None:
    add_worker(apiserver, "worker-1")
    apiserver.forbid("nodes")
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.FORBIDDEN)
        forbidden = client.get("/metrics").content.decode()
        apiserver.allow("nodes")
        eventually(lambda: status(cluster).nodes_watch == ResourceWatchState.WATCHING, timeout=10)
        watching = client.get("/metrics").content.decode()
    assert 'lease_dashboard_node_watch_state{cluster="test",state="forbidden"} 1.0' in forbidden
    assert 'lease_dashboard_node_watch_state{cluster="test",state="watching"} 0.0' in forbidden
    assert 'lease_dashboard_node_watch_state{cluster="test",state="forbidden"} 0.0' in watching
    assert 'lease_dashboard_node_watch_state{cluster="test",state="watching"} 1.0' in watching
    assert 'lease_dashboard_node_watch_relists_total{cluster="test"} 1.0' in watching
