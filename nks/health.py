"""The dashboard's verdict on NKS health reports, and which node belongs to which nodegroup.

NKS reports health per cluster (``health_status`` with per-node ``<node>.Ready`` keys); these
functions turn one report into a ``Health`` (UNKNOWN whenever it cannot be trusted) and into
per-nodegroup readiness, for the poller to store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nks import client as nks
from nks.enums import Freshness
from nks.models import (
    Health,
)


def classify_health(report: nks.HealthReport) -> Health:
    """The verdict on a health report; UNKNOWN whenever it cannot be trusted."""
    if report.freshness is not Freshness.FRESH:
        return Health.UNKNOWN
    if report.api_ok is False or (report.node_status or "").upper() == "ALL_NODES_NOT_READY":
        return Health.DOWN
    ready = report.all_nodes_ready
    if report.api_ok is None or ready is None:
        return Health.UNKNOWN
    return Health.HEALTHY if ready else Health.DEGRADED


def nodegroup_of_node(node: str, cluster_name: str, nodegroups: Sequence[str]) -> str | None:
    """Which nodegroup a node named in ``<node>.Ready`` keys belongs to, or None.

    NKS names nodes ``<cluster>-<nodegroup>-w-<random>-node-<n>``; the longest nodegroup name
    that fits wins (``default`` must not claim ``default-worker``'s nodes). A cluster with one
    worker nodegroup owns every node.
    """
    candidates = [
        group
        for group in nodegroups
        if node.startswith(f"{cluster_name}-{group}-") or node.startswith(f"{group}-")
    ]
    if candidates:
        return max(candidates, key=len)
    if len(nodegroups) == 1:
        return nodegroups[0]
    return None


@dataclass(slots=True)
class ClusterHealth:
    report: nks.HealthReport
    health: Health
    # nodegroup name -> (ready, not_ready, node_status)
    groups: dict[str, tuple[int | None, int | None, str]]
    # nodegroup name -> {node name: ready}
    readiness: dict[str, dict[str, bool | None]]
    ready: int | None
    not_ready: int | None


def cluster_health(cluster: nks.Cluster, worker_names: Sequence[str] | None) -> ClusterHealth:
    report = cluster.health
    names = list(worker_names or report.nodegroups.keys())
    readiness: dict[str, dict[str, bool | None]] = {}
    for node, ready in report.nodes_ready.items():
        group = nodegroup_of_node(node, cluster.name, names)
        if group is not None:
            readiness.setdefault(group, {})[node] = ready
    groups: dict[str, tuple[int | None, int | None, str]] = {}
    for name in {*report.nodegroups.keys(), *readiness.keys()}:
        stats = report.nodegroups.get(name)
        ready_count = stats.ready if stats else None
        not_ready_count = stats.not_ready if stats else None
        nodes = readiness.get(name, {})
        if ready_count is None and nodes and None not in nodes.values():
            ready_count = sum(1 for value in nodes.values() if value)
            not_ready_count = len(nodes) - ready_count
        groups[name] = (ready_count, not_ready_count, (stats.node_status if stats else "") or "")

    counts = [(ready, not_ready) for ready, not_ready, _ in groups.values()]
    if counts and all(ready is not None and not_ready is not None for ready, not_ready in counts):
        total_ready = sum(ready or 0 for ready, _ in counts)
        total_not_ready = sum(not_ready or 0 for _, not_ready in counts)
    elif report.nodes_ready and None not in report.nodes_ready.values():
        total_ready = sum(1 for value in report.nodes_ready.values() if value)
        total_not_ready = len(report.nodes_ready) - total_ready
    else:
        total_ready = total_not_ready = None
    return ClusterHealth(
        report=report,
        health=classify_health(report),
        groups=groups,
        readiness=readiness,
        ready=total_ready,
        not_ready=total_not_ready,
    )
