"""What the client returns: frozen dataclasses, read from NKS's answers by ``parsing``.

Raw strings are kept as NKS sent them next to their classified readings (``nks.enums``), so
an unknown value is shown as it is, never lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nks.enums import EventState, Freshness, OperationPhase


@dataclass(frozen=True, slots=True)
class NodegroupHealth:
    """One worker nodegroup's line in ``health_status_reason``."""

    name: str
    node_status: str | None
    ready: int | None
    not_ready: int | None


@dataclass(frozen=True, slots=True)
class HealthReport:
    """``health_status`` and ``health_status_reason`` of a cluster, read defensively.

    Raw values are kept as NKS sent them; ``freshness`` and ``api_ok`` are the classified
    readings. ``problem`` explains why the reason could not be read (it was a string, garbage,
    or missing), in which case every field but ``health_status`` is unknown.
    """

    health_status: str | None
    freshness: Freshness
    timestamp: datetime | None
    api: str | None
    api_status: str | None
    api_ok: bool | None
    node_status: str | None
    nodegroups: dict[str, NodegroupHealth]
    nodes_ready: dict[str, bool | None]
    problem: str | None

    @property
    def all_nodes_ready(self) -> bool | None:
        """True or False when the report says so; None when it does not (stale, unknown)."""
        status = (self.node_status or "").upper()
        if status == "NORMAL":
            return True
        if status in {"NOT_READY_NODE_EXIST", "ALL_NODES_NOT_READY"}:
            return False
        if status:
            return None
        counts = [group.not_ready for group in self.nodegroups.values()]
        if counts and all(count is not None for count in counts):
            return not any(counts)
        readiness = list(self.nodes_ready.values())
        if readiness and all(ready is not None for ready in readiness):
            return all(readiness)
        if False in readiness:
            return False
        return None


@dataclass(frozen=True, slots=True)
class Cluster:
    """A cluster from the list (``detailed`` False) or from its own page (``detailed`` True).

    Fields only the detail answer carries are None or empty on list results.
    """

    uuid: str
    name: str
    status: str | None
    phase: OperationPhase
    status_reason: str | None
    health: HealthReport
    node_count: int | None
    flavor_id: str | None
    keypair: str | None
    stack_id: str | None
    labels: dict[str, str]
    kube_tag: str | None
    availability_zone: str | None
    detailed: bool
    api_address: str | None
    project_id: str | None
    fixed_network: str | None
    fixed_subnet: str | None
    node_addresses: tuple[str, ...]
    platform_version: str | None
    kube_version_status: str | None
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    """Cluster-autoscaler settings, from a nodegroup's ``ca_*`` labels (its detail answer)."""

    enabled: bool | None
    min_node_count: int | None
    max_node_count: int | None
    pod_replicas: int | None
    scale_down_enabled: bool | None
    scale_down_unneeded_time: int | None
    scale_down_util_thresh: int | None
    scale_down_delay_after_add: int | None


@dataclass(frozen=True, slots=True)
class Nodegroup:
    """A nodegroup from the list (``detailed`` False) or from its own page (``detailed`` True).

    ``autoscale`` is read from the ``ca_*`` labels, which only the detail answer carries.
    NKS names no node here (``node_addresses`` are IPs): nodes, their readiness and their
    instance UUIDs come from the cluster's own Node objects (``nks.node_picture``).
    """

    uuid: str
    name: str
    cluster_uuid: str | None
    role: str | None
    status: str | None
    phase: OperationPhase
    status_reason: str | None
    node_count: int | None
    min_node_count: int | None
    max_node_count: int | None
    flavor_id: str | None
    image_id: str | None
    stack_id: str | None
    is_default: bool
    node_addresses: tuple[str, ...]
    labels: dict[str, str]
    autoscale: AutoscaleSettings
    kube_tag: str | None
    detailed: bool
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS

    @property
    def is_worker(self) -> bool:
        return (self.role or "").lower() == "worker"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One entry of a cluster's operation history."""

    id: int | None
    uuid: str
    cluster_uuid: str | None
    cluster_name: str | None
    resource_uuid: str | None
    resource_name: str | None
    resource_type: str | None
    type: str | None
    raw_state: str | None
    state: EventState
    contents: str | None
    details: str | None
    created_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class ResizeAccepted:
    """NKS accepted a resize; progress shows in the nodegroup's status and in the events.

    ``cluster_uuid`` is None when NKS accepted without saying which cluster (it is logged).
    """

    cluster_uuid: str | None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed for each stage of one HTTP call."""

    connect: float = 5.0
    read: float = 20.0
    write: float = 20.0
    pool: float = 10.0
