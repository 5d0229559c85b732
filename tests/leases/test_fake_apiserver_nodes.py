"""The fake kube-apiserver's v1 Nodes, checked over real HTTP with the official client and a raw
reader: list paging, get, watch (bookmarks, 410), create and delete, status writes (PUT and
the three PATCH kinds), per-resource RBAC, and the helpers that flip Ready and cordon."""

from __future__ import annotations

import http.client
from collections.abc import Callable
from datetime import datetime
from io import StringIO
from typing import Any

import orjson
import pytest
from django.core.management import call_command
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from fakes.kube import DemoScenario, FakeApiServer, ScenarioRunner, make_scenario
from fakes.kube.demo_nodes import DEMO_NKS_CLUSTER
from fakes.kube.node_scenarios import NODE_LEASE_NAMESPACE, add_node, remove_node
from fakes.kube.resources import LEASES, NODES
from fakes.kube.store import ObjectStore
from fakes.nks.scenarios import (
    DEFAULT_PASSWORD,
    DEFAULT_TENANT_ID,
    DEFAULT_USERNAME,
    build_scenario,
)
from fakes.nks.state import FakeNksState
from leases.models import KubeCluster
from nks.services import kube_name

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NODES_PATH = "/api/v1/nodes"
FORBIDDEN_USER = "system:serviceaccount:lease-dashboard:lease-dashboard"


def raw(
    server: FakeApiServer,
    path: str,
    *,
    method: str = "GET",
    body: Any = None,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """One plain request; the status and the decoded JSON body."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        payload = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": content_type} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        return response.status, orjson.loads(response.read())
    finally:
        connection.close()


def watch_lines(server: FakeApiServer, query: str, count: int) -> list[dict[str, Any]]:
    """The first `count` events of a raw watch stream."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("GET", f"{NODES_PATH}?watch=1&{query}")
        response = connection.getresponse()
        assert response.status == 200
        buffer, events = b"", []
        while len(events) < count:
            while b"\n" not in buffer:
                data = response.read1(65536)
                assert data, f"stream ended after {len(events)} of {count} events"
                buffer += data
            line, _, buffer = buffer.partition(b"\n")
            events.append(orjson.loads(line))
        return events
    finally:
        connection.close()


def _worker(store: ObjectStore, name: str, **options: Any) -> dict[str, Any]:
    options.setdefault("at", T0)
    options.setdefault("created_at", T0 - 3600)
    return add_node(
        store,
        name,
        provider_id=options.pop("provider_id", f"openstack:///{name}-uuid"),
        internal_ip=options.pop("internal_ip", "192.168.0.10"),
        labels={"magnum.openstack.org/nodegroup": "default-worker"},
        **options,
    )


def _conditions(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {condition["type"]: condition for condition in node["status"]["conditions"]}


# --- shapes, list, get ----------------------------------------------------------------


def test_a_node_has_the_shape_of_a_real_1_24_node(fake_apiserver: FakeApiServer) -> None:
    _worker(fake_apiserver.store, "worker-0")

    status, node = raw(fake_apiserver, f"{NODES_PATH}/worker-0")

    assert status == 200
    assert (node["kind"], node["apiVersion"]) == ("Node", "v1")
    metadata = node["metadata"]
    assert list(metadata) == [
        "name",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "labels",
        "annotations",
    ]
    assert "namespace" not in metadata  # cluster-scoped
    assert metadata["creationTimestamp"] == "2027-01-15T07:00:00Z"
    assert metadata["labels"]["kubernetes.io/hostname"] == "worker-0"
    assert node["spec"] == {"providerID": "openstack:///worker-0-uuid"}
    ready = _conditions(node)["Ready"]
    assert list(ready) == [
        "type",
        "status",
        "lastHeartbeatTime",
        "lastTransitionTime",
        "reason",
        "message",
    ]
    assert ready["lastTransitionTime"] == "2027-01-15T08:00:00Z"  # whole seconds, as metav1.Time
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "192.168.0.10"}
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.24.17"
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}


def test_list_pages_with_limit_and_continue(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    for index in range(5):
        _worker(fake_apiserver.store, f"worker-{index}")

    first = core_api.list_node(limit=2)
    names = [node.metadata.name for node in first.items]
    token = first.metadata._continue
    while token:
        page = core_api.list_node(limit=2, _continue=token)
        names += [node.metadata.name for node in page.items]
        token = page.metadata._continue

    assert names == [f"worker-{index}" for index in range(5)]
    assert first.metadata.remaining_item_count == 3
    assert first.metadata.resource_version == str(fake_apiserver.store.resource_version)
    status, body = raw(fake_apiserver, f"{NODES_PATH}?limit=1")
    assert (status, body["kind"], body["apiVersion"]) == (200, "NodeList", "v1")
    assert "kind" not in body["items"][0]  # list items carry no kind, as for Leases


def test_a_missing_node_is_a_core_group_not_found(fake_apiserver: FakeApiServer) -> None:
    status, body = raw(fake_apiserver, f"{NODES_PATH}/nope")

    assert status == 404
    assert body["message"] == 'nodes "nope" not found'
    assert body["details"] == {"name": "nope", "kind": "nodes"}  # no group: the core group


def test_nodes_are_cluster_scoped_and_404_under_a_namespace(fake_apiserver: FakeApiServer) -> None:
    _worker(fake_apiserver.store, "worker-0")

    assert raw(fake_apiserver, "/api/v1/namespaces/default/nodes")[0] == 404
    assert raw(fake_apiserver, f"{NODES_PATH}/worker-0/proxy")[0] == 404


def test_discovery_lists_nodes_and_their_status_subresource(fake_apiserver: FakeApiServer) -> None:
    assert raw(fake_apiserver, "/api")[1]["versions"] == ["v1"]
    status, body = raw(fake_apiserver, "/api/v1")

    assert status == 200
    resources = {entry["name"]: entry for entry in body["resources"]}
    assert resources["nodes"]["namespaced"] is False
    assert {"get", "list", "watch", "patch"} <= set(resources["nodes"]["verbs"])
    assert resources["nodes/status"]["verbs"] == ["get", "patch", "update"]


def test_a_server_without_nodes_answers_404_and_offers_no_core_group(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(nodes=False)

    assert raw(server, NODES_PATH)[0] == 404
    assert raw(server, "/api")[1]["versions"] == []


# --- create, delete, validation --------------------------------------------------------


def test_create_and_delete_with_the_official_client(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    body = client.V1Node(
        metadata=client.V1ObjectMeta(name="worker-9", namespace="ignored", labels={"a": "b"}),
        spec=client.V1NodeSpec(provider_id="openstack:///9"),
    )
    created = core_api.create_node(body)
    with pytest.raises(ApiException) as duplicate:
        core_api.create_node(body)
    deleted = core_api.delete_node("worker-9")

    assert created.metadata.namespace is None
    assert created.spec.provider_id == "openstack:///9"
    assert created.status.node_info.kubelet_version == ""  # the Go struct is always written
    assert duplicate.value.status == 409
    assert orjson.loads(duplicate.value.body)["message"] == 'nodes "worker-9" already exists'
    # The client leaves delete answers undecoded (a Status, or the object for some kinds).
    assert deleted["status"] == "Success"
    assert deleted["details"] == {"name": "worker-9", "kind": "nodes", "uid": created.metadata.uid}
    assert fake_apiserver.store.get_node("worker-9") is None


def test_provider_id_cannot_change_once_set(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")

    with pytest.raises(ApiException) as invalid:
        core_api.patch_node("worker-0", {"spec": {"providerID": "openstack:///other"}})

    assert invalid.value.status == 422
    body = orjson.loads(invalid.value.body)
    assert body["message"].startswith('Node "worker-0" is invalid: spec.providerID: Forbidden')
    assert body["details"]["kind"] == "Node"


def test_a_bad_taint_is_invalid_under_1_24s_field_path_and_twice_on_update(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")

    with pytest.raises(ApiException) as invalid:
        core_api.patch_node("worker-0", {"spec": {"taints": [{"key": "a", "effect": "Maybe"}]}})

    # As a real 1.24 apiserver answers: ValidateNode and ValidateNodeUpdate both check the
    # taints (under "metadata"), and the message names the problem once.
    body = orjson.loads(invalid.value.body)
    assert invalid.value.status == 422
    assert body["message"] == (
        'Node "worker-0" is invalid: metadata.taints[0].effect: Unsupported value: "Maybe": '
        'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'
    )
    assert [cause["field"] for cause in body["details"]["causes"]] == [
        "metadata.taints[0].effect",
        "metadata.taints[0].effect",
    ]


def test_a_created_node_with_bad_and_duplicate_taints_lists_each_once(
    fake_apiserver: FakeApiServer,
) -> None:
    taints = [
        {"key": "a b", "effect": "NoSchedule"},
        {"key": "x", "effect": "NoSchedule"},
        {"key": "x", "effect": "NoSchedule"},
    ]

    status, body = raw(
        fake_apiserver,
        NODES_PATH,
        method="POST",
        body={"metadata": {"name": "worker-0"}, "spec": {"taints": taints}},
    )

    assert status == 422
    assert [(c["reason"], c["field"]) for c in body["details"]["causes"]] == [
        ("FieldValueInvalid", "metadata.taints[0].key"),
        ("FieldValueDuplicate", "metadata.taints[2]"),
    ]
    assert body["details"]["causes"][1]["message"] == (
        'Duplicate value: core.Taint{Key:"x", Value:"", Effect:"NoSchedule", TimeAdded:<nil>}: '
        "taints must be unique by key and effect pair"
    )


def test_a_node_created_over_the_api_is_tainted_not_ready_by_admission(
    core_api: client.CoreV1Api,
) -> None:
    created = core_api.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="worker-0")))

    # The NodeTaint admission plugin; the node lifecycle controller (not run by the fake, nor
    # by a bare apiserver) would lift it once the node is Ready.
    assert [(t.key, t.effect) for t in created.spec.taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]


# --- status writes -----------------------------------------------------------------------


def test_strategic_merge_patch_of_status_changes_one_condition(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")

    patched = core_api.patch_node_status(
        "worker-0",
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Broken"}]}},
    )

    conditions = {c.type: (c.status, c.reason) for c in patched.status.conditions}
    assert conditions["Ready"] == ("False", "Broken")
    assert conditions["MemoryPressure"] == ("False", "KubeletHasSufficientMemory")


def test_merge_patch_of_status_replaces_the_condition_list(fake_apiserver: FakeApiServer) -> None:
    _worker(fake_apiserver.store, "worker-0")
    condition = {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2027-01-15T09:00:00Z"}

    status, node = raw(
        fake_apiserver,
        f"{NODES_PATH}/worker-0/status",
        method="PATCH",
        body={
            "metadata": {"labels": {"patched": "yes"}},
            "status": {"conditions": [condition]},
            "spec": {"unschedulable": True},
        },
        content_type="application/merge-patch+json",
    )

    assert status == 200
    # 1.24 takes metadata through the status subresource (later versions do not).
    assert node["metadata"]["labels"]["patched"] == "yes"
    assert [(c["type"], c["status"]) for c in node["status"]["conditions"]] == [
        ("Ready", "Unknown")
    ]
    assert node["status"]["conditions"][0]["lastHeartbeatTime"] is None  # a zero metav1.Time
    assert "unschedulable" not in node["spec"]  # a status write leaves the spec alone


def test_json_patch_and_put_keep_spec_and_status_apart(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")

    cordoned = core_api.patch_node(
        "worker-0", [{"op": "add", "path": "/spec/unschedulable", "value": True}]
    )
    current = core_api.read_node("worker-0")
    current.status.conditions = []
    replaced = core_api.replace_node("worker-0", current)  # the main resource ignores status

    assert cordoned.spec.unschedulable is True
    assert len(replaced.status.conditions) == 4
    assert replaced.metadata.resource_version == cordoned.metadata.resource_version  # no change


def test_an_unsupported_patch_type_is_415(fake_apiserver: FakeApiServer) -> None:
    _worker(fake_apiserver.store, "worker-0")

    status, body = raw(
        fake_apiserver,
        f"{NODES_PATH}/worker-0",
        method="PATCH",
        body={"spec": {}},
        content_type="application/apply-patch+yaml",
    )

    assert (status, body["reason"], body["message"]) == (
        415,
        "UnsupportedMediaType",
        "415: Unsupported Media Type",
    )


def test_a_stale_resource_version_in_a_status_put_is_a_conflict(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")
    stale = core_api.read_node("worker-0")
    fake_apiserver.store.heartbeat_node("worker-0", at=T0 + 10)

    with pytest.raises(ApiException) as conflict:
        core_api.replace_node_status("worker-0", stale)

    assert conflict.value.status == 409
    assert orjson.loads(conflict.value.body)["message"].startswith(
        'Operation cannot be fulfilled on nodes "worker-0"'
    )


# --- watch -------------------------------------------------------------------------------


def test_watch_streams_added_modified_deleted_and_bookmarks(fake_apiserver: FakeApiServer) -> None:
    store = fake_apiserver.store
    store.apply_lease("default", "before", {"holderIdentity": "a"})  # "0" would mean "now"
    start = store.resource_version
    store.apply_node("worker-0", status={"nodeInfo": {"kubeletVersion": "v1.24.17"}})
    store.set_node_ready("worker-0", False, at=T0 + 30)
    store.delete_node("worker-0")

    events = watch_lines(fake_apiserver, f"resourceVersion={start}&allowWatchBookmarks=true", 5)

    types = [event["type"] for event in events]
    # ADDED; Ready's status write, then the controller's not-ready taint; DELETED; a bookmark.
    assert types == ["ADDED", "MODIFIED", "MODIFIED", "DELETED", "BOOKMARK"]
    assert events[0]["object"]["kind"] == "Node"
    bookmark = events[-1]["object"]
    assert bookmark["metadata"]["resourceVersion"] == str(store.resource_version)
    assert bookmark["status"]["nodeInfo"]["kubeletVersion"] == ""  # an empty Node, as Go writes
    assert "spec" in bookmark


def test_watch_from_a_compacted_resource_version_is_a_410_error_event(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")
    old = fake_apiserver.store.resource_version
    fake_apiserver.store.heartbeat_node("worker-0", at=T0 + 10)
    fake_apiserver.store.compact()

    [event] = watch_lines(fake_apiserver, f"resourceVersion={old - 1}", 1)

    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired")


def test_the_official_watch_sees_ready_flip(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")
    listed = core_api.list_node()
    fake_apiserver.store.set_node_ready("worker-0", "Unknown", at=T0 + 60)

    stream = watch.Watch().stream(
        core_api.list_node, resource_version=listed.metadata.resource_version, timeout_seconds=1
    )
    ready = [
        {c.type: c.status for c in event["object"].status.conditions}["Ready"]
        for event in stream
        if event["type"] == "MODIFIED"
    ]

    assert ready == ["Unknown", "Unknown"]  # the status write, then the unreachable taints


def test_watches_of_leases_do_not_see_nodes(fake_apiserver: FakeApiServer) -> None:
    store = fake_apiserver.store
    start = store.resource_version
    _worker(store, "worker-0")  # the Node, then its Lease

    connection = http.client.HTTPConnection("127.0.0.1", fake_apiserver.port, timeout=5)
    connection.request(
        "GET", f"/apis/coordination.k8s.io/v1/leases?watch=1&resourceVersion={start}"
    )
    line = connection.getresponse().readline()
    connection.close()

    event = orjson.loads(line)
    assert (event["object"]["kind"], event["object"]["metadata"]["namespace"]) == (
        "Lease",
        NODE_LEASE_NAMESPACE,
    )


# --- RBAC --------------------------------------------------------------------------------


def test_forbidden_nodes_leave_leases_working(
    fake_apiserver: FakeApiServer,
    core_api: client.CoreV1Api,
    coordination_api: client.CoordinationV1Api,
) -> None:
    _worker(fake_apiserver.store, "worker-0")
    fake_apiserver.forbid("nodes")

    with pytest.raises(ApiException) as listing:
        core_api.list_node()
    with pytest.raises(ApiException) as status_write:
        core_api.patch_node_status("worker-0", {"status": {}})
    leases = coordination_api.list_lease_for_all_namespaces()

    assert listing.value.status == 403
    assert orjson.loads(listing.value.body)["message"] == (
        f'nodes is forbidden: User "{FORBIDDEN_USER}" cannot list resource "nodes" in API '
        'group "" at the cluster scope'
    )
    assert orjson.loads(status_write.value.body)["message"] == (
        f'nodes "worker-0" is forbidden: User "{FORBIDDEN_USER}" cannot patch resource '
        '"nodes/status" in API group "" at the cluster scope'
    )
    assert [lease.metadata.name for lease in leases.items] == ["worker-0"]

    fake_apiserver.allow()
    assert len(core_api.list_node().items) == 1


def test_forbidding_one_verb_keeps_the_others(
    fake_apiserver: FakeApiServer, core_api: client.CoreV1Api
) -> None:
    _worker(fake_apiserver.store, "worker-0")
    fake_apiserver.forbid("nodes", verbs={"watch"})

    listed = core_api.list_node()
    status, _ = raw(fake_apiserver, f"{NODES_PATH}?watch=1&resourceVersion=0")

    assert len(listed.items) == 1
    assert status == 403


def test_forbid_rejects_a_resource_the_fake_does_not_know(fake_apiserver: FakeApiServer) -> None:
    with pytest.raises(ValueError, match="pods"):
        fake_apiserver.forbid("pods")


# --- what the cluster's actors do --------------------------------------------------------


def test_ready_transition_time_moves_only_when_the_status_changes() -> None:
    store = ObjectStore(clock=lambda: T0)
    _worker(store, "worker-0")

    store.heartbeat_node("worker-0", at=T0 + 40)
    beat = _conditions(store.get_node("worker-0") or {})["Ready"]
    store.set_node_ready("worker-0", True, at=T0 + 50)
    still = _conditions(store.get_node("worker-0") or {})["Ready"]
    store.set_node_ready("worker-0", False, at=T0 + 60)
    down = store.get_node("worker-0") or {}

    assert (beat["lastHeartbeatTime"], beat["lastTransitionTime"]) == (
        "2027-01-15T08:00:40Z",
        "2027-01-15T08:00:00Z",
    )
    assert still["lastTransitionTime"] == "2027-01-15T08:00:00Z"
    ready = _conditions(down)["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        "KubeletNotReady",
        "2027-01-15T08:01:00Z",
    )
    assert {(t["key"], t["effect"]) for t in down["spec"]["taints"]} == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }


def test_a_silent_kubelet_is_marked_unknown_with_its_last_heartbeat_kept() -> None:
    store = ObjectStore(clock=lambda: T0)
    _worker(store, "worker-0")

    store.set_node_ready("worker-0", "Unknown", at=T0 + 50)
    node = store.get_node("worker-0") or {}
    conditions = _conditions(node)
    store.set_node_ready("worker-0", True, at=T0 + 90)
    recovered = store.get_node("worker-0") or {}

    assert {kind: c["status"] for kind, c in conditions.items()} == {
        "MemoryPressure": "Unknown",
        "DiskPressure": "Unknown",
        "PIDPressure": "Unknown",
        "Ready": "Unknown",
    }
    assert conditions["Ready"]["message"] == "Kubelet stopped posting node status."
    assert conditions["Ready"]["lastHeartbeatTime"] == "2027-01-15T08:00:00Z"
    assert {t["key"] for t in node["spec"]["taints"]} == {"node.kubernetes.io/unreachable"}
    assert _conditions(recovered)["Ready"]["status"] == "True"
    assert "taints" not in recovered["spec"]  # omitempty


def test_cordon_sets_unschedulable_and_the_taint_and_uncordon_clears_both() -> None:
    store = ObjectStore(clock=lambda: T0)
    _worker(store, "worker-0")

    cordoned = store.cordon_node("worker-0", at=T0 + 5)
    uncordoned = store.cordon_node("worker-0", False)

    assert cordoned["spec"]["unschedulable"] is True
    assert cordoned["spec"]["taints"] == [
        {
            "key": "node.kubernetes.io/unschedulable",
            "effect": "NoSchedule",
            "timeAdded": "2027-01-15T08:00:05Z",
        }
    ]
    assert "unschedulable" not in uncordoned["spec"]
    assert "taints" not in uncordoned["spec"]


def test_add_node_brings_its_owned_heartbeat_lease_and_remove_takes_both() -> None:
    store = ObjectStore(clock=lambda: T0)

    node = _worker(store, "worker-0")
    lease = store.get_lease(NODE_LEASE_NAMESPACE, "worker-0") or {}
    owner = lease["metadata"]["ownerReferences"][0]

    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Node",
        "worker-0",
        node["metadata"]["uid"],
    )
    assert lease["spec"]["holderIdentity"] == "worker-0"
    assert remove_node(store, "worker-0") is True
    assert store.get_node("worker-0") is None
    assert store.get_lease(NODE_LEASE_NAMESPACE, "worker-0") is None
    assert remove_node(store, "worker-0") is False


# --- the demo cluster --------------------------------------------------------------------


def _nks_staging_web() -> Any:
    state = FakeNksState(
        tenant_id=DEFAULT_TENANT_ID, username=DEFAULT_USERNAME, password=DEFAULT_PASSWORD
    )
    build_scenario(state, "demo")
    return next(c for c in state.clusters.values() if c.name == DEMO_NKS_CLUSTER)


def _ready_of(store: ObjectStore) -> dict[str, str]:
    return {
        node["metadata"]["name"]: _conditions(node)["Ready"]["status"]
        for node in store.list_nodes()
    }


def test_the_demo_serves_the_fake_nks_clusters_nodes_with_their_heartbeat_leases() -> None:
    store = ObjectStore()
    ScenarioRunner(store, make_scenario("demo"), start_time=T0).advance(0)
    cluster = _nks_staging_web()

    nodes = {node["metadata"]["name"]: node for node in store.list_nodes()}
    expected = {
        node.name: (group.name, group.role, f"openstack:///{node.uuid}", node.address)
        for group in cluster.nodegroups
        for node in group.nodes
    }
    assert {
        name: (
            node["metadata"]["labels"]["magnum.openstack.org/nodegroup"],
            node["metadata"]["labels"]["magnum.openstack.org/role"],
            node["spec"]["providerID"],
            node["status"]["addresses"][0]["address"],
        )
        for name, node in nodes.items()
    } == expected
    leases = {lease["metadata"]["name"]: lease for lease in store.list_leases(NODE_LEASE_NAMESPACE)}
    assert set(leases) == set(nodes)
    for name, lease in leases.items():
        assert lease["metadata"]["ownerReferences"][0]["uid"] == nodes[name]["metadata"]["uid"]
        assert nodes[name]["metadata"]["labels"]["kubernetes.io/hostname"] == name


def test_the_demo_node_nks_calls_not_ready_is_unknown_with_an_expired_heartbeat() -> None:
    store = ObjectStore()
    ScenarioRunner(store, make_scenario("demo"), start_time=T0).advance(0)
    not_ready = [n.name for g in _nks_staging_web().nodegroups for n in g.nodes if not n.ready]

    ready = _ready_of(store)

    assert [name for name, status in ready.items() if status != "True"] == not_ready
    lease = store.get_lease(NODE_LEASE_NAMESPACE, not_ready[0]) or {}
    renewed = datetime.fromisoformat(lease["spec"]["renewTime"]).timestamp()
    assert T0 - renewed > lease["spec"]["leaseDurationSeconds"]
    node = store.get_node(not_ready[0]) or {}
    assert {t["key"] for t in node["spec"]["taints"]} == {"node.kubernetes.io/unreachable"}


def test_a_demo_worker_goes_unknown_while_silent_and_comes_back_ready() -> None:
    store = ObjectStore()
    runner = ScenarioRunner(store, make_scenario("demo"), start_time=T0)
    runner.advance(0)
    before = _ready_of(store)
    before_versions = store.resource_version

    runner.advance(90)  # silent since 60 s: not yet 40 s without a heartbeat
    assert _ready_of(store) == before
    assert store.resource_version > before_versions  # heartbeats and status posts go on
    runner.advance(20)  # 110 s: the node controller has marked it Unknown
    during = _ready_of(store)
    [silent] = [name for name in during if during[name] != before[name]]
    assert during[silent] == "Unknown"
    runner.advance(200)  # 310 s: four minutes of silence are over, the kubelet is back
    after = _ready_of(store)
    assert after == before
    ready = _conditions(store.get_node(silent) or {})["Ready"]
    assert ready["lastTransitionTime"] >= "2027-01-15T08:05:00Z"


def test_the_legacy_demo_keeps_its_lease_only_workers() -> None:
    store = ObjectStore()
    ScenarioRunner(store, DemoScenario(seed=7), start_time=T0).advance(0)

    assert store.list_nodes() == []
    assert len(store.list_leases(NODE_LEASE_NAMESPACE)) == 50


@pytest.mark.django_db
def test_setup_demo_registers_the_fake_apiserver_as_the_nks_cluster_it_plays() -> None:
    KubeCluster.objects.create(name="demo", kubeconfig="old")  # a database set up before

    call_command("setup_demo", stdout=StringIO())

    # Renamed, not doubled; and under the name the NKS cluster's pages look for.
    assert list(KubeCluster.objects.values_list("name", flat=True)) == [DEMO_NKS_CLUSTER]
    assert kube_name(DEMO_NKS_CLUSTER) == DEMO_NKS_CLUSTER


# --- bulk traffic ------------------------------------------------------------------------


def test_seed_nodes_registers_ready_nodes_with_owned_leases() -> None:
    store = ObjectStore(clock=lambda: T0)

    names = store.seed_nodes(3, labels={"magnum.openstack.org/nodegroup": "pool"})

    nodes = store.list_nodes()
    leases = store.list_leases(NODE_LEASE_NAMESPACE)
    assert names == ["node-00000", "node-00001", "node-00002"]
    assert [node["metadata"]["name"] for node in nodes] == names
    assert {_conditions(node)["Ready"]["status"] for node in nodes} == {"True"}
    assert nodes[1]["metadata"]["labels"]["magnum.openstack.org/nodegroup"] == "pool"
    assert [lease["metadata"]["ownerReferences"][0]["uid"] for lease in leases] == [
        node["metadata"]["uid"] for node in nodes
    ]
    assert len({node["spec"]["providerID"] for node in nodes}) == 3


def test_bulk_status_posts_move_only_the_heartbeat() -> None:
    clock = [T0]
    store = ObjectStore(clock=lambda: clock[0])
    store.seed_nodes(2)
    before = {node["metadata"]["name"]: node for node in store.list_nodes()}
    start = store.resource_version
    clock[0] = T0 + 30

    last = store.emit_node_status(5)

    assert last == start + 5
    for node in store.list_nodes():
        old = before[node["metadata"]["name"]]
        assert node["spec"] == old["spec"]
        assert node["metadata"]["labels"] == old["metadata"]["labels"]
        for new_condition, old_condition in zip(
            node["status"]["conditions"], old["status"]["conditions"], strict=True
        ):
            assert new_condition["lastHeartbeatTime"] == "2027-01-15T08:00:30Z"
            assert new_condition["lastTransitionTime"] == old_condition["lastTransitionTime"]


def test_the_cluster_scenario_renews_leases_and_posts_statuses() -> None:
    store = ObjectStore()
    runner = ScenarioRunner(store, make_scenario("cluster:20"), start_time=T0)
    runner.advance(0)
    start = store.resource_version

    runner.advance(60)

    assert store.count(NODES) == store.count(LEASES) == 20
    # Six renewals and one status post per node in a minute.
    assert store.resource_version - start == 20 * 6 + 20
    for node in store.list_nodes():
        beat = _conditions(node)["Ready"]["lastHeartbeatTime"]
        assert beat >= "2027-01-15T08:00:00Z"
