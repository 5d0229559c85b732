"""The fake NKS account's objects (clusters, nodegroups, nodes, events) and fixed data."""

from __future__ import annotations

import uuid as uuid_module
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


def node_status_word(ready: int, not_ready: int) -> str:
    if not_ready == 0:
        return "NORMAL"
    if ready == 0:
        return "ALL_NODES_NOT_READY"
    return "NOT_READY_NODE_EXIST"
