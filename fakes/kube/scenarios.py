"""Scenarios: clusters whose Leases change with time, for the demo, tests and benchmarks.

A scenario is a timeline of actions in scenario time (epoch seconds). A ScenarioRunner
advances it with the wall clock (optionally sped up) in a daemon thread, or step by step
with `advance()` so a test can live through minutes of cluster life in milliseconds. Every
timestamp a scenario writes is the scheduled time of its action, not the moment the thread
got round to it, so renewals are evenly spaced like real heartbeats.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fakes.kube.demo_nodes import DemoNode, SilenceCycle, nks_demo_nodes, run_node_fleet
from fakes.kube.resources import OLDEST_EMULATION_VERSION
from fakes.kube.store import ObjectStore

logger = logging.getLogger(__name__)

Action = Callable[[float], None]
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_RENEW_INTERVAL = 10.0
NODE_LEASE_DURATION = 40
DAY = 86_400.0


class Scenario:
    """A timeline of actions; subclasses create objects in `setup` and schedule with `at`."""

    name = "scenario"

    def __init__(self) -> None:
        self._agenda: list[tuple[float, int, Action]] = []
        self._order = itertools.count()  # ties run in scheduling order
        self._store: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            raise RuntimeError("the scenario has not begun")
        return self._store

    def begin(self, store: ObjectStore, now: float) -> None:
        self._store = store
        self.setup(now)

    def setup(self, now: float) -> None:
        """Create the initial objects and schedule what happens next."""

    def at(self, when: float, action: Action) -> None:
        heapq.heappush(self._agenda, (when, next(self._order), action))

    def every(self, first: float, interval: float, action: Action) -> None:
        """Run `action(when)` at `first` and every `interval` seconds after it."""

        def run(when: float) -> None:
            self.at(when + interval, run)  # first, so a failing action keeps its schedule
            action(when)

        self.at(first, run)

    def run_until(self, now: float) -> int:
        """Run every action due at or before `now`; returns how many ran."""
        ran = 0
        while self._agenda and self._agenda[0][0] <= now:
            when, _, action = heapq.heappop(self._agenda)
            try:
                action(when)
            except Exception:
                logger.exception("scenario %s: action at %.3f failed", self.name, when)
            ran += 1
        return ran


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
                owner_references=[_node_owner(node, uuid.uuid4())],
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


def _node_owner(node: str, uid: uuid.UUID) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": str(uid)}


@dataclass
class _Leadership:
    """The state a leader-election client keeps in its Lease."""

    namespace: str
    name: str
    holder: str
    duration: int
    acquired_at: float
    transitions: int
    strategy: str | None = None
    labels: dict[str, str] | None = None
    last_renewal: float = 0.0

    def spec(self, renewed_at: float) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquired_at,
            "renewTime": renewed_at,
            "leaseTransitions": self.transitions,
        }
        if self.strategy:
            spec["strategy"] = self.strategy
        return spec

    def renew(self, store: ObjectStore, when: float, *, created_at: float | None = None) -> None:
        self.last_renewal = when
        store.apply_lease(
            self.namespace, self.name, self.spec(when), self.labels, created_at=created_at
        )

    def hand_over(self, store: ObjectStore, new_holder: str, when: float) -> None:
        self.holder = new_holder
        self.acquired_at = when
        self.transitions += 1
        self.renew(store, when)


@dataclass
class _Candidate:
    namespace: str
    name: str
    lease_name: str
    binary_version: str
    emulation_version: str
    renewed_at: float
    pinged_at: float | None = None

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "leaseName": self.lease_name,
            "renewTime": self.renewed_at,
            "binaryVersion": self.binary_version,
            "emulationVersion": self.emulation_version,
            "strategy": OLDEST_EMULATION_VERSION,
        }
        if self.pinged_at is not None:
            spec["pingTime"] = self.pinged_at
        return spec


@dataclass
class DemoTimings:
    """How the demo's troubles unfold (seconds of scenario time)."""

    control_plane_renew: float = 2.0
    apiserver_identity_renew: float = 10.0
    flap_min: float = 20.0
    flap_max: float = 40.0
    leader_death_after: float = 45.0  # the first death comes soon so the demo shows it early
    leader_healthy_for: float = 90.0
    node_silent_after: float = 60.0
    node_silent_for: float = 240.0
    node_healthy_for: float = 300.0
    candidate_ping_every: float = 60.0


class DemoScenario(Scenario):
    """A small NKS-like cluster with everything an on-call engineer should notice.

    - kube-system: kube-controller-manager, cloud-controller-manager (holders like
      `master-0_6f1c...`, 15 s leases renewed every 2 s) and kube-scheduler under coordinated
      leader election (strategy OldestEmulationVersion, LeaseCandidates on master-0..2 that
      answer the periodic pings by renewing).
    - kube-system: three API server identity leases (`apiserver-<id>`, 3600 s, every 10 s)
      and the Cinder CSI attacher's leader lease.
    - cert-manager/cert-manager-controller flaps: the holder moves between three pods every
      20-40 s and leaseTransitions counts up.
    - ingress-nginx/ingress-nginx-leader: the leader dies (stops renewing), the lease expires,
      stays expired for one more lease duration, then the standby takes over; 90 s later
      that one dies too, and so on.
    - kube-node-lease: 50 workers `demo-worker-0..49` (40 s, every 10 s, phases spread);
      `demo-worker-7` goes silent after a minute for four minutes, so its lease expires,
      then recovers for five minutes, and repeats. These are leases without Node objects.
    - With `fleet` (what `make_scenario("demo")` passes: the fake NKS's staging-web
      workers, see demo_nodes) the workers are real Nodes instead, each with its heartbeat
      Lease: one NotReady with an expired heartbeat, one that goes silent on the same
      timings and comes back Ready.
    """

    name = "demo"
    NODE_COUNT = 50
    SILENT_NODE = "demo-worker-7"
    CLUSTER_VERSION = "1.33.4"

    def __init__(
        self,
        *,
        seed: int | None = None,
        timings: DemoTimings | None = None,
        fleet: Sequence[DemoNode] | None = None,
    ) -> None:
        super().__init__()
        self.timings = timings or DemoTimings()
        self.fleet = fleet
        # Scenario randomness is for plausible-looking data, never for security.
        self.random = random.Random(seed)  # noqa: S311

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.random.getrandbits(128), version=4))

    def _pod_suffix(self, length: int = 5) -> str:
        return "".join(self.random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))

    def setup(self, now: float) -> None:
        self.created = now - 12 * DAY
        self._control_plane(now)
        self._apiserver_identities(now)
        self._csi_attacher(now)
        self._flapping_operator(now)
        self._dying_leader(now)
        self._nodes(now)

    # --- kube-system --------------------------------------------------------------------

    def _control_plane(self, now: float) -> None:
        timing = self.timings.control_plane_renew
        for index, (component, master) in enumerate(
            (("kube-controller-manager", "master-0"), ("cloud-controller-manager", "master-2"))
        ):
            leadership = _Leadership(
                "kube-system",
                component,
                f"{master}_{self._uuid()}",
                duration=15,
                acquired_at=now - 3 * DAY - index * 3600,
                transitions=2 + index,
            )
            leadership.renew(self.store, now - timing, created_at=self.created)
            self.every(
                now + index * 0.4,
                timing,
                lambda when, lease=leadership: lease.renew(self.store, when),
            )

        # Coordinated leader election: the holder is the elected LeaseCandidate's name.
        scheduler = _Leadership(
            "kube-system",
            "kube-scheduler",
            "kube-scheduler-master-1",
            duration=15,
            acquired_at=now - 2 * DAY,
            transitions=4,
            strategy=OLDEST_EMULATION_VERSION,
        )
        scheduler.renew(self.store, now - timing, created_at=self.created)
        self.every(now + 1.1, timing, lambda when: scheduler.renew(self.store, when))
        candidates = [
            _Candidate(
                "kube-system",
                f"kube-scheduler-master-{index}",
                "kube-scheduler",
                self.CLUSTER_VERSION,
                "1.33.0",
                renewed_at=now - 30 + index,
            )
            for index in range(3)
        ]
        for candidate in candidates:
            self.store.apply_candidate(
                candidate.namespace, candidate.name, candidate.spec(), created_at=self.created
            )

        def ping(when: float) -> None:
            # The election controller pings; each live candidate answers by renewing.
            for candidate in candidates:
                candidate.pinged_at = when
                self.store.apply_candidate(candidate.namespace, candidate.name, candidate.spec())
                self.at(when + self.random.uniform(0.3, 1.5), lambda at, c=candidate: answer(c, at))

        def answer(candidate: _Candidate, when: float) -> None:
            candidate.renewed_at = when
            self.store.apply_candidate(candidate.namespace, candidate.name, candidate.spec())

        self.every(now + 20, self.timings.candidate_ping_every, ping)

    def _apiserver_identities(self, now: float) -> None:
        for index in range(3):
            identity = "apiserver-" + "".join(
                self.random.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(26)
            )
            lease = _Leadership(
                "kube-system",
                identity,
                f"{identity}_{self._uuid()}",
                duration=3600,
                acquired_at=now - 5 * DAY,
                transitions=0,
                labels={
                    "apiserver.kubernetes.io/identity": "kube-apiserver",
                    "kubernetes.io/hostname": f"master-{index}",
                },
            )
            interval = self.timings.apiserver_identity_renew
            lease.renew(self.store, now - interval + index * 3, created_at=now - 5 * DAY)
            self.every(
                now + index * 3, interval, lambda when, lease=lease: lease.renew(self.store, when)
            )

    def _csi_attacher(self, now: float) -> None:
        lease = _Leadership(
            "kube-system",
            "external-attacher-leader-cinder-csi-openstack-org",
            "csi-cinder-controllerplugin-0",
            duration=15,
            acquired_at=now - 6 * DAY,
            transitions=1,
        )
        lease.renew(self.store, now - 5, created_at=self.created)
        self.every(now + 2.5, 5.0, lambda when: lease.renew(self.store, when))

    # --- operators ----------------------------------------------------------------------

    def _flapping_operator(self, now: float) -> None:
        replica_set = f"cert-manager-{self._pod_suffix(10)}"
        pods = [f"{replica_set}-{self._pod_suffix()}" for _ in range(3)]
        lease = _Leadership(
            "cert-manager",
            "cert-manager-controller",
            f"{pods[0]}-external-cert-manager-controller",
            duration=15,
            acquired_at=now - 25,
            transitions=37,
        )
        lease.renew(self.store, now - 1, created_at=now - 9 * DAY)
        next_flip = now + self.random.uniform(self.timings.flap_min, self.timings.flap_max)

        def renew_or_flip(when: float) -> None:
            nonlocal next_flip
            if when >= next_flip:
                current = next(pod for pod in pods if lease.holder.startswith(pod))
                successor = self.random.choice([pod for pod in pods if pod != current])
                lease.hand_over(self.store, f"{successor}-external-cert-manager-controller", when)
                next_flip = when + self.random.uniform(self.timings.flap_min, self.timings.flap_max)
            else:
                lease.renew(self.store, when)

        self.every(now + 1, 2.0, renew_or_flip)

    def _dying_leader(self, now: float) -> None:
        replica_set = f"ingress-nginx-controller-{self._pod_suffix(10)}"
        pods = [f"{replica_set}-{self._pod_suffix()}" for _ in range(2)]
        lease = _Leadership(
            "ingress-nginx",
            "ingress-nginx-leader",
            pods[0],
            duration=30,
            acquired_at=now - 4 * DAY,
            transitions=5,
        )
        lease.renew(self.store, now - 2, created_at=now - 30 * DAY)
        state = {
            "alive": True,
            "dies_at": now + self.timings.leader_death_after,
            "takeover_at": 0.0,
        }

        def tick(when: float) -> None:
            if state["alive"]:
                if when < state["dies_at"]:
                    lease.renew(self.store, when)
                    return
                # The holder is gone: nobody renews. The lease expires `duration` seconds after
                # its last renewal; the standby only notices one more duration later.
                state["alive"] = False
                state["takeover_at"] = lease.last_renewal + 2 * lease.duration
            elif when >= state["takeover_at"]:
                successor = pods[1] if lease.holder == pods[0] else pods[0]
                lease.hand_over(self.store, successor, when)
                state["alive"] = True
                state["dies_at"] = when + self.timings.leader_healthy_for

        self.every(now, 2.0, tick)

    # --- nodes --------------------------------------------------------------------------

    def _nodes(self, now: float) -> None:
        timings = self.timings
        if self.fleet is not None:
            cycle = SilenceCycle(
                now + timings.node_silent_after, timings.node_silent_for, timings.node_healthy_for
            )
            run_node_fleet(self, self.fleet, now, cycle)
            return
        silence_starts = now + timings.node_silent_after
        cycle = timings.node_silent_for + timings.node_healthy_for
        for index in range(self.NODE_COUNT):
            node = f"demo-worker-{index}"
            phase = index * NODE_RENEW_INTERVAL / self.NODE_COUNT
            last_renewal = now - NODE_RENEW_INTERVAL + phase
            self.store.apply_lease(
                NODE_LEASE_NAMESPACE,
                node,
                {
                    "holderIdentity": node,
                    "leaseDurationSeconds": NODE_LEASE_DURATION,
                    "renewTime": last_renewal,
                },
                owner_references=[_node_owner(node, uuid.UUID(self._uuid()))],
                created_at=self.created + index * 60,
            )

            def heartbeat(when: float, node: str = node) -> None:
                wedged = (
                    node == self.SILENT_NODE
                    and when >= silence_starts
                    and (when - silence_starts) % cycle < timings.node_silent_for
                )
                if wedged:
                    return  # the kubelet is stuck: no heartbeats
                self.store.renew_lease(NODE_LEASE_NAMESPACE, node, when)

            self.every(last_renewal + NODE_RENEW_INTERVAL, NODE_RENEW_INTERVAL, heartbeat)


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


class ScenarioRunner:
    """Advances a scenario with (optionally sped-up) real time, or by explicit steps.

    `speed` 10 lives ten scenario seconds per wall second; timestamps then run ahead of the
    wall clock, which is fine for tests but not for a dashboard that computes expiry from
    its own clock, so the demo uses 1.
    """

    def __init__(
        self,
        store: ObjectStore,
        scenario: Scenario,
        *,
        speed: float = 1.0,
        start_time: float | None = None,
        tick_seconds: float = 0.1,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.store = store
        self.scenario = scenario
        self.speed = speed
        # Fixed when the scenario begins, so a runner built early does not start behind.
        self._start_time = start_time
        self.tick_seconds = tick_seconds
        self._manual_offset = 0.0
        self._began = False
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wall_start = 0.0

    def _begin(self) -> None:
        if not self._began:
            self._began = True
            self.scenario.begin(self.store, self.start_time)

    @property
    def start_time(self) -> float:
        """Scenario time at the beginning (epoch seconds); fixed on first use."""
        if self._start_time is None:
            self._start_time = time.time()
        return self._start_time

    @property
    def now(self) -> float:
        """Scenario time in epoch seconds."""
        if self._thread is None:
            return self.start_time + self._manual_offset
        return (
            self.start_time
            + self._manual_offset
            + (time.monotonic() - self._wall_start) * self.speed
        )

    def advance(self, seconds: float) -> int:
        """Live through `seconds` of scenario time at once (not while the thread runs)."""
        if self._thread is not None:
            raise RuntimeError("advance() is for runners that were not started")
        self._begin()
        self._manual_offset += seconds
        return self.scenario.run_until(self.now)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._begin()
        self._wall_start = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"scenario:{self.scenario.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.tick_seconds):
            self.scenario.run_until(self.now)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
