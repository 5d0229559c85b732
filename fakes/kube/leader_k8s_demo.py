"""The demo's elections run by the bluetape4k leader-k8s library, written the way its
KubernetesLeaseLock writes them (leader-k8s/.../internal/KubernetesLeaseLock.kt):

- holderIdentity is a fresh fencing token per acquisition (one `runIfLeader` call):
  `b4k-` + 22 Base58 characters; every create and update also (re)writes the annotations
  `leader.bluetape4k.io/audit-leader-id` (the slot's leader id, else the token),
  `leader.bluetape4k.io/managed-by: bluetape4k-leader-k8s` and `leader.bluetape4k.io/node-id`
  (LeaderNodeId.Default, `<host>:<pid>`: a pod's name and the JVM's pid 1 in a container);
- an acquisition takes a lease that is free (no holder), its own, or expired. A holder change
  sets acquireTime to now and counts leaseTransitions up; taking a released lease keeps the
  previous acquireTime and count, as the library does (its transition test needs a previous
  holder);
- the auto-extender renews every leaseTime / 3 while the holder still owns an unexpired lease,
  and stops for good once it does not; release clears holderIdentity and sets renewTime.

What happens, in scenario time (LeaderK8sTimings):
- operators/reconciler: pod A holds it and pauses (a long GC or a partition) after 20 s; its
  lease expires and pod B takes over with a new token; at 120 s pod A wakes up and writes back
  the Lease it had cached, with its OLD token (the one token reuse of a demo run: fencing is
  broken); B's next renewal finds it no longer holds the lease and stops. From then on each
  holder crashes three minutes into its term, a standby takes over with a new token once the
  lease has expired, and a new pod replaces the crashed one.
- jobs/batch-workers-slot-0..2: a three-slot group (maxLeaders 3), each slot held by its own
  worker. Slot 2 goes unheld in a seven-minute cycle: released at 40 s and taken again 90 s
  later with a new token; held for two minutes; then its pod crashes, the lease expires, and
  the replacement pod takes it with a new token 90 s after the crash; two minutes later the
  cycle starts again with a release.
- jobs/nightly-export-slot-0..1: a two-slot group whose node is drained at 90 s and every
  fifteen minutes after: both workers are killed, both slots expire, and the group has no
  leader until the replacement pods take both slots with new tokens three minutes later.
- operators/report-export: a leader-k8s lease until its holder releases it at 60 s; at 75 s a
  legacy client-go deployment configured with the same lock name takes it (holder = pod
  name, annotations kept as client-go keeps an object's metadata): a foreign writer.

Every write goes through ObjectStore.apply_lease, so watchers see ADDED / MODIFIED events.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakes.kube.store import ObjectStore
    from fakes.kube.timeline import Scenario

# The library's wire contract (KubernetesLeaseAnnotations, KubernetesLeaseLock.newOwnerToken).
# Spelled out here rather than imported from leases/: the fake plays the library, not us.
AUDIT_LEADER_ID = "leader.bluetape4k.io/audit-leader-id"
MANAGED_BY = "leader.bluetape4k.io/managed-by"
MANAGED_BY_VALUE = "bluetape4k-leader-k8s"
NODE_ID = "leader.bluetape4k.io/node-id"
TOKEN_PREFIX = "b4k-"  # noqa: S105 (a fencing token's fixed prefix, not a secret)
TOKEN_LENGTH = 22
BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
# Pod name suffixes as the ReplicaSet controller makes them (no vowels, no 0/1/3).
_POD_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_HOUR = 3600.0
_DAY = 86_400.0


@dataclass
class LeaderK8sTimings:
    """How the leader-k8s elections unfold (seconds of scenario time after the start)."""

    lease_time: int = 30  # leaderOptions.leaseTime, written as leaseDurationSeconds
    standby_retry: float = 5.0  # a contender's next runIfLeader attempt
    reconciler_pause_after: float = 20.0
    token_reuse_after: float = 120.0
    reconciler_term: float = 180.0  # then the holder crashes
    reconciler_replacement_after: float = 25.0  # crash to the new pod's first attempt
    slot_release_after: float = 40.0
    slot_released_for: float = 90.0
    slot_term: float = 120.0
    slot_replacement_after: float = 90.0  # crash to the replacement pod's first attempt
    drain_after: float = 90.0  # the nightly-export workers' node is drained
    drained_for: float = 180.0  # eviction to the replacement pods' first attempts
    drain_every: float = 900.0
    foreign_release_after: float = 60.0
    foreign_takeover_after: float = 75.0
    client_go_lease_duration: int = 15
    client_go_retry: float = 2.0

    @property
    def renew_every(self) -> float:
        # LeaderLeaseAutoExtender: cadence = leaseTime / 3.
        return self.lease_time / 3


@dataclass
class LeaderK8sLease:
    """One Lease as the library reads and writes it (its last written state)."""

    namespace: str
    name: str
    holder: str | None = None
    duration: int = 30
    acquired_at: float | None = None
    renewed_at: float | None = None
    transitions: int = 0
    annotations: dict[str, str] = field(default_factory=dict)

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration,
            "acquireTime": self.acquired_at,
            "renewTime": self.renewed_at,
            "leaseTransitions": self.transitions,
        }
        return {key: value for key, value in spec.items() if value is not None}

    def write(self, store: ObjectStore, *, created_at: float | None = None) -> None:
        store.apply_lease(
            self.namespace,
            self.name,
            self.spec(),
            annotations=dict(self.annotations),
            created_at=created_at,
        )

    def expired(self, when: float) -> bool:
        # KubernetesLeaseLock.isExpired: not (renewTime + leaseDurationSeconds) after now.
        return self.renewed_at is None or self.renewed_at + self.duration <= when

    def try_acquire(
        self, store: ObjectStore, when: float, token: str, annotations: dict[str, str]
    ) -> bool:
        """KubernetesLeaseLock.tryAcquireOnce for a Lease that exists."""
        if self.holder and self.holder != token and not self.expired(when):
            return False
        if self.holder and self.holder != token:
            self.acquired_at = when
            self.transitions += 1
        elif self.acquired_at is None:
            self.acquired_at = when
        self.holder = token
        self.renewed_at = when
        self.annotations = {**self.annotations, **annotations}
        self.write(store)
        return True

    def extend(
        self, store: ObjectStore, when: float, token: str, annotations: dict[str, str]
    ) -> bool:
        """extendDetailed: only the owner of an unexpired lease renews it."""
        if self.holder != token or self.expired(when):
            return False
        self.renewed_at = when
        self.annotations = {**self.annotations, **annotations}
        self.write(store)
        return True

    def release(
        self, store: ObjectStore, when: float, token: str, annotations: dict[str, str]
    ) -> bool:
        """unlock() without a minimum lease time left: the holder is cleared."""
        if self.holder != token:
            return False
        self.holder = None
        self.renewed_at = when
        self.annotations = {**self.annotations, **annotations}
        self.write(store)
        return True


class ElectorPod:
    """A pod that runs `runIfLeader(lock)` in a loop with auto-extension: it contends every
    `standby_retry` seconds with one token per call, renews while it holds the lease, and
    starts a new call (a new token) once its watchdog finds it no longer does."""

    def __init__(
        self,
        elections: LeaderK8sElections,
        lease: LeaderK8sLease,
        pod: str,
        *,
        leader_id: str | None = None,
    ) -> None:
        self.elections = elections
        self.lease = lease
        self.pod = pod
        self.node_id = f"{pod}:1"
        self.leader_id = leader_id
        self.token: str | None = None
        # Bumped whenever the pod stops or starts over, so an old renewal chain ends.
        self._generation = 0
        self.on_acquired: Callable[[ElectorPod, float], None] | None = None

    def annotations(self) -> dict[str, str]:
        token = self.token or ""
        return {
            AUDIT_LEADER_ID: self.leader_id or token,
            MANAGED_BY: MANAGED_BY_VALUE,
            NODE_ID: self.node_id,
        }

    @property
    def holds(self) -> bool:
        return self.token is not None and self.lease.holder == self.token

    def start(self, when: float) -> None:
        """Begin contending at `when`."""
        self._generation += 1
        self.elections.scenario.at(when, self._runner(self._contend))

    def stop(self) -> None:
        """The pod is gone (crashed, paused or done): it writes nothing more."""
        self._generation += 1

    def hold(self, first_renewal: float) -> None:
        """Already the holder at the start: renew from `first_renewal` on."""
        self._generation += 1
        self.elections.scenario.at(first_renewal, self._runner(self._renew))

    def release(self, when: float) -> None:
        """The action ended: stop renewing and release; no new call is made."""
        self.stop()
        if self.token is not None:
            self.lease.release(self.elections.store, when, self.token, self.annotations())
        self.token = None

    def _runner(self, step: Callable[[float], None]) -> Callable[[float], None]:
        generation = self._generation

        def run(when: float) -> None:
            if generation == self._generation:
                step(when)

        return run

    def _contend(self, when: float) -> None:
        if self.token is None:
            self.token = self.elections.new_token()
        timings = self.elections.timings
        if self.lease.try_acquire(self.elections.store, when, self.token, self.annotations()):
            self.elections.scenario.at(when + timings.renew_every, self._runner(self._renew))
            if self.on_acquired is not None:
                self.on_acquired(self, when)
        else:
            self.elections.scenario.at(when + timings.standby_retry, self._runner(self._contend))

    def _renew(self, when: float) -> None:
        timings = self.elections.timings
        if self.token is None:
            return  # released meanwhile: nothing left to extend
        if self.lease.extend(self.elections.store, when, self.token, self.annotations()):
            self.elections.scenario.at(when + timings.renew_every, self._runner(self._renew))
            return
        # NotHeld: the watchdog stops and the owner-checked unlock is skipped; the pod's loop
        # calls runIfLeader again, with a new lock and so a new token.
        self.token = None
        self.elections.scenario.at(when + timings.standby_retry, self._runner(self._contend))


class LeaderK8sElections:
    """Sets up and drives the demo's leader-k8s leases on a scenario's timeline."""

    RECONCILER = ("operators", "reconciler")
    GROUP = ("jobs", "batch-workers")
    GROUP_SIZE = 3
    UNSTAFFED_SLOT = 2
    DRAINED_GROUP = ("jobs", "nightly-export")
    DRAINED_GROUP_SIZE = 2  # maxLeaders left at the library's default
    FOREIGN = ("operators", "report-export")

    def __init__(
        self,
        scenario: Scenario,
        rng: random.Random,
        timings: LeaderK8sTimings | None = None,
    ) -> None:
        self.scenario = scenario
        self.random = rng
        self.timings = timings or LeaderK8sTimings()

    @property
    def store(self) -> ObjectStore:
        return self.scenario.store

    def new_token(self) -> str:
        return TOKEN_PREFIX + "".join(self.random.choice(BASE58) for _ in range(TOKEN_LENGTH))

    def _suffix(self, length: int) -> str:
        return "".join(self.random.choice(_POD_ALPHABET) for _ in range(length))

    def _deployment(self, name: str) -> Callable[[], str]:
        """Pod names of one Deployment's current ReplicaSet."""
        replica_set = f"{name}-{self._suffix(10)}"
        return lambda: f"{replica_set}-{self._suffix(5)}"

    def _lease(self, namespace: str, name: str) -> LeaderK8sLease:
        return LeaderK8sLease(namespace, name, duration=self.timings.lease_time)

    def _seed(
        self,
        lease: LeaderK8sLease,
        holder: ElectorPod,
        now: float,
        *,
        acquired_ago: float,
        transitions: int,
        created_ago: float,
        phase: float,
    ) -> None:
        """The lease as it stands at the start: held by `holder`, last renewed `phase`
        seconds into the current renewal period, renewals going on from there."""
        holder.token = self.new_token()
        lease.holder = holder.token
        lease.acquired_at = now - acquired_ago
        lease.renewed_at = now - self.timings.renew_every + phase
        lease.transitions = transitions
        lease.annotations = holder.annotations()
        lease.write(self.store, created_at=now - created_ago)
        holder.hold(lease.renewed_at + self.timings.renew_every)

    def setup(self, now: float) -> None:
        self._reconciler(now)
        self._group(now)
        self._drained_group(now)
        self._foreign_writer(now)

    def _reconciler(self, now: float) -> None:
        timings = self.timings
        lease = self._lease(*self.RECONCILER)
        new_pod = self._deployment("reconciler")
        stale = ElectorPod(self, lease, new_pod())
        standby = ElectorPod(self, lease, new_pod())
        self._seed(
            lease,
            stale,
            now,
            acquired_ago=5 * _HOUR,
            transitions=6,
            created_ago=40 * _DAY,
            phase=3.0,
        )
        standby.start(now + timings.standby_retry / 2)
        cached: dict[str, Any] = {}

        def pause(when: float) -> None:
            # A paused JVM keeps the Lease object it last wrote, token and all.
            stale.stop()
            cached.update(
                acquired_at=lease.acquired_at,
                transitions=lease.transitions,
                annotations=dict(lease.annotations),
            )

        def write_back(when: float) -> None:
            # Back from the pause, the pod writes its cached Lease with a fresh renewTime
            # and no resourceVersion (an unconditional update), over whoever holds it now.
            lease.holder = stale.token
            lease.acquired_at = cached["acquired_at"]
            lease.transitions = cached["transitions"]
            lease.annotations = cached["annotations"]
            lease.renewed_at = when
            lease.write(self.store)
            stale.hold(when + timings.renew_every)
            crash_later(stale, when)

        def crash_later(pod: ElectorPod, when: float) -> None:
            token = pod.token

            def crash(at: float) -> None:
                if pod.token != token or not pod.holds:
                    return  # it lost the lease before: nothing to crash out of
                pod.stop()
                replacement = ElectorPod(self, lease, new_pod())
                replacement.on_acquired = crash_later
                # The ReplicaSet's new pod contends once its JVM is up.
                replacement.start(at + timings.reconciler_replacement_after)

            self.scenario.at(when + timings.reconciler_term, crash)

        standby.on_acquired = crash_later
        self.scenario.at(now + timings.reconciler_pause_after, pause)
        self.scenario.at(now + timings.token_reuse_after, write_back)

    def _group(self, now: float) -> None:
        timings = self.timings
        namespace, lock = self.GROUP
        new_pod = self._deployment(lock)

        def worker(lease: LeaderK8sLease) -> ElectorPod:
            pod = new_pod()
            # LeaderSlot(lock, leaderId): the audit id is the worker's own name for its shard.
            return ElectorPod(self, lease, pod, leader_id=f"{lock}-{pod.rsplit('-', 1)[-1]}")

        leases = [self._lease(namespace, f"{lock}-slot-{slot}") for slot in range(self.GROUP_SIZE)]
        holders = [worker(lease) for lease in leases]
        for slot, (lease, holder) in enumerate(zip(leases, holders, strict=True)):
            self._seed(
                lease,
                holder,
                now,
                acquired_ago=2 * _HOUR + slot * 600,
                transitions=slot,
                created_ago=12 * _DAY,
                phase=1.0 + slot * 3.0,
            )
        slot_lease = leases[self.UNSTAFFED_SLOT]
        first = holders[self.UNSTAFFED_SLOT]
        ends_with_crash = True

        def acquired(pod: ElectorPod, when: float) -> None:
            # Terms end alternately with a release (the action finished) and a crash.
            nonlocal ends_with_crash
            end = crash if ends_with_crash else release
            ends_with_crash = not ends_with_crash
            token = pod.token
            self.scenario.at(
                when + timings.slot_term,
                lambda at: end(pod, at) if pod.token == token and pod.holds else None,
            )

        def release(pod: ElectorPod, when: float) -> None:
            pod.release(when)
            # The worker's next runIfLeader call comes with its next batch.
            pod.start(when + timings.slot_released_for)

        def crash(pod: ElectorPod, when: float) -> None:
            pod.stop()
            replacement = worker(slot_lease)
            replacement.on_acquired = acquired
            replacement.start(when + timings.slot_replacement_after)

        first.on_acquired = acquired
        self.scenario.at(now + timings.slot_release_after, lambda at: release(first, at))

    def _drained_group(self, now: float) -> None:
        timings = self.timings
        namespace, lock = self.DRAINED_GROUP
        new_pod = self._deployment(lock)
        leases = [
            self._lease(namespace, f"{lock}-slot-{slot}") for slot in range(self.DRAINED_GROUP_SIZE)
        ]
        holders = [ElectorPod(self, lease, new_pod()) for lease in leases]
        for slot, (lease, holder) in enumerate(zip(leases, holders, strict=True)):
            self._seed(
                lease,
                holder,
                now,
                acquired_ago=7 * _HOUR - slot * 60,
                transitions=4 + slot,
                created_ago=30 * _DAY,
                phase=2.0 + slot * 5.0,
            )

        def drain(when: float) -> None:
            # Both workers ran on the drained node: evicted, neither releases (the JVMs are
            # killed), so both slots expire and the group has no leader until the
            # replacements are scheduled and up.
            for index, pod in enumerate(holders):
                pod.stop()
                holders[index] = ElectorPod(self, leases[index], new_pod())
                holders[index].start(when + timings.drained_for + index * 1.5)

        self.scenario.every(now + timings.drain_after, timings.drain_every, drain)

    def _foreign_writer(self, now: float) -> None:
        timings = self.timings
        lease = self._lease(*self.FOREIGN)
        holder = ElectorPod(self, lease, self._deployment("report-export")())
        self._seed(
            lease,
            holder,
            now,
            acquired_ago=40 * 60,
            transitions=2,
            created_ago=20 * _DAY,
            phase=6.0,
        )
        legacy = self._deployment("report-export-legacy")()
        self.scenario.at(now + timings.foreign_release_after, holder.release)

        def client_go_acquire(when: float) -> None:
            # client-go's LeaseLock updates the object it read: annotations stay as they are;
            # any holder other than its own identity counts as a transition.
            lease.holder = legacy
            lease.duration = timings.client_go_lease_duration
            lease.acquired_at = when
            lease.renewed_at = when
            lease.transitions += 1
            lease.write(self.store)
            self.scenario.every(when + timings.client_go_retry, timings.client_go_retry, renew)

        def renew(when: float) -> None:
            lease.renewed_at = when
            lease.write(self.store)

        self.scenario.at(now + timings.foreign_takeover_after, client_go_acquire)
