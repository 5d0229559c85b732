"""Ready-made fake NKS accounts.

``demo``
    Three clusters that show what the dashboard is for, each written with different quirks
    of the guide, so the demo also exercises the client's tolerance:

    * ``prod-api``: healthy (FRESH, NORMAL), flat dotted keys in ``health_status_reason``;
      nodegroups ``default-worker`` (3 nodes) and ``batch-worker`` (2 nodes, cluster
      autoscaler on: ``ca_enable: "True"``, labels mixing ``"true"``/``"True"``).
    * ``staging-web``: a NotReady node in ``default-worker`` (``NOT_READY_NODE_EXIST``,
      ``nodegroup-stats`` ``"2:1"``), nested objects in ``health_status_reason``; nodegroup
      ``gpu-worker`` has ``max_node_count: null``, a null ``status_reason``, a failed scale-out
      in its history, and every resize of it fails (instance quota).
    * ``legacy-batch``: reports ``health_status: "HEALTHY"`` (the guide's examples) with
      per-node ``<node>.Ready`` keys and ``api: "ok"``; the list answer carries the reason
      JSON-encoded in a string and counts as strings. Its health agent stops after
      30 s: the data goes STALE after 2 minutes and ROTTEN after 5.5 minutes
      (divide by ``health_speed``).

``clusters:N``
    N healthy clusters with three worker nodegroups of two nodes each (the benchmark).

``empty``
    No clusters.
"""

from __future__ import annotations

import hashlib

from fakes.nks.model import FakeCluster, FakeNodegroup, stable_uuid
from fakes.nks.state import FakeNksState

DEFAULT_TENANT_ID = "5d8cc67593754d5581f7e8986badf358"
DEFAULT_USERNAME = "oncall@example.com"
DEFAULT_PASSWORD = "demo-password"  # noqa: S105 - the demo cloud's published credentials

MAX_GENERATED_CLUSTERS = 5000
DAY = 86400.0

QUOTA_FAILURE = (
    "Resource CREATE failed: Forbidden: Quota exceeded for instances: Requested 1, but already "
    "used 10 of 10 instances."
)


def scenario_names() -> str:
    return "demo, empty, clusters:N"


def validate_scenario(scenario: str) -> str:
    """Return ``scenario`` if it names a scenario, else raise ValueError saying what is valid."""
    name, separator, argument = scenario.partition(":")
    if name in ("demo", "empty") and not separator:
        return scenario
    if name == "clusters" and argument.isdigit():
        if 0 <= int(argument) <= MAX_GENERATED_CLUSTERS:
            return scenario
        raise ValueError(f"clusters:N takes N from 0 to {MAX_GENERATED_CLUSTERS}")
    raise ValueError(f"unknown scenario {scenario!r}; use one of: {scenario_names()}")


def build_scenario(state: FakeNksState, scenario: str, *, health_speed: float = 1.0) -> None:
    validate_scenario(scenario)
    if health_speed <= 0:
        raise ValueError("health_speed must be positive")
    name, _, argument = scenario.partition(":")
    if name == "demo":
        build_demo(state, health_speed=health_speed)
    elif name == "clusters":
        build_many(state, int(argument))


def _suffix(*parts: str) -> str:
    # NKS names nodes "<cluster>-<nodegroup>-w-<12 random chars>-node-<n>"; derive the random
    # part from the names so it is the same on every start.
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:12]


def _nodegroup(
    state: FakeNksState,
    cluster: FakeCluster,
    name: str,
    *,
    nodes: int,
    created_at: float,
    not_ready: int = 0,
    is_default: bool = False,
    labels: dict[str, str] | None = None,
    max_node_count: int | None = 10,
    status: str = "CREATE_COMPLETE",
    status_reason: str | None = "Stack CREATE completed successfully",
) -> FakeNodegroup:
    group = FakeNodegroup(
        uuid=stable_uuid(cluster.name, "nodegroup", name),
        name=name,
        nodes=[],
        status=status,
        status_reason=status_reason,
        max_node_count=max_node_count,
        stack_id=stable_uuid(cluster.name, "nodegroup", name, "stack"),
        is_default=is_default,
        labels={
            "availability_zone": cluster.labels.get("availability_zone", "kr1-pub-a"),
            "boot_volume_size": "20",
            "boot_volume_type": "General HDD",
            "ca_enable": "False",
            "cert_manager_api": "True",
            "kube_tag": cluster.labels.get("kube_tag", "v1.30.3"),
            "platform_version": "1.202511.0",
            **(labels or {}),
        },
        node_name_prefix=f"{cluster.name}-{name}-w-{_suffix(cluster.name, name)}",
        created_at=created_at,
        updated_at=created_at,
    )
    cluster.nodegroups.append(group)
    state.add_nodes(cluster, group, nodes - not_ready)
    state.add_nodes(cluster, group, not_ready, ready=False)
    return group


def _cluster(
    state: FakeNksState, name: str, *, created_at: float, kube_tag: str, zone: str
) -> FakeCluster:
    return FakeCluster(
        uuid=stable_uuid("cluster", name),
        name=name,
        nodegroups=[],
        labels={
            "availability_zone": zone,
            "cert_manager_api": "True",
            "clusterautoscale": "nodegroupfeature",
            "cni_driver": "calico",
            "external_network_id": "751b8227-7b45-440a-9349-dbf829d0aba5",
            "kube_tag": kube_tag,
            "kube_version_status": "LATEST",
            "master_lb_floating_ip_enabled": "true",
            "platform_version": "1.202511.0",
            "pods_network_cidr": "10.100.0.0/16",
            "service_cluster_ip_range": "10.254.0.0/16",
            "strict_sg_rules": "True",
        },
        stack_id=stable_uuid("cluster", name, "stack"),
        project_id=state.tenant_id,
        created_at=created_at,
        updated_at=created_at,
    )


def build_demo(state: FakeNksState, *, health_speed: float = 1.0) -> None:
    now = state.now()

    prod = _cluster(
        state, "prod-api", created_at=now - 120 * DAY, kube_tag="v1.30.3", zone="kr1-pub-a"
    )
    prod_default = _nodegroup(
        state, prod, "default-worker", nodes=3, is_default=True, created_at=prod.created_at
    )
    batch = _nodegroup(
        state,
        prod,
        "batch-worker",
        nodes=2,
        created_at=now - 45 * DAY,
        max_node_count=6,
        labels={
            "ca_enable": "True",
            "ca_min_node_count": "1",
            "ca_max_node_count": "6",
            "ca_pod_replicas": "1",
            "ca_scale_down_enable": "true",
            "ca_scale_down_unneeded_time": "10",
            "ca_scale_down_util_thresh": "50",
            "ca_scale_down_delay_after_add": "10",
            "cert_manager_api": "true",
        },
    )
    state.add_cluster(prod)
    state.add_event(
        prod,
        event_type="CLUSTER_CREATE",
        state="SUCCESS",
        created_at=prod.created_at,
        updated_at=prod.created_at + 640,
    )
    state.add_event(
        prod,
        event_type="NODEGROUP_CREATE",
        state="SUCCESS",
        resource=batch,
        created_at=batch.created_at,
        updated_at=batch.created_at + 300,
    )
    state.add_event(
        prod,
        event_type="NODEGROUP_SET_CLUSTER_AUTOSCALER",
        state="SUCCESS",
        resource=batch,
        created_at=now - 44 * DAY,
        updated_at=now - 44 * DAY + 20,
    )
    state.add_event(
        prod,
        event_type="NODEGROUP_SCALE_OUT",
        state="SUCCESS",
        resource=prod_default,
        created_at=now - 3 * DAY,
        updated_at=now - 3 * DAY + 250,
        details='{"node_count": 3, "nodegroup": "default-worker"}',
    )

    staging = _cluster(
        state,
        "staging-web",
        created_at=now - 60 * DAY,
        kube_tag="v1.29.3",
        zone="kr1-pub-b",
    )
    staging.health_style = "nested"
    _nodegroup(
        state,
        staging,
        "default-worker",
        nodes=3,
        not_ready=1,
        is_default=True,
        created_at=staging.created_at,
    )
    gpu = _nodegroup(
        state,
        staging,
        "gpu-worker",
        nodes=1,
        created_at=now - 30 * DAY,
        max_node_count=None,
        status="UPDATE_FAILED",
        status_reason=None,
        labels={"ca_enable": "false"},
    )
    gpu.fail_resizes_with = QUOTA_FAILURE
    state.add_cluster(staging)
    state.add_event(
        staging,
        event_type="CLUSTER_CREATE",
        state="SUCCESS",
        created_at=staging.created_at,
        updated_at=staging.created_at + 700,
    )
    state.add_event(
        staging,
        event_type="NODEGROUP_CREATE",
        state="SUCCESS",
        resource=gpu,
        created_at=gpu.created_at,
        updated_at=gpu.created_at + 280,
    )
    state.add_event(
        staging,
        event_type="NODEGROUP_SCALE_OUT",
        state="FAIL",
        resource=gpu,
        contents=QUOTA_FAILURE,
        created_at=now - 2 * DAY,
        updated_at=now - 2 * DAY + 95,
        details='{"node_count": 2, "nodegroup": "gpu-worker"}',
    )

    legacy = _cluster(
        state,
        "legacy-batch",
        created_at=now - 400 * DAY,
        kube_tag="v1.23.3",
        zone="kr1-pub-a",
    )
    legacy.health_style = "per-node"
    legacy.fresh_health_status = "HEALTHY"
    legacy.list_reason_as_string = True
    # The health agent dies 30 s after start; the data ages from there.
    legacy.health_refresh_interval = 30 / health_speed
    legacy.health_stops_at = now + 30 / health_speed
    legacy.stale_after = 90 / health_speed
    legacy.rotten_after = 300 / health_speed
    legacy.labels["kube_version_status"] = "NEED_UPGRADE"
    legacy_default = _nodegroup(
        state,
        legacy,
        "default-worker",
        nodes=4,
        is_default=True,
        created_at=legacy.created_at,
        status="UPDATE_COMPLETE",
        status_reason="Stack UPDATE completed successfully",
    )
    legacy_default.counts_as_strings = True
    state.add_cluster(legacy)
    state.add_event(
        legacy,
        event_type="CLUSTER_CREATE",
        state="SUCCESS",
        created_at=legacy.created_at,
        updated_at=legacy.created_at + 810,
    )
    state.add_event(
        legacy,
        event_type="AUTO_HEALING",
        state="SUCCESS",
        resource=legacy_default,
        created_at=now - 9 * DAY,
        updated_at=now - 9 * DAY + 400,
    )


def build_many(state: FakeNksState, count: int) -> None:
    now = state.now()
    for index in range(count):
        cluster = _cluster(
            state,
            f"bench-{index:04d}",
            created_at=now - (index % 90 + 1) * DAY,
            kube_tag="v1.31.4",
            zone="kr1-pub-a" if index % 2 else "kr1-pub-b",
        )
        for position, name in enumerate(("default-worker", "pool-a", "pool-b")):
            _nodegroup(
                state,
                cluster,
                name,
                nodes=2,
                is_default=position == 0,
                created_at=cluster.created_at,
            )
        state.add_cluster(cluster)
        state.add_event(
            cluster,
            event_type="CLUSTER_CREATE",
            state="SUCCESS",
            created_at=cluster.created_at,
            updated_at=cluster.created_at + 600,
        )
        state.add_event(
            cluster,
            event_type="NODEGROUP_SCALE_OUT",
            state="SUCCESS",
            resource=cluster.nodegroups[1],
            created_at=now - DAY,
            updated_at=now - DAY + 200,
        )
