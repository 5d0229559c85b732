"""What the watcher holds (issue 22): a long list is read in pages, each lease stored once
(no loss at page boundaries, continue tokens followed, an expired continue answered by a
full relist), a list waits for the flushes instead of holding every object, and the state
kept per stored lease and node is compact. Over real HTTP against the fake API server."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.kube import FakeApiServer
from leases import kube
from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease, LeaseTransition, Node
from leases.node_ingest import NodeIngestor
from tests.leases.test_watcher import (
    RunningWatcher,
    database_matches_server,
    eventually,
    register,
)

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_LIST_PATH = "/apis/coordination.k8s.io/v1/leases"
# Three pages of LIST_PAGE_SIZE (500), the last one short.
MANY = 2 * kube.LIST_PAGE_SIZE + 234


def lease_lists(server: FakeApiServer) -> list[Any]:
    return [
        record
        for record in server.requests
        if record.path == LEASE_LIST_PATH and record.query.get("watch") != "true"
    ]


def stored_once(cluster: KubeCluster, names: list[str]) -> None:
    rows = list(Lease.objects.filter(cluster=cluster).live().values_list("namespace", "name"))
    assert len(rows) == len(set(rows)) == len(names)
    assert set(rows) == {("kube-node-lease", name) for name in names}


def test_a_list_of_several_pages_stores_every_lease_once(apiserver: FakeApiServer) -> None:
    names = apiserver.store.seed_node_leases(MANY)
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: database_matches_server(apiserver, cluster), timeout=30)
    stored_once(cluster, names)
    lists = lease_lists(apiserver)
    # Three pages: the first without a continue token, each next one with the token the
    # page before it ended with, and nothing asked twice.
    pages = [record for record in lists if record.query.get("limit") == "500"]
    assert [bool(record.query.get("continue")) for record in pages] == [False, True, True]
    assert len({record.query.get("continue") for record in pages}) == 3
    assert all(record.status == 200 for record in pages)
    # Listing is no holder change.
    assert not LeaseTransition.objects.filter(lease__cluster=cluster).exists()


def test_an_expired_continue_token_lists_again_from_the_start(apiserver: FakeApiServer) -> None:
    names = apiserver.store.seed_node_leases(MANY)
    # Each page waits, so the store can be compacted between the first page and the next:
    # the next page's continue token is then too old (410 Expired), as after etcd compacts.
    apiserver.slow_lists(0.4)
    cluster = register(apiserver)
    compacted = threading.Event()

    def compact_after_the_first_page() -> None:
        deadline = time.monotonic() + 20
        while not lease_lists(apiserver) and time.monotonic() < deadline:
            time.sleep(0.005)
        # Changed meanwhile: the relist must see the lease gone and the new one.
        apiserver.store.delete_lease("kube-node-lease", names[0])
        apiserver.store.apply_lease("kube-node-lease", "node-late", {"holderIdentity": "node-late"})
        apiserver.store.compact()
        compacted.set()

    compactor = threading.Thread(target=compact_after_the_first_page, daemon=True)
    compactor.start()
    with RunningWatcher(cluster):
        assert compacted.wait(25)
        eventually(lambda: any(r.status == 410 for r in lease_lists(apiserver)), timeout=10)
        apiserver.slow_lists(None)
        eventually(lambda: database_matches_server(apiserver, cluster), timeout=30)
    compactor.join(timeout=5)
    lists = lease_lists(apiserver)
    expired = next(index for index, record in enumerate(lists) if record.status == 410)
    assert lists[expired].query.get("continue")
    # The list after it starts again: no continue token.
    assert not lists[expired + 1].query.get("continue")
    stored_once(cluster, [*names[1:], "node-late"])
    assert Lease.objects.get(cluster=cluster, name=names[0]).deleted_at is not None


def test_a_list_waits_for_flushes_instead_of_holding_every_lease(
    apiserver: FakeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small allowance, so a list of a few pages must wait for flushes between them.
    monkeypatch.setattr(LeaseIngestor, "max_pending", 200)
    names = apiserver.store.seed_node_leases(MANY)
    cluster = register(apiserver)
    most = 0
    with RunningWatcher(cluster, flush_interval=0.2) as watcher:
        while watcher.leases is None:
            time.sleep(0.001)
        ingestor = watcher.leases.resource.ingestor
        deadline = time.monotonic() + 30
        while Lease.objects.filter(cluster=cluster).count() < MANY:
            most = max(most, ingestor.pending_objects())
            assert time.monotonic() < deadline, "the list was not stored"
            time.sleep(0.002)
    stored_once(cluster, names)
    # At most the allowance and one page: the list read no page while the flushes were
    # behind (without the wait, the whole list would have waited for the first flushes).
    assert 0 < most <= 200 + kube.LIST_PAGE_SIZE


def deep_size(root: object, seen: set[int]) -> int:
    """Bytes of `root` and everything it refers to, each object counted once (so a string
    shared by many keys costs once); small ints and singletons are no per-object cost."""
    size = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, bool | type):
            continue
        if isinstance(obj, int) and -5 <= obj <= 256:
            continue
        seen.add(id(obj))
        size += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, tuple | list | set | frozenset):
            stack.extend(obj)
        elif hasattr(obj, "__slots__"):
            stack.extend(getattr(obj, slot) for slot in obj.__slots__ if hasattr(obj, slot))
    return size


def per_object(ingestor: object, fields: tuple[str, ...], count: int) -> float:
    seen: set[int] = set()
    return sum(deep_size(getattr(ingestor, name), seen) for name in fields) / count


# What the issue allows per stored object (about 2 KB, RSS), for the ingestor's own part.
MAX_STATE_BYTES_PER_OBJECT = 1000


@pytest.fixture
def listed_cluster(apiserver: FakeApiServer) -> Iterator[tuple[KubeCluster, Any]]:
    apiserver.store.seed_nodes(MANY)  # each Node with its heartbeat Lease
    cluster = register(apiserver)
    with RunningWatcher(cluster) as watcher:
        eventually(
            lambda: (
                Lease.objects.filter(cluster=cluster).count() == MANY
                and Node.objects.filter(cluster=cluster).count() == MANY
            ),
            timeout=30,
        )
        assert watcher.leases is not None and watcher.nodes is not None
        leases, nodes = watcher.leases.resource.ingestor, watcher.nodes.resource.ingestor
        eventually(lambda: not leases.pending_objects() and not nodes.pending_objects())
        yield cluster, watcher


def test_the_state_kept_per_stored_lease_and_node_is_compact(
    listed_cluster: tuple[KubeCluster, Any],
) -> None:
    _, watcher = listed_cluster
    leases = watcher.leases.resource.ingestor
    nodes = watcher.nodes.resource.ingestor
    assert isinstance(leases, LeaseIngestor) and isinstance(nodes, NodeIngestor)
    lease_bytes = per_object(
        leases, ("_known", "_lease_ids", "_renewable", "_identities", "_tenures"), MANY
    )
    node_bytes = per_object(nodes, ("_known", "_stored", "_node_ids"), MANY)
    print(f"ingestor state: {lease_bytes:.0f} bytes per lease, {node_bytes:.0f} per node")
    assert lease_bytes < MAX_STATE_BYTES_PER_OBJECT, lease_bytes
    assert node_bytes < MAX_STATE_BYTES_PER_OBJECT, node_bytes
    # One tuple per lease, shared by every map the ingestor keeps.
    key = next(iter(leases._known))
    assert next(k for k in leases._lease_ids if k == key) is key
    assert next(k for k in leases._renewable if k == key) is key


def test_a_restarted_ingestor_keeps_the_same_compact_state(
    listed_cluster: tuple[KubeCluster, Any],
) -> None:
    cluster, _ = listed_cluster
    restarted = LeaseIngestor(cluster.id)  # loaded from the database
    lease_bytes = per_object(restarted, ("_known", "_lease_ids", "_identities"), MANY)
    assert lease_bytes < MAX_STATE_BYTES_PER_OBJECT, lease_bytes
    # One namespace string for all of them, and a node lease's holder is its name's string.
    assert len({id(namespace) for namespace, _ in restarted._known}) == 1
    key = next(iter(restarted._known))
    assert restarted._known[key].holder is key[1]  # a node lease's holder is its name
