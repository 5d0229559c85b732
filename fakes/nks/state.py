"""The fake NKS account: clusters, nodegroups, nodes, events, tokens and running resizes.

Pure data and rules, no HTTP (that is ``server.py``); the objects are in ``model.py`` and the
JSON answers in ``answers.py``. All access goes through ``lock``; tests
may change the objects directly while holding it. Time comes from ``clock`` (``time.time`` by
default, so time-machine moves it too): resizes finish and health data ages lazily, when the
next request looks, which keeps the fake deterministic under a frozen clock.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Iterable
from typing import Any

from fakes.nks.answers import JsonAnswers
from fakes.nks.model import (
    NODE_COUNT_LIMIT,
    SUPPORTED_EVENT_TYPES,
    SUPPORTED_K8S,
    FakeApiError,
    FakeCluster,
    FakeEvent,
    FakeNode,
    FakeNodegroup,
    PendingResize,
    iso_time,
    stable_uuid,
)


class FakeNksState(JsonAnswers):
    def __init__(
        self,
        *,
        tenant_id: str,
        username: str,
        password: str,
        token_ttl: float = 60.0,
        resize_delay: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lock = threading.RLock()
        self.tenant_id = tenant_id
        self.username = username
        self.password = password
        self.token_ttl = token_ttl
        self.resize_delay = resize_delay
        self.clock = clock
        self.public_url = "http://127.0.0.1"
        # When set, generated kubeconfigs point at this Kubernetes API server (the demo's fake).
        self.kube_server_url: str | None = None
        self.clusters: dict[str, FakeCluster] = {}
        self.tokens: dict[str, float] = {}
        self.pending: list[PendingResize] = []
        self.remove_after_list: set[str] = set()
        self.supported_k8s: dict[str, Any] = dict(SUPPORTED_K8S)
        self.supported_event_types: dict[str, Any] = dict(SUPPORTED_EVENT_TYPES)
        self._event_ids = itertools.count(3600)
        self._nodegroup_ids = itertools.count(2600)

    def now(self) -> float:
        return self.clock()

    # ---- building ----------------------------------------------------------------------

    def add_cluster(self, cluster: FakeCluster) -> FakeCluster:
        with self.lock:
            for group in cluster.nodegroups:
                group.serial = group.serial or next(self._nodegroup_ids)
            self.clusters[cluster.uuid] = cluster
            return cluster

    def allocate_address(self, cluster: FakeCluster) -> str:
        with self.lock:
            number = cluster.next_address
            cluster.next_address += 1
            return f"192.168.{number // 250}.{number % 250 + 2}"

    def add_event(
        self,
        cluster: FakeCluster,
        *,
        event_type: str,
        state: str,
        resource: FakeNodegroup | None = None,
        contents: str | None = None,
        details: str | None = None,
        created_at: float | None = None,
        updated_at: float | None = None,
        uuid: str | None = None,
    ) -> FakeEvent:
        with self.lock:
            created = self.now() if created_at is None else created_at
            event = FakeEvent(
                id=next(self._event_ids),
                uuid=uuid or str(uuid_module.uuid4()),
                cluster_uuid=cluster.uuid,
                cluster_name=cluster.name,
                resource_uuid=resource.uuid if resource else cluster.uuid,
                resource_name=resource.name if resource else cluster.name,
                resource_type="nodegroup" if resource else "cluster",
                type=event_type,
                state=state,
                contents=contents,
                details=details,
                created_at=created,
                updated_at=created if updated_at is None else updated_at,
            )
            cluster.events.append(event)
            return event

    # ---- lookups -----------------------------------------------------------------------

    def find_cluster(self, ref: str) -> FakeCluster:
        with self.lock:
            if ref in self.clusters:
                return self.clusters[ref]
            for cluster in self.clusters.values():
                if cluster.name == ref:
                    return cluster
        raise FakeApiError(404, f"Cluster {ref} could not be found.")

    def find_cluster_by_uuid(self, ref: str) -> FakeCluster:
        # The events endpoints take a CLUSTER_UUID only, unlike the rest of the API.
        with self.lock:
            if ref in self.clusters:
                return self.clusters[ref]
        raise FakeApiError(404, f"Cluster {ref} could not be found.")

    @staticmethod
    def find_nodegroup(cluster: FakeCluster, ref: str) -> FakeNodegroup:
        for group in cluster.nodegroups:
            if ref in (group.uuid, group.name):
                return group
        raise FakeApiError(404, f"Nodegroup {ref} could not be found in cluster {cluster.name}.")

    # ---- tokens ------------------------------------------------------------------------

    def issue_token(self, body: Any) -> dict[str, Any]:
        auth = body.get("auth") if isinstance(body, dict) else None
        credentials = auth.get("passwordCredentials") if isinstance(auth, dict) else None
        if not isinstance(auth, dict) or not isinstance(credentials, dict):
            raise FakeApiError(
                400, "Expecting to find auth.passwordCredentials in the request.", keystone=True
            )
        tenant = auth.get("tenantId") or auth.get("tenantName")
        username = credentials.get("username")
        password = credentials.get("password")
        if not all(isinstance(value, str) for value in (tenant, username, password)):
            raise FakeApiError(
                400, "tenantId, username and password must be strings.", keystone=True
            )
        matches = [
            secrets.compare_digest(str(given).encode(), expected.encode())
            for given, expected in (
                (tenant, self.tenant_id),
                (username, self.username),
                (password, self.password),
            )
        ]
        if not all(matches):
            raise FakeApiError(
                401, "The request you have made requires authentication.", keystone=True
            )
        with self.lock:
            issued = self.now()
            expires = issued + self.token_ttl
            token = "gAAAAA" + secrets.token_urlsafe(32)
            self.tokens[token] = expires
        return {
            "access": {
                "token": {
                    "id": token,
                    "issued_at": iso_time(issued, zulu=True, micro=True),
                    "expires": iso_time(expires, zulu=True),
                    "tenant": {"id": self.tenant_id, "name": self.tenant_id, "enabled": True},
                    "audit_ids": [secrets.token_urlsafe(16)],
                },
                "serviceCatalog": [
                    {
                        "name": "kubernetes",
                        "type": "kubernetes",
                        "endpoints": [{"region": "KR1", "publicURL": self.public_url}],
                    }
                ],
                "user": {
                    "id": stable_uuid("user", self.username).replace("-", ""),
                    "name": self.username,
                    "username": self.username,
                    "roles": [{"name": "Member"}],
                },
                "metadata": {"is_admin": 0, "roles": []},
            }
        }

    def token_is_valid(self, token: str | None) -> bool:
        if not token:
            return False
        with self.lock:
            expires = self.tokens.get(token)
            return expires is not None and self.now() < expires

    def expire_all_tokens(self) -> None:
        with self.lock:
            for token in self.tokens:
                self.tokens[token] = float("-inf")

    # ---- time passing ------------------------------------------------------------------

    def advance(self) -> None:
        """Finish every resize whose delay has passed."""
        with self.lock:
            now = self.now()
            due = [resize for resize in self.pending if resize.due_at <= now]
            for resize in due:
                self.pending.remove(resize)
                self._finish_resize(resize, now)

    def finish_all_resizes(self) -> None:
        with self.lock:
            for resize in self.pending:
                resize.due_at = float("-inf")
            self.advance()

    # ---- resize ------------------------------------------------------------------------

    def resize(self, cluster_ref: str, body: Any) -> str:
        """Validate and start a resize the way NKS does; answer the cluster's uuid."""
        with self.lock:
            cluster = self.find_cluster(cluster_ref)
            if not isinstance(body, dict):
                raise FakeApiError(400, "The request body must be a JSON object.")
            group_ref = body.get("nodegroup")
            if not isinstance(group_ref, str) or not group_ref:
                raise FakeApiError(400, "Mandatory field missing: nodegroup.")
            group = self.find_nodegroup(cluster, group_ref)
            if group.role != "worker":
                raise FakeApiError(
                    400, f"Only worker nodegroups can be resized; {group.name} is {group.role}."
                )
            target = body.get("node_count")
            if isinstance(target, bool) or not isinstance(target, int):
                raise FakeApiError(
                    400,
                    f"Invalid input for field/attribute node_count. Value: {target!r}. "
                    "Wrong type. Expected 'int'.",
                )
            if not 1 <= target <= NODE_COUNT_LIMIT:
                raise FakeApiError(
                    400, f"node_count must be between 1 and {NODE_COUNT_LIMIT}, not {target}."
                )
            current = group.node_count
            to_remove = self._validate_removals(group, body.get("nodes_to_remove"), target)
            if group.in_progress or cluster.in_progress:
                raise FakeApiError(
                    409,
                    f"Nodegroup {group.name} is being updated ({group.status}); "
                    "wait until the current operation finishes.",
                )
            if target == current:
                raise FakeApiError(400, f"Nodegroup {group.name} already has {current} nodes.")

            now = self.now()
            group.status = "UPDATE_IN_PROGRESS"
            group.status_reason = "Stack UPDATE started"
            group.updated_at = now
            cluster.status = "UPDATE_IN_PROGRESS"
            cluster.status_reason = None
            cluster.updated_at = now
            direction = "OUT" if target > current else "IN"
            event = self.add_event(
                cluster,
                event_type=f"NODEGROUP_SCALE_{direction}",
                state="IN_PROGRESS",
                resource=group,
                contents=f"Resizing nodegroup {group.name} from {current} to {target} nodes",
                details=json.dumps(body, sort_keys=True),
            )
            self.pending.append(
                PendingResize(
                    cluster_uuid=cluster.uuid,
                    nodegroup_uuid=group.uuid,
                    target=target,
                    nodes_to_remove=to_remove,
                    event_uuid=event.uuid,
                    due_at=now + self.resize_delay,
                )
            )
            return cluster.uuid

    @staticmethod
    def _validate_removals(group: FakeNodegroup, value: Any, target: int) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise FakeApiError(400, "nodes_to_remove must be a list of node UUIDs.")
        if not value:
            return []
        current = group.node_count
        if target >= current:
            raise FakeApiError(400, "nodes_to_remove can only be given when scaling in.")
        members = {node.uuid for node in group.nodes}
        strangers = [item for item in value if item not in members]
        if strangers:
            raise FakeApiError(
                400, f"Nodes {', '.join(strangers)} do not belong to nodegroup {group.name}."
            )
        unique = list(dict.fromkeys(value))
        if len(unique) > current - target:
            raise FakeApiError(
                400,
                f"nodes_to_remove lists {len(unique)} nodes, but resizing {group.name} from "
                f"{current} to {target} removes {current - target}.",
            )
        return unique

    def _finish_resize(self, resize: PendingResize, now: float) -> None:
        cluster = self.clusters.get(resize.cluster_uuid)
        if cluster is None:
            return
        group = next((g for g in cluster.nodegroups if g.uuid == resize.nodegroup_uuid), None)
        event = next((e for e in cluster.events if e.uuid == resize.event_uuid), None)
        if group is None:
            return
        if group.fail_resizes_with:
            # Only the nodegroup's stack failed; the cluster itself is intact.
            group.status = "UPDATE_FAILED"
            group.status_reason = group.fail_resizes_with
            cluster.status = "UPDATE_COMPLETE"
            outcome, contents = "FAIL", group.fail_resizes_with
        else:
            self._apply_size(cluster, group, resize.target, resize.nodes_to_remove)
            group.status = "UPDATE_COMPLETE"
            group.status_reason = "Stack UPDATE completed successfully"
            cluster.status = "UPDATE_COMPLETE"
            cluster.status_reason = None
            outcome, contents = "SUCCESS", None
        group.updated_at = cluster.updated_at = now
        if event is not None:
            event.state = outcome
            event.contents = contents
            event.updated_at = now

    def _apply_size(
        self, cluster: FakeCluster, group: FakeNodegroup, target: int, chosen: Iterable[str]
    ) -> None:
        removing = set(chosen)
        group.nodes = [node for node in group.nodes if node.uuid not in removing]
        # NKS picks the remaining victims at random; the newest nodes keep the fake predictable.
        del group.nodes[target:]
        self.add_nodes(cluster, group, target - group.node_count)

    def add_nodes(
        self, cluster: FakeCluster, group: FakeNodegroup, count: int, *, ready: bool = True
    ) -> list[FakeNode]:
        """Add ``count`` nodes named like NKS names them (``<prefix>-node-<n>``)."""
        with self.lock:
            added = []
            for _ in range(max(0, count)):
                node = FakeNode(
                    uuid=stable_uuid(group.uuid, "node", str(group.next_node_index)),
                    name=f"{group.node_name_prefix or group.name}-node-{group.next_node_index}",
                    address=self.allocate_address(cluster),
                    ready=ready,
                )
                group.next_node_index += 1
                group.nodes.append(node)
                added.append(node)
            return added
