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

A resize in the fake NKS runs in the other process: `cloud_controller` follows it over NKS's
API, through this fleet (a removed instance's kubelet stops; a new instance's kubelet joins).
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


def demo_nks_state(now: float) -> FakeNksState:
    """The fake NKS's demo account as its process builds it at start (names and uuids are the
    same in every build), with the clock stopped at `now`."""
    state = FakeNksState(
        tenant_id=DEFAULT_TENANT_ID,
        username=DEFAULT_USERNAME,
        password=DEFAULT_PASSWORD,
        clock=lambda: now,
    )
    build_scenario(state, "demo")
    return state


def nks_demo_nodes(cluster_name: str = DEMO_NKS_CLUSTER) -> list[DemoNode]:
    """The nodes of one fake NKS demo cluster, read from a freshly built demo state."""
    now = time.time()
    state = demo_nks_state(now)
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


def register_node(store: ObjectStore, node: DemoNode, at: float, *, ready: bool = True) -> None:
    """`node`'s kubelet registers its Node (its instance's providerID and address, Magnum's
    labels) and heartbeat Lease at `at`, Ready or NotReady."""
    add_node(
        store,
        node.name,
        provider_id=f"openstack:///{node.instance_uuid}",
        internal_ip=node.internal_ip,
        labels=node_labels(node),
        kubelet_version=node.kubelet_version,
        ready=ready,
        at=at,
        created_at=at,
    )


@dataclass(frozen=True, slots=True)
class SilenceCycle:
    starts: float  # scenario time of the first silence
    silent_for: float
    healthy_for: float

    def silent_at(self, when: float) -> bool:
        if when < self.starts:
            return False
        return (when - self.starts) % (self.silent_for + self.healthy_for) < self.silent_for


class Kubelet:
    """One node's kubelet and what the node lifecycle controller thinks of it."""

    def __init__(
        self, store: ObjectStore, node: DemoNode, alive: Callable[[float], bool], renewed: float
    ) -> None:
        self.store = store
        self.name = node.name
        self.alive = alive
        self.last_renewal = renewed
        self.unknown = False  # the controller marked it Unknown; the kubelet will repost
        # False once its instance is deleted: the machine, and the kubelet on it, are gone.
        self.running = True

    def renew(self, when: float) -> None:
        if not (self.running and self.alive(when)):
            return
        self.last_renewal = when
        self.store.renew_lease(NODE_LEASE_NAMESPACE, self.name, when)
        if self.unknown:
            # Back: the kubelet posts Ready again at once, a new transition.
            self.unknown = False
            self.store.set_node_ready(self.name, True, at=when)

    def post_status(self, when: float) -> None:
        if self.running and self.alive(when) and not self.unknown:
            self.store.heartbeat_node(self.name, at=when)

    def monitor(self, when: float) -> None:
        if not self.unknown and when - self.last_renewal > NODE_MONITOR_GRACE:
            self.unknown = True
            self.store.set_node_ready(
                self.name, "Unknown", at=self.last_renewal + NODE_MONITOR_GRACE
            )


class NodeFleet:
    """The cluster's kubelets by node name, watched by the node lifecycle controller.

    Used from the scenario's thread only (the cloud controller acts there too), so a kubelet
    never posts to a Node that is being deleted.
    """

    def __init__(self) -> None:
        self.kubelets: dict[str, Kubelet] = {}

    def start(
        self, scenario: Scenario, kubelet: Kubelet, *, first_renewal: float, first_status: float
    ) -> None:
        """Add `kubelet`, and schedule its Lease renewals and status posts from these times."""
        self.kubelets[kubelet.name] = kubelet
        scenario.every(first_renewal, LEASE_RENEW_INTERVAL, kubelet.renew)
        scenario.every(first_status, STATUS_REPORT_INTERVAL, kubelet.post_status)

    def power_off(self, name: str) -> None:
        """The node's instance is gone: its kubelet posts nothing more (the dead NotReady
        node has no kubelet to stop)."""
        kubelet = self.kubelets.get(name)
        if kubelet is not None:
            kubelet.running = False

    def forget(self, name: str) -> None:
        """The Node is deleted: nothing watches it any more."""
        self.kubelets.pop(name, None)

    def monitor(self, when: float) -> None:
        for kubelet in list(self.kubelets.values()):
            kubelet.monitor(when)


def run_node_fleet(
    scenario: Scenario, nodes: Sequence[DemoNode], now: float, silence: SilenceCycle
) -> NodeFleet:
    """Create the Nodes and their Leases at `now` and schedule their kubelets."""
    store = scenario.store
    ready_names = [node.name for node in nodes if node.ready]
    # The last healthy worker of the first nodegroup is the one that goes silent.
    first_group = nodes[0].nodegroup if nodes else ""
    silent_name = next(
        (n.name for n in reversed(nodes) if n.ready and n.nodegroup == first_group), None
    )
    fleet = NodeFleet()
    for node in nodes:
        register_node(store, node, now - node.age_seconds)
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
        status_phase = phase * STATUS_REPORT_INTERVAL / LEASE_RENEW_INTERVAL
        fleet.start(
            scenario,
            Kubelet(store, node, alive, renewed),
            first_renewal=renewed + LEASE_RENEW_INTERVAL,
            first_status=now + status_phase,
        )

    scenario.every(now + NODE_MONITOR_PERIOD, NODE_MONITOR_PERIOD, fleet.monitor)
    return fleet


def _always(when: float) -> bool:
    return True
