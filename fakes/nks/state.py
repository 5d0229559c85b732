"""The fake NKS account: clusters, nodegroups, nodes, events, tokens and running resizes.

Pure data and rules, no HTTP (that is ``server.py``). All access goes through ``lock``; tests
may change the objects directly while holding it. Time comes from ``clock`` (``time.time`` by
default, so time-machine moves it too): resizes finish and health data ages lazily, when the
next request looks, which keeps the fake deterministic under a frozen clock.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# Seeds stable_uuid(): the demo keeps the same ids across restarts, so a dashboard database
# that has polled the demo once still recognises its clusters after `make run` again.
_FAKE_NAMESPACE = uuid_module.UUID("5f0c3a52-5d0b-4d8e-9a55-6f1c2b3d4e5f")

NODE_COUNT_LIMIT = 10  # the guide's default quota for node_count in a resize

SUPPORTED_K8S = {
    "v1.26.3": False,
    "v1.27.3": False,
    "v1.28.3": False,
    "v1.29.3": True,
    "v1.30.3": True,
    "v1.31.4": True,
    "v1.32.3": True,
}

SUPPORTED_EVENT_TYPES = {
    "CLUSTER_CREATE": "클러스터 생성",
    "CLUSTER_DELETE": "클러스터 삭제",
    "NODEGROUP_CREATE": "노드 그룹 생성",
    "NODEGROUP_DELETE": "노드 그룹 삭제",
    "CLUSTER_RESIZE": "클러스터 크기 조정",
    "NODEGROUP_SCALE_OUT": "노드 증설",
    "NODEGROUP_SCALE_IN": "노드 감축",
    "NODEGROUP_UPGRADE": "노드 그룹 업그레이드",
    "NODEGROUP_SET_CLUSTER_AUTOSCALER": "클러스터 오토스케일러 설정 변경",
    "K8S_API_NOT_WORKING": "kube-apiserver 정지",
    "ALL_NODES_NOT_READY": "모든 노드 정지 상태",
    "AUTO_HEALING": "오토 힐링",
}

# Marks "serve the computed value" for fields a test may replace with anything, None included.
COMPUTED: Any = object()


def stable_uuid(*parts: str) -> str:
    return str(uuid_module.uuid5(_FAKE_NAMESPACE, "/".join(parts)))


def iso_time(epoch: float, *, zulu: bool = False, micro: bool = False) -> str:
    """``2021-08-05T01:48:39+00:00`` as in the guide, or with ``Z`` (both occur in the wild)."""
    moment = datetime.fromtimestamp(epoch if micro else int(epoch), UTC)
    text = moment.isoformat(timespec="microseconds" if micro else "seconds")
    return text.replace("+00:00", "Z") if zulu else text


class FakeApiError(Exception):
    """An error answer. ``keystone`` selects the identity service's error shape."""

    def __init__(self, status: int, detail: str, *, keystone: bool = False) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.keystone = keystone


@dataclass
class FakeNode:
    uuid: str
    name: str
    address: str
    ready: bool = True


@dataclass
class FakeNodegroup:
    uuid: str
    name: str
    nodes: list[FakeNode]
    role: str = "worker"
    status: str = "CREATE_COMPLETE"
    status_reason: str | None = "Stack CREATE completed successfully"
    min_node_count: int = 1
    max_node_count: int | None = 10
    flavor_id: str = "069bdcff-e9b6-42c8-83ce-4c743ea30394"
    image_id: str = "96aff4ab-d221-4688-8364-2fcf02d50547"
    stack_id: str = ""
    is_default: bool = False
    labels: dict[str, Any] = field(default_factory=dict)
    # When set, every resize of this nodegroup fails with this reason.
    fail_resizes_with: str | None = None
    # Quirk: counts rendered as strings ("2") in the list answer.
    counts_as_strings: bool = False
    list_overrides: dict[str, Any] = field(default_factory=dict)
    detail_overrides: dict[str, Any] = field(default_factory=dict)
    node_name_prefix: str = ""
    next_node_index: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    serial: int = 0

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def in_progress(self) -> bool:
        return self.status.endswith("_IN_PROGRESS")


@dataclass
class FakeEvent:
    id: int
    uuid: str
    cluster_uuid: str
    cluster_name: str
    resource_uuid: str
    resource_name: str
    resource_type: str
    type: str
    state: str
    contents: str | None
    details: str | None
    created_at: float
    updated_at: float


@dataclass
class FakeCluster:
    uuid: str
    name: str
    nodegroups: list[FakeNodegroup]
    status: str = "CREATE_COMPLETE"
    status_reason: str | None = None
    labels: dict[str, Any] = field(default_factory=dict)
    flavor_id: str = "6ef27f21-c774-4c0e-84ff-7dd4a762571f"
    keypair: str = "oncall-keypair"
    stack_id: str = ""
    project_id: str = ""
    fixed_network: str = "eb212079-b6ec-430c-ba57-14280a457bcb"
    fixed_subnet: str = "4fdf5b80-3d35-43f5-a5c1-010a3b6c8e90"
    created_at: float = 0.0
    updated_at: float = 0.0
    # How health_status_reason is written: "flat" dotted keys, "nested" objects, or "per-node"
    # (the guide's single-cluster example: "<node>.Ready" keys and a lower-case "api": "ok").
    health_style: str = "flat"
    # What health_status says while the data is fresh ("HEALTHY" in the guide's examples).
    fresh_health_status: str = "FRESH"
    health_refresh_interval: float = 30.0
    # Epoch after which the health data stops being refreshed (None: it never stops).
    health_stops_at: float | None = None
    stale_after: float = 90.0
    rotten_after: float = 600.0
    api_working: bool = True
    # COMPUTED, or the raw value to serve instead (a string, garbage, None...).
    health_status_override: Any = COMPUTED
    health_reason_override: Any = COMPUTED
    # Quirk: the list answer carries health_status_reason JSON-encoded in a string.
    list_reason_as_string: bool = False
    list_overrides: dict[str, Any] = field(default_factory=dict)
    detail_overrides: dict[str, Any] = field(default_factory=dict)
    kubeconfig: str | None = None
    events: list[FakeEvent] = field(default_factory=list)
    next_address: int = 10

    @property
    def workers(self) -> list[FakeNodegroup]:
        return [group for group in self.nodegroups if group.role == "worker"]

    @property
    def in_progress(self) -> bool:
        return self.status.endswith("_IN_PROGRESS")


@dataclass
class PendingResize:
    cluster_uuid: str
    nodegroup_uuid: str
    target: int
    nodes_to_remove: list[str]
    event_uuid: str
    due_at: float


def _node_status(ready: int, not_ready: int) -> str:
    if not_ready == 0:
        return "NORMAL"
    if ready == 0:
        return "ALL_NODES_NOT_READY"
    return "NOT_READY_NODE_EXIST"


class FakeNksState:
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

    # ---- health ------------------------------------------------------------------------

    def health(self, cluster: FakeCluster) -> tuple[Any, Any]:
        with self.lock:
            now = self.now()
            interval = cluster.health_refresh_interval
            refreshed = now - (now % interval) if interval > 0 else now
            if cluster.health_stops_at is not None:
                refreshed = min(refreshed, cluster.health_stops_at)
            age = now - refreshed
            stale_word: str | None = None
            if age >= cluster.rotten_after:
                freshness, stale_word = "ROTTEN", "ROTTEN_DATA"
            elif age >= cluster.stale_after:
                freshness, stale_word = "STALE", "STALED_DATA"
            else:
                freshness = cluster.fresh_health_status

            groups: dict[str, tuple[str, str]] = {}
            total_ready = total_not_ready = 0
            for group in cluster.workers:
                ready = sum(1 for node in group.nodes if node.ready)
                not_ready = group.node_count - ready
                total_ready += ready
                total_not_ready += not_ready
                groups[group.name] = (
                    stale_word or _node_status(ready, not_ready),
                    f"{ready}:{not_ready}",
                )
            node_status = stale_word or _node_status(total_ready, total_not_ready)
            api_status = stale_word or ("NORMAL" if cluster.api_working else "K8S_API_NOT_WORKING")
            api = "OK" if cluster.api_working else "NOT_OK"

            reason: dict[str, Any]
            if cluster.health_style == "nested":
                reason = {
                    "timestamp": iso_time(refreshed, zulu=True),
                    "cluster": {"api_status": api_status, "node_status": node_status},
                    "api": api,
                    "nodegroup": {"node_status": {name: g[0] for name, g in groups.items()}},
                    "nodegroup-stats": {name: g[1] for name, g in groups.items()},
                }
            elif cluster.health_style == "per-node":
                reason = {
                    "timestamp": iso_time(refreshed),
                    "api": api.lower(),
                    "cluster.api_status": api_status,
                    "cluster.node_status": node_status,
                }
                for group in cluster.workers:
                    for node in group.nodes:
                        reason[f"{node.name}.Ready"] = "True" if node.ready else "False"
            else:
                reason = {
                    "timestamp": iso_time(refreshed),
                    "cluster.api_status": api_status,
                    "cluster.node_status": node_status,
                    "api": api,
                }
                for name, (status, stats) in groups.items():
                    reason[f"nodegroup.node_status.{name}"] = status
                    reason[f"nodegroup-stats.{name}"] = stats

            status_value = (
                freshness
                if cluster.health_status_override is COMPUTED
                else cluster.health_status_override
            )
            reason_value = (
                reason
                if cluster.health_reason_override is COMPUTED
                else cluster.health_reason_override
            )
            return status_value, reason_value

    # ---- representations (the guide's shapes) -----------------------------------------

    def _links(self, path: str) -> list[dict[str, str]]:
        return [
            {"href": f"{self.public_url}/v1/{path}", "rel": "self"},
            {"href": f"{self.public_url}/{path}", "rel": "bookmark"},
        ]

    def cluster_json(self, cluster: FakeCluster, *, detail: bool) -> dict[str, Any]:
        with self.lock:
            health_status, reason = self.health(cluster)
            if not detail and cluster.list_reason_as_string and isinstance(reason, dict):
                reason = json.dumps(reason)
            labels = dict(cluster.labels)
            if not detail:
                labels.pop("platform_version", None)
                labels.pop("kube_version_status", None)
            data: dict[str, Any] = {
                "cluster_template_id": "b4503d97-6012-499d-a31a-5200f94a7890",
                "create_timeout": 60,
                "docker_volume_size": None,
                "flavor_id": cluster.flavor_id,
                "health_status": health_status,
                "health_status_reason": reason,
                "keypair": cluster.keypair,
                "labels": labels,
                "links": self._links(f"clusters/{cluster.uuid}"),
                "name": cluster.name,
                "node_count": sum(group.node_count for group in cluster.workers),
                "stack_id": cluster.stack_id,
                "status": cluster.status,
                "status_reason": cluster.status_reason,
                "uuid": cluster.uuid,
            }
            if detail:
                data.update(
                    {
                        "api_address": f"https://{cluster.uuid[:8]}-kr1-k8s.fake-nks.invalid:6443",
                        "coe_version": labels.get("kube_tag"),
                        "container_version": "1.12.6",
                        "created_at": iso_time(cluster.created_at),
                        "fixed_network": cluster.fixed_network,
                        "fixed_subnet": cluster.fixed_subnet,
                        "floating_ip_enabled": False,
                        "node_addresses": [
                            node.address for group in cluster.workers for node in group.nodes
                        ],
                        "project_id": cluster.project_id or self.tenant_id,
                        "updated_at": iso_time(cluster.updated_at),
                        "user_id": stable_uuid("user", self.username).replace("-", ""),
                    }
                )
            data.update(cluster.detail_overrides if detail else cluster.list_overrides)
            return data

    def cluster_list_json(self) -> dict[str, Any]:
        with self.lock:
            answer = {
                "clusters": [
                    self.cluster_json(cluster, detail=False) for cluster in self.clusters.values()
                ]
            }
            # Fault injection: the cluster is listed, then deleted before anyone looks closer.
            for uuid in self.remove_after_list:
                self.clusters.pop(uuid, None)
            self.remove_after_list.clear()
            return answer

    def nodegroup_json(
        self, cluster: FakeCluster, group: FakeNodegroup, *, detail: bool
    ) -> dict[str, Any]:
        with self.lock:

            def count(value: int | None) -> Any:
                if value is None or detail or not group.counts_as_strings:
                    return value
                return str(value)

            data: dict[str, Any] = {
                "flavor_id": group.flavor_id,
                "image_id": group.image_id,
                "is_default": group.is_default,
                "max_node_count": count(group.max_node_count),
                "min_node_count": count(group.min_node_count),
                "name": group.name,
                "node_count": count(group.node_count),
                "role": group.role,
                "stack_id": group.stack_id,
                "status": group.status,
                "uuid": group.uuid,
            }
            if detail:
                data.update(
                    {
                        "cluster_id": cluster.uuid,
                        "created_at": iso_time(group.created_at),
                        "docker_volume_size": None,
                        "id": group.serial,
                        "labels": dict(group.labels),
                        "links": self._links(f"clusters/{cluster.uuid}/nodegroups/{group.uuid}"),
                        "node_addresses": [node.address for node in group.nodes],
                        # Not in the guide: the instances behind the nodes, as the Compute API
                        # lists them, so the dashboard can offer nodes_to_remove by name.
                        "nodes": [
                            {"uuid": node.uuid, "name": node.name, "address": node.address}
                            for node in group.nodes
                        ],
                        "project_id": cluster.project_id or self.tenant_id,
                        "status_reason": group.status_reason,
                        "updated_at": iso_time(group.updated_at),
                        "version": None,
                    }
                )
            data.update(group.detail_overrides if detail else group.list_overrides)
            return data

    def event_json(self, event: FakeEvent) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": event.id,
            "uuid": event.uuid,
            "project_id": self.tenant_id,
            "cluster_uuid": event.cluster_uuid,
            "cluster_name": event.cluster_name,
            "resource_uuid": event.resource_uuid,
            "resource_name": event.resource_name,
            "resource_type": event.resource_type,
            "type": event.type,
            "state": event.state,
            "contents": event.contents,
            "created_at": iso_time(event.created_at),
            "updated_at": iso_time(event.updated_at),
        }
        if event.details is not None:
            data["details"] = event.details
        return data

    def kubeconfig_for(self, cluster: FakeCluster) -> str:
        if cluster.kubeconfig is not None:
            return cluster.kubeconfig
        server = self.kube_server_url or f"https://{cluster.uuid[:8]}-kr1-k8s.fake-nks.invalid:6443"
        name = json.dumps(cluster.name)  # a JSON string is a valid double-quoted YAML scalar
        if self.kube_server_url and server.startswith("https://"):
            tls = "    insecure-skip-tls-verify: true\n"
        elif self.kube_server_url:
            tls = ""
        else:
            authority = base64.b64encode(b"fake NKS demo certificate authority").decode()
            tls = f"    certificate-authority-data: {authority}\n"
        return (
            "apiVersion: v1\n"
            "clusters:\n"
            "- cluster:\n"
            f"{tls}"
            f"    server: {server}\n"
            f"  name: {name}\n"
            "contexts:\n"
            "- context:\n"
            f"    cluster: {name}\n"
            "    user: admin\n"
            "  name: default\n"
            "current-context: default\n"
            "kind: Config\n"
            "preferences: {}\n"
            "users:\n"
            "- name: admin\n"
            "  user:\n"
            f"    token: fake-nks-{cluster.uuid[:8]}\n"
        )

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
