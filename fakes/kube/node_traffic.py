"""Nodes by the thousand, for benchmarks and big scenarios: a fleet of kubelets registered
at once (each Node with its heartbeat Lease), and the status posts kubelets send where only
lastHeartbeatTime moves, written in batches under one lock like the Lease renewals.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from fakes.kube.kubelet import KUBELET_CONDITIONS, kubelet_labels, kubelet_status
from fakes.kube.node_schema import clean_node_status, format_node_time
from fakes.kube.renewals import RenewalTraffic, _collector_paused
from fakes.kube.resources import LEASES, NODES, format_micro_time

_KUBELET_OWNED = frozenset(kind for kind, *_ in KUBELET_CONDITIONS)


class NodeTraffic(RenewalTraffic):
    """Bulk Node writes; the one-at-a-time helpers are NodeOperations'."""

    _node_status_cursor = 0  # round-robin position of the next status post

    def seed_nodes(
        self,
        count: int,
        *,
        name_format: str = "node-{index:05d}",
        lease_namespace: str = "kube-node-lease",
        lease_duration_seconds: int = 40,
        labels: Mapping[str, str] | None = None,
        at: float | None = None,
        with_leases: bool = True,
    ) -> list[str]:
        """Register `count` Ready kubelets at once (at `at`, the store's clock by default):
        each Node (ADDED) with its heartbeat Lease owned by it (ADDED), as `add_node` does
        one by one. Returns the names. `with_leases=False` registers the Nodes alone (a
        benchmark that measures what Nodes cost apart from their Leases)."""
        now = self._clock() if at is None else at
        lease_stamp = format_micro_time(now)
        names = [name_format.format(index=index) for index in range(count)]
        bodies = []
        for index, name in enumerate(names):
            address = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
            status = kubelet_status(name, at=now, internal_ip=address)
            bodies.append(
                (name, clean_node_status(status, "v1"), kubelet_labels(name, extra=labels))
            )
        with self._lock, _collector_paused():
            for index, (name, status, node_labels) in enumerate(bodies):
                node = self._new_object_locked(
                    NODES,
                    "",
                    name,
                    {"labels": node_labels},
                    {"providerID": f"openstack:///{uuid.UUID(int=index + 1)}"},
                    created_at=now,
                    status=status,
                )
                owner = {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                }
                if not with_leases:
                    continue
                spec: dict[str, Any] = {
                    "holderIdentity": name,
                    "leaseDurationSeconds": lease_duration_seconds,
                    "renewTime": lease_stamp,
                }
                self._new_object_locked(
                    LEASES,
                    lease_namespace,
                    name,
                    {"ownerReferences": [owner]},
                    spec,
                    created_at=now,
                )
        return names

    def emit_node_status(self, count: int, *, rate: float | None = None) -> int:
        """Re-post Node statuses round-robin, `count` MODIFIED events in total, each moving
        only the kubelet's conditions' lastHeartbeatTime (what the ingest must not rewrite).

        Paced like emit_renewals: as fast as it can in batches of 1,000 under one lock
        (never more than half the event window ahead of the slowest watch), or at `rate`
        events per second. Returns the resourceVersion of the last post.
        """
        with self._lock:
            keys = list(self._keys_locked(NODES))
        if not keys:
            raise ValueError("no nodes to post status for")
        nodes = self._objects[NODES.plural]
        for size in self._paced_batches(count, rate):
            stamp = format_node_time(self._clock())
            with self._lock, _collector_paused():
                cursor = self._node_status_cursor
                for offset in range(size):
                    key = keys[(cursor + offset) % len(keys)]
                    old = nodes.get(key)
                    if old is None:
                        continue  # deleted since: a kubelet that is gone posts nothing
                    resource_version = self._resource_version + 1
                    conditions = [
                        {**item, "lastHeartbeatTime": stamp}
                        if item.get("type") in _KUBELET_OWNED
                        else item
                        for item in old["status"].get("conditions", ())
                    ]
                    obj = {
                        "metadata": {**old["metadata"], "resourceVersion": str(resource_version)},
                        "spec": old["spec"],
                        "status": {**old["status"], "conditions": conditions},
                    }
                    self._commit_locked(NODES, key, obj, resource_version, "MODIFIED", notify=False)
                self._node_status_cursor = (cursor + size) % len(keys)
                self._after_append_locked()
        return self.resource_version
