"""Scenarios: clusters whose Leases and Nodes change with time, for the demo, tests and
benchmarks, by name (`make_scenario`). The timeline and its runner are in `timeline`, the
demo cluster in `demo`.
"""

from __future__ import annotations

import uuid

from fakes.kube.demo import DemoScenario, DemoTimings
from fakes.kube.demo_nodes import nks_demo_nodes
from fakes.kube.timeline import (
    DAY,
    NODE_LEASE_DURATION,
    NODE_LEASE_NAMESPACE,
    NODE_RENEW_INTERVAL,
    Scenario,
    ScenarioRunner,
    node_owner,
)

__all__ = [
    "DemoScenario",
    "DemoTimings",
    "EmptyScenario",
    "NodeFleetScenario",
    "Scenario",
    "ScenarioRunner",
    "make_scenario",
]


class EmptyScenario(Scenario):
    name = "empty"


class NodeFleetScenario(Scenario):
    """`nodes:N`: N kubelet node leases renewing every 10 s, phases spread evenly.

    `cluster:N` (with_nodes): the same leases owned by N Ready Nodes, whose kubelets also
    re-post their status every minute (only lastHeartbeatTime moves).
    """

    def __init__(
        self,
        count: int,
        *,
        namespace: str = NODE_LEASE_NAMESPACE,
        name_format: str = "node-{index:05d}",
        renew_interval: float = NODE_RENEW_INTERVAL,
        lease_duration_seconds: int = NODE_LEASE_DURATION,
        with_nodes: bool = False,
        status_interval: float = 60.0,
    ) -> None:
        super().__init__()
        if count < 0:
            raise ValueError("the node count must not be negative")
        self.name = f"{'cluster' if with_nodes else 'nodes'}:{count}"
        self.with_nodes = with_nodes
        self.status_interval = status_interval
        self.count = count
        self.namespace = namespace
        self.name_format = name_format
        self.renew_interval = renew_interval
        self.lease_duration_seconds = lease_duration_seconds

    def setup(self, now: float) -> None:
        if self.with_nodes:
            self._cluster(now)
            return
        for index in range(self.count):
            node = self.name_format.format(index=index)
            phase = index * self.renew_interval / max(self.count, 1)
            last_renewal = now - self.renew_interval + phase
            self.store.apply_lease(
                self.namespace,
                node,
                {
                    "holderIdentity": node,
                    "leaseDurationSeconds": self.lease_duration_seconds,
                    "renewTime": last_renewal,
                },
                owner_references=[node_owner(node, uuid.uuid4())],
                created_at=now - 3 * DAY,
            )
            self.every(
                last_renewal + self.renew_interval,
                self.renew_interval,
                lambda when, node=node: self.store.renew_lease(self.namespace, node, when),
            )

    def _cluster(self, now: float) -> None:
        names = self.store.seed_nodes(
            self.count,
            name_format=self.name_format,
            lease_namespace=self.namespace,
            lease_duration_seconds=self.lease_duration_seconds,
            at=now - 3 * DAY,
        )
        spread = max(self.count, 1)
        for index, node in enumerate(names):
            phase = index / spread
            last_renewal = now - self.renew_interval + phase * self.renew_interval
            self.store.renew_lease(self.namespace, node, last_renewal)
            self.every(
                last_renewal + self.renew_interval,
                self.renew_interval,
                lambda when, node=node: self.store.renew_lease(self.namespace, node, when),
            )
            self.every(
                now + phase * self.status_interval,
                self.status_interval,
                lambda when, node=node: self.store.heartbeat_node(node, at=when),
            )


def make_scenario(spec: str) -> Scenario:
    """`demo` (its workers are the fake NKS staging-web's Nodes), `empty`, `nodes:N` (node
    leases only) or `cluster:N` (N Nodes and their leases)."""
    if spec == "demo":
        return DemoScenario(fleet=nks_demo_nodes())
    if spec == "empty":
        return EmptyScenario()
    kind, _, count = spec.partition(":")
    if kind in ("nodes", "cluster") and count.isdigit():
        return NodeFleetScenario(int(count), with_nodes=kind == "cluster")
    raise ValueError(f"unknown scenario {spec!r}; use demo, empty, nodes:N or cluster:N")
