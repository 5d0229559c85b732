"""The demo cluster: a small NKS-like cluster with everything an on-call engineer should notice
(see DemoScenario), for `make run`."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fakes.kube.demo_nodes import DemoNode, NodeFleet, SilenceCycle, run_node_fleet
from fakes.kube.leader_k8s_demo import LeaderK8sElections, LeaderK8sTimings
from fakes.kube.resources import OLDEST_EMULATION_VERSION
from fakes.kube.store import ObjectStore
from fakes.kube.timeline import (
    DAY,
    NODE_LEASE_DURATION,
    NODE_LEASE_NAMESPACE,
    NODE_RENEW_INTERVAL,
    Scenario,
    node_owner,
)


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
    - operators and jobs: elections run by the bluetape4k leader-k8s library (fencing tokens,
      node-id annotations; see leader_k8s_demo): operators/reconciler with takeovers and, at
      120 s, the run's one fencing-token reuse; the group jobs/batch-workers-slot-0..2, whose
      slot 2 goes unheld from 40 s on in a seven-minute cycle; jobs/nightly-export-slot-0..1,
      with no slot held from about 2 to 4.5 minutes (and every fifteen minutes after);
      operators/report-export, taken over by a client-go writer at 75 s.
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
        leader_k8s_timings: LeaderK8sTimings | None = None,
    ) -> None:
        super().__init__()
        self.timings = timings or DemoTimings()
        self.leader_k8s_timings = leader_k8s_timings or LeaderK8sTimings()
        self.fleet = fleet
        # The running kubelets of `fleet`, once set up (the cloud controller follows NKS here).
        self.node_fleet: NodeFleet | None = None
        # Scenario randomness is for plausible-looking data, never for security.
        self.random = random.Random(seed)  # noqa: S311
        # The leader-k8s leases draw from their own stream: the other leases keep their names
        # and flips, as before those leases existed.
        self.elections_random = random.Random(  # noqa: S311
            None if seed is None else f"leader-k8s:{seed}"
        )

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
        self._leader_elections(now)

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

    # --- operators and jobs: the bluetape4k leader-k8s library ----------------------------

    def _leader_elections(self, now: float) -> None:
        LeaderK8sElections(self, self.elections_random, self.leader_k8s_timings).setup(now)

    # --- nodes --------------------------------------------------------------------------

    def _nodes(self, now: float) -> None:
        timings = self.timings
        if self.fleet is not None:
            cycle = SilenceCycle(
                now + timings.node_silent_after, timings.node_silent_for, timings.node_healthy_for
            )
            self.node_fleet = run_node_fleet(self, self.fleet, now, cycle)
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
                owner_references=[node_owner(node, uuid.UUID(self._uuid()))],
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
