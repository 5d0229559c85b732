"""NodeIngestor: coalesced writes, heartbeats that write nothing, Ready history, deletions
and their reversal, restarts, hostile input, and flushes that fail part way.

These run on SQLite by default (the ORM upsert) and on PostgreSQL when DATABASE_URL says so
(the json_to_recordset upsert); both must behave the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import DataError, OperationalError, connection

from leases.models import KubeCluster, Node, NodeReadyChange
from leases.node_ingest import NodeIngestor

pytestmark = pytest.mark.django_db

_NODE_INSERT = re.compile(r'INSERT INTO "?leases_node"?\s')


@pytest.fixture
def cluster() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


def node(
    name: str = "worker-0",
    ready: str = "True",
    *,
    beat: int = 0,
    since: str = "2027-01-15T08:00:00Z",
    reason: str = "KubeletReady",
    message: str = "kubelet is posting ready status",
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
    resource_version: int = 1,
) -> dict[str, Any]:
    """A Node event's object; `beat` moves only the heartbeat (and the resourceVersion)."""
    heartbeat = f"2027-01-15T08:{beat // 60:02d}:{beat % 60:02d}Z"
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(resource_version + beat),
            "creationTimestamp": "2027-01-14T08:00:00Z",
            "labels": labels
            if labels is not None
            else {"kubernetes.io/hostname": name, "magnum.openstack.org/nodegroup": "pool-a"},
        },
        "spec": {"providerID": f"openstack:///{name}-uuid", "unschedulable": unschedulable},
        "status": {
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": "2027-01-15T07:00:00Z",
                    "reason": "KubeletHasSufficientMemory",
                    "message": "kubelet has sufficient memory available",
                },
                {
                    "type": "Ready",
                    "status": ready,
                    "lastHeartbeatTime": heartbeat,
                    "lastTransitionTime": since,
                    "reason": reason,
                    "message": message,
                },
            ],
            "addresses": [{"type": "InternalIP", "address": "192.168.0.10"}],
            "nodeInfo": {"kubeletVersion": "v1.24.17"},
        },
    }


def changes() -> list[tuple[str, str, str]]:
    return list(
        NodeReadyChange.objects.order_by("id").values_list("node__name", "from_status", "to_status")
    )


@contextmanager
def database_fails(
    when: Callable[[str, Any], bool], error: type[Exception] = OperationalError
) -> Iterator[list[str]]:
    """The database answers the matching statements with `error`, at the connection."""
    failed: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if when(sql, params):
            failed.append(sql)
            raise error("the database went away (injected)")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield failed


def node_insert_naming(name: str) -> Callable[[str, Any], bool]:
    """The upsert whose rows include `name` (ORM parameters or PostgreSQL's JSON batch)."""

    def matches(sql: str, params: Any) -> bool:
        return bool(_NODE_INSERT.match(sql.lstrip())) and name in repr(params)

    return matches


# --- rows and coalescing -----------------------------------------------------------------


def test_first_sight_writes_the_node_and_its_appearance(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)

    assert ingestor.observe(node())
    result = ingestor.flush()

    row = Node.objects.get()
    assert (result.nodes_written, result.ready_changes_written, result.events) == (1, 1, 1)
    assert (row.name, row.uid, row.ready, row.nodegroup_label) == (
        "worker-0",
        "uid-worker-0",
        "True",
        "pool-a",
    )
    assert row.ready_since == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    assert row.provider_id == "openstack:///worker-0-uuid"
    assert (row.kubelet_version, row.internal_address) == ("v1.24.17", "192.168.0.10")
    assert row.conditions["Ready"]["reason"] == "KubeletReady"
    assert row.deleted_at is None
    assert changes() == [("worker-0", "", "True")]


def test_many_events_between_flushes_are_one_row_write(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    for beat in range(50):
        ingestor.observe(node(beat=beat, unschedulable=beat >= 25))

    result = ingestor.flush()

    assert (result.events, result.nodes_written) == (50, 1)
    assert Node.objects.get().unschedulable is True


def test_a_heartbeat_only_update_writes_no_row(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node(beat=0))
    ingestor.flush()
    before = Node.objects.get()

    for beat in range(10, 60, 10):
        ingestor.observe(node(beat=beat))
    result = ingestor.flush()

    after = Node.objects.get()
    assert (result.events, result.nodes_written, result.unchanged) == (5, 0, 1)
    assert result.ready_changes_written == 0
    assert (after.observed_at, after.resource_version) == (before.observed_at, "1")


def test_a_change_the_dashboard_keeps_is_written(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()

    ingestor.observe(node(beat=10, unschedulable=True))
    result = ingestor.flush()

    assert (result.nodes_written, result.unchanged, result.ready_changes_written) == (1, 0, 0)
    assert Node.objects.get().unschedulable is True


# --- Ready history -----------------------------------------------------------------------


def test_a_ready_change_records_one_history_row(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()

    ingestor.observe(
        node(
            "worker-0",
            "Unknown",
            beat=50,
            since="2027-01-15T08:00:50Z",
            reason="NodeStatusUnknown",
            message="Kubelet stopped posting node status.",
        )
    )
    ingestor.observe(node("worker-0", "Unknown", beat=50, since="2027-01-15T08:00:50Z"))
    result = ingestor.flush()

    change = NodeReadyChange.objects.order_by("id").last()
    assert change is not None
    assert result.ready_changes_written == 1
    assert (change.from_status, change.to_status) == ("True", "Unknown")
    assert (change.reason, change.message) == (
        "NodeStatusUnknown",
        "Kubelet stopped posting node status.",
    )
    assert change.transitioned_at == datetime(2027, 1, 15, 8, 0, 50, tzinfo=UTC)
    assert change.observed_at is not None
    assert change.node == Node.objects.get()
    assert Node.objects.get().ready == "Unknown"


def test_changes_inside_one_batch_are_all_recorded(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()

    ingestor.observe(node(ready="False", beat=10))
    ingestor.observe(node(ready="Unknown", beat=20))
    ingestor.observe(node(ready="True", beat=30))
    result = ingestor.flush()

    # The row ends as it began (Ready True since 08:00): no write, but every change kept.
    assert (result.nodes_written, result.ready_changes_written) == (0, 3)
    assert changes()[1:] == [
        ("worker-0", "True", "False"),
        ("worker-0", "False", "Unknown"),
        ("worker-0", "Unknown", "True"),
    ]


def test_a_reason_change_without_a_status_change_is_not_history(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node(ready="False", reason="KubeletNotReady"))
    ingestor.flush()

    ingestor.observe(node(ready="False", reason="PLEG is not healthy", beat=10))
    result = ingestor.flush()

    assert (result.nodes_written, result.ready_changes_written) == (1, 0)
    assert Node.objects.get().conditions["Ready"]["reason"] == "PLEG is not healthy"


# --- deletions, reconcile, restarts ------------------------------------------------------


def test_deletion_marks_the_node_and_keeps_its_history(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()

    ingestor.observe_deleted("worker-0")
    result = ingestor.flush()

    row = Node.objects.get()
    assert result.deletions_written == 1
    assert row.deleted_at is not None
    assert row.ready_changes.count() == 1
    assert not Node.objects.present().exists()


def test_a_deleted_node_that_comes_back_is_present_again(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()
    ingestor.observe_deleted("worker-0")
    ingestor.flush()

    ingestor.observe(node())  # the same object as before its deletion
    result = ingestor.flush()

    assert result.nodes_written == 1
    assert Node.objects.get().deleted_at is None
    assert changes() == [("worker-0", "", "True"), ("worker-0", "", "True")]


def test_a_node_deleted_and_recreated_between_flushes_stays_present(
    cluster: KubeCluster,
) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()

    ingestor.observe_deleted("worker-0")
    ingestor.observe(node())
    result = ingestor.flush()

    assert result.deletions_written == 0
    assert Node.objects.get().deleted_at is None


def test_reconcile_marks_nodes_missing_from_a_relist_as_deleted(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    for name in ("worker-0", "worker-1", "worker-2"):
        ingestor.observe(node(name))
    ingestor.flush()

    gone = ingestor.reconcile({"worker-1"})
    result = ingestor.flush()

    assert gone == 2
    assert result.deletions_written == 2
    assert list(Node.objects.present().values_list("name", flat=True)) == ["worker-1"]


def test_a_restarted_ingestor_rewrites_nothing_and_duplicates_no_history(
    cluster: KubeCluster,
) -> None:
    first = NodeIngestor(cluster.id)
    first.observe(node(labels={"b": "2", "a": "1", "magnum.openstack.org/nodegroup": "x"}))
    first.observe(node("worker-1", ready="False", reason="KubeletNotReady"))
    first.flush()

    # The process dies; a new watcher relists and sees the same state (a later heartbeat).
    second = NodeIngestor(cluster.id)
    second.observe(node(labels={"a": "1", "b": "2", "magnum.openstack.org/nodegroup": "x"}))
    second.observe(node("worker-1", ready="False", reason="KubeletNotReady", beat=40))
    result = second.flush()

    assert (result.nodes_written, result.unchanged, result.ready_changes_written) == (0, 2, 0)
    assert NodeReadyChange.objects.count() == 2
    second.observe(node("worker-1", ready="True", beat=50))
    assert second.flush().ready_changes_written == 1


def test_a_change_unflushed_by_a_dead_watcher_is_recorded_by_the_next(
    cluster: KubeCluster,
) -> None:
    first = NodeIngestor(cluster.id)
    first.observe(node())
    first.flush()
    first.observe(node(ready="False", beat=10))  # seen, but the process dies before the flush

    second = NodeIngestor(cluster.id)
    second.observe(node(ready="False", beat=20))
    second.flush()

    assert changes() == [("worker-0", "", "True"), ("worker-0", "True", "False")]


def test_a_node_created_and_deleted_within_one_batch_leaves_nothing(
    cluster: KubeCluster,
) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.observe(node(ready="False", beat=10))
    ingestor.observe_deleted("worker-0")

    result = ingestor.flush()

    assert (result.nodes_written, result.ready_changes_written, result.events) == (0, 0, 3)
    assert not Node.objects.exists()


def test_bookmarks_count_as_events(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.count_event()
    ingestor.count_event()

    result = ingestor.flush()

    assert (result.events, result.nodes_written, result.drained) == (2, 0, True)


def test_nodes_of_two_clusters_do_not_mix(cluster: KubeCluster) -> None:
    other = KubeCluster.objects.create(name="other")
    NodeIngestor(cluster.id).observe(node())
    ingestor = NodeIngestor(other.id)
    ingestor.observe(node(ready="False"))
    ingestor.flush()

    assert list(Node.objects.values_list("cluster__name", "ready")) == [("other", "False")]


# --- hostile input -----------------------------------------------------------------------


def test_objects_that_are_not_nodes_are_refused(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)

    assert not ingestor.observe({"metadata": {"namespace": "no-name"}})
    assert not ingestor.observe({"spec": {}})
    assert not ingestor.observe("node")  # type: ignore[arg-type]
    assert ingestor.flush().nodes_written == 0


def test_nul_characters_and_huge_labels_are_stored_cleaned_and_counted(
    cluster: KubeCluster,
) -> None:
    ingestor = NodeIngestor(cluster.id)
    labels = {f"filler-{index:04d}": "x" * 100 for index in range(1000)}
    labels["magnum.openstack.org/nodegroup"] = "pool\x00-a"
    ingestor.observe(node("worker-\x000", message="kubelet\x00 ready", labels=labels))
    ingestor.observe(node("worker-1"))

    result = ingestor.flush()

    row = Node.objects.get(name="worker-0")
    assert (result.nodes_written, result.objects_cleaned, result.skipped) == (2, 1, 1)
    assert row.conditions["Ready"]["message"] == "kubelet ready"
    assert row.ready_changes.get().message == "kubelet ready"
    assert len(row.labels) == 256
    assert all(len(value) <= 63 for value in row.labels.values())
    ingestor.observe_deleted("worker-\x000")  # a DELETED event names it the same way
    assert ingestor.flush().deletions_written == 1


def test_a_node_the_database_refuses_is_skipped_alone(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    for index in range(4):
        ingestor.observe(node(f"worker-{index}"))

    with database_fails(node_insert_naming("worker-2"), DataError):
        result = ingestor.flush()

    assert (result.nodes_written, result.nodes_skipped) == (3, 1)
    assert sorted(Node.objects.values_list("name", flat=True)) == [
        "worker-0",
        "worker-1",
        "worker-3",
    ]
    ingestor.observe(node("worker-2", beat=10))  # later, a value the database takes
    assert ingestor.flush().nodes_written == 1


# --- failures part way -------------------------------------------------------------------


def test_a_flush_that_fails_midway_requeues_and_loses_nothing(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id, chunk_size=2)
    for index in range(5):
        ingestor.observe(node(f"worker-{index}"))
    ingestor.flush()
    for index in range(5):
        ingestor.observe(node(f"worker-{index}", ready="False", beat=10))

    with database_fails(node_insert_naming("worker-3")) as failed, pytest.raises(OperationalError):
        ingestor.flush()

    assert failed
    # The first two chunks committed with their history; the rest waits.
    assert sorted(Node.objects.filter(ready="False").values_list("name", flat=True)) == [
        "worker-0",
        "worker-1",
    ]
    ingestor.observe(node("worker-4", ready="Unknown", beat=20))  # newer than the requeued
    result = ingestor.flush()

    assert result.nodes_written == 3
    assert dict(Node.objects.values_list("name", "ready")) == {
        "worker-0": "False",
        "worker-1": "False",
        "worker-2": "False",
        "worker-3": "False",
        "worker-4": "Unknown",
    }
    history = [change for change in changes() if change[1]]
    assert sorted(history) == sorted(
        [(f"worker-{index}", "True", "False") for index in range(5)]
        + [("worker-4", "False", "Unknown")]
    )


def test_a_failed_deletion_is_retried_by_the_next_flush(cluster: KubeCluster) -> None:
    ingestor = NodeIngestor(cluster.id)
    ingestor.observe(node())
    ingestor.flush()
    ingestor.observe_deleted("worker-0")

    def deletion(sql: str, params: Any) -> bool:
        return bool(re.match(r'UPDATE "?leases_node"?\s', sql.lstrip()))

    with database_fails(deletion), pytest.raises(OperationalError):
        ingestor.flush()
    assert Node.objects.present().exists()

    assert ingestor.flush().deletions_written == 1
    assert not Node.objects.present().exists()
