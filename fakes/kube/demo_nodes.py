"""The demo cluster's Nodes: the workers of one fake NKS demo cluster, as its own API shows them.

`make run` starts the fake NKS and this fake kube-apiserver as separate processes, and every
fake NKS cluster's kubeconfig points here. So this server plays one of them (staging-web,
the cluster with a NotReady node): its Nodes carry the names, Magnum labels
(`magnum.openstack.org/nodegroup`, `.../role`) and providerIDs (`openstack:///<instance
uuid>`) of that cluster's nodes, derived by building the fake NKS's own demo state in-process
(it is deterministic: names and uuids come from the cluster and nodegroup names).

What happens to them, in scenario time:
- each kubelet renews its heartbeat Lease every 10 s and re-posts its status every minute
  (only lastHeartbeatTime moves);
- the node NKS reports NotReady has had a dead kubelet for ten minutes: its Lease expired,
  and the node lifecycle controller marked it Unknown 40 s after its last heartbeat;
- one healthy worker goes silent on DemoScenario's node timings (after a minute, for four),
  goes Unknown 40 s into its silence, and comes back Ready when its kubelet returns.

What this cannot follow: a resize in the fake NKS runs in the other process, so nodes it adds
or removes do not appear or disappear here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakes.kube.node_scenarios import NODE_LEASE_NAMESPACE, add_node
from fakes.nks.scenarios import (
    DEFAULT_PASSWORD,
    DEFAULT_TENANT_ID,
    DEFAULT_USERNAME,
    build_scenario,
)
from fakes.nks.state import FakeNksState

if TYPE_CHECKING:
    from fakes.kube.store import ObjectStore
    from fakes.kube.timeline import Scenario

DEMO_NKS_CLUSTER = "staging-web"
NODEGROUP_LABEL = "magnum.openstack.org/nodegroup"
ROLE_LABEL = "magnum.openstack.org/role"
LEASE_RENEW_INTERVAL = 10.0
STATUS_REPORT_INTERVAL = 60.0
NODE_MONITOR_PERIOD = 5.0  # how often the node lifecycle controller looks
NODE_MONITOR_GRACE = 40.0  # silence after which it marks a node Unknown
DEAD_FOR = 600.0  # how long the NotReady node's kubelet has been dead when the demo starts


@dataclass(frozen=True, slots=True)
class DemoNode:
    name: str
    instance_uuid: str
    internal_ip: str
    nodegroup: str
    role: str
    ready: bool  # what NKS reports; a NotReady node's kubelet is dead
    zone: str
    flavor: str
    kubelet_version: str
    age_seconds: float  # how long before the scenario's start it joined


def nks_demo_nodes(cluster_name: str = DEMO_NKS_CLUSTER) -> list[DemoNode]:
    """The nodes of one fake NKS demo cluster, read from a freshly built demo state."""
    now = time.time()
    state = FakeNksState(
        tenant_id=DEFAULT_TENANT_ID,
        username=DEFAULT_USERNAME,
        password=DEFAULT_PASSWORD,
        clock=lambda: now,
    )
    build_scenario(state, "demo")
    cluster = next(c for c in state.clusters.values() if c.name == cluster_name)
    nodes = []
    for group in cluster.nodegroups:
        for index, node in enumerate(group.nodes):
            nodes.append(
                DemoNode(
                    name=node.name,
                    instance_uuid=node.uuid,
                    internal_ip=node.address,
                    nodegroup=group.name,
                    role=group.role,
                    ready=node.ready,
                    zone=str(group.labels.get("availability_zone", "kr1-pub-a")),
                    flavor="m2.c4m8",
                    kubelet_version=str(group.labels.get("kube_tag", "v1.29.3")),
                    # Nodes of a group joined a minute apart when it was created.
                    age_seconds=max(0.0, now - group.created_at - index * 60),
                )
            )
    return nodes


def node_labels(node: DemoNode) -> dict[str, str]:
    """Magnum's and the OpenStack cloud provider's labels (the kubelet adds its own)."""
    return {
        NODEGROUP_LABEL: node.nodegroup,
        ROLE_LABEL: node.role,
        "node.kubernetes.io/instance-type": node.flavor,
        "topology.kubernetes.io/region": "KR1",
        "topology.kubernetes.io/zone": node.zone,
    }


@dataclass(frozen=True, slots=True)
class SilenceCycle:
    starts: float  # scenario time of the first silence
    silent_for: float
    healthy_for: float

    def silent_at(self, when: float) -> bool:
        if when < self.starts:
            return False
        return (when - self.starts) % (self.silent_for + self.healthy_for) < self.silent_for


class _Kubelet:
    """One node's kubelet and what the node lifecycle controller thinks of it."""

    def __init__(
        self, store: ObjectStore, node: DemoNode, alive: Callable[[float], bool], renewed: float
    ) -> None:
        self.store = store
        self.name = node.name
        self.alive = alive
        self.last_renewal = renewed
        self.unknown = False  # the controller marked it Unknown; the kubelet will repost

    def renew(self, when: float) -> None:
        if not self.alive(when):
            return
        self.last_renewal = when
        self.store.renew_lease(NODE_LEASE_NAMESPACE, self.name, when)
        if self.unknown:
            # Back: the kubelet posts Ready again at once, a new transition.
            self.unknown = False
            self.store.set_node_ready(self.name, True, at=when)

    def post_status(self, when: float) -> None:
        if self.alive(when) and not self.unknown:
            self.store.heartbeat_node(self.name, at=when)

    def monitor(self, when: float) -> None:
        if not self.unknown and when - self.last_renewal > NODE_MONITOR_GRACE:
            self.unknown = True
            self.store.set_node_ready(
                self.name, "Unknown", at=self.last_renewal + NODE_MONITOR_GRACE
            )


def run_node_fleet(
    scenario: Scenario, nodes: Sequence[DemoNode], now: float, silence: SilenceCycle
) -> None:
    """Create the Nodes and their Leases at `now` and schedule their kubelets."""
    store = scenario.store
    ready_names = [node.name for node in nodes if node.ready]
    # The last healthy worker of the first nodegroup is the one that goes silent.
    first_group = nodes[0].nodegroup if nodes else ""
    silent_name = next(
        (n.name for n in reversed(nodes) if n.ready and n.nodegroup == first_group), None
    )
    kubelets: list[_Kubelet] = []
    for node in nodes:
        joined = now - node.age_seconds
        add_node(
            store,
            node.name,
            provider_id=f"openstack:///{node.instance_uuid}",
            internal_ip=node.internal_ip,
            labels=node_labels(node),
            kubelet_version=node.kubelet_version,
            at=joined,
            created_at=joined,
        )
        if not node.ready:
            died = now - DEAD_FOR
            store.renew_lease(NODE_LEASE_NAMESPACE, node.name, died)
            store.heartbeat_node(node.name, at=died)
            store.set_node_ready(node.name, "Unknown", at=died + NODE_MONITOR_GRACE)
            continue  # a dead kubelet schedules nothing
        phase = (ready_names.index(node.name) + 1) * LEASE_RENEW_INTERVAL / (len(nodes) + 1)
        renewed = now - LEASE_RENEW_INTERVAL + phase
        store.renew_lease(NODE_LEASE_NAMESPACE, node.name, renewed)
        store.heartbeat_node(node.name, at=now - STATUS_REPORT_INTERVAL + phase)
        alive = (lambda when: not silence.silent_at(when)) if node.name == silent_name else _always
        kubelet = _Kubelet(store, node, alive, renewed)
        kubelets.append(kubelet)
        scenario.every(renewed + LEASE_RENEW_INTERVAL, LEASE_RENEW_INTERVAL, kubelet.renew)
        status_phase = phase * STATUS_REPORT_INTERVAL / LEASE_RENEW_INTERVAL
        scenario.every(now + status_phase, STATUS_REPORT_INTERVAL, kubelet.post_status)

    def monitor(when: float) -> None:
        for kubelet in kubelets:
            kubelet.monitor(when)

    scenario.every(now + NODE_MONITOR_PERIOD, NODE_MONITOR_PERIOD, monitor)


def _always(when: float) -> bool:
    return True
