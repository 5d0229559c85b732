"""leader-k8s slot groups: which leases form a group, and how staffed each group is now.

Group election in the bluetape4k leader-k8s library keeps one Lease per slot, named
`<lock>-slot-<index>` (index 0..maxLeaders-1); the watcher stores the parsed lock and index
on each leader-k8s lease (`Lease.group_name`, `Lease.group_slot`, leases/leader_k8s.py). A
lease of another library named like a slot is no member: only leader-k8s writes slots.

maxLeaders is written on no lease, so a group's size is what an admin recorded
(`LeaderGroup.expected_size`), else unknown: at least the highest slot seen plus one.

Only live leases count: a deleted slot lease is a slot nobody can hold until the elector
recreates it. Everything here reads; nothing writes but `set_expected_size`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.db import models, transaction
from django.utils.translation import gettext_lazy as _

from dashboard.natural import natural_key
from leases.models import KubeCluster, LeaderGroup, Lease, LeaseLibrary, LeaseState

# The columns the group pages, the API and the alert rules read; the annotations can be
# kilobytes per lease and are never needed here.
GROUP_LEASE_FIELDS = (
    "id",
    "cluster_id",
    "namespace",
    "name",
    "holder",
    "identity",
    "token",
    "foreign_writer",
    "library",
    "lease_class",
    "group_name",
    "group_slot",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "lease_transitions",
    "observed_at",
    "created_at",
    "deleted_at",
    "fencing_reused_at",
)


class SlotState(models.TextChoices):
    HELD = "held", _("held")
    EXPIRED = "expired", _("expired")
    FREE = "free", _("free (released)")
    # Within the group's known size, but no lease of that name was seen.
    UNSEEN = "unseen", _("never seen")
    # Its lease's state is not known now (stale data, or an expiry after the data's as-of
    # moment): the group's staffing is then not known either.
    UNKNOWN = "unknown", _("unknown")


class GroupStatus(models.TextChoices):
    STAFFED = "staffed", _("staffed")
    # An admin recorded the group's size, and fewer slots than that are held.
    DEGRADED = "degraded", _("degraded")
    # No slot is held: the group has no leader at all.
    UNSTAFFED = "unstaffed", _("unstaffed")
    # Too few slots are known held, and the others are not known (stale data).
    UNKNOWN = "unknown", _("unknown")


_SLOT_STATES = {
    LeaseState.HELD: SlotState.HELD,
    LeaseState.EXPIRED: SlotState.EXPIRED,
    LeaseState.RELEASED: SlotState.FREE,
    LeaseState.UNKNOWN: SlotState.UNKNOWN,
}


@dataclass(slots=True)
class Slot:
    index: int
    state: SlotState
    lease: Lease | None  # None for an unseen slot

    @property
    def held(self) -> bool:
        return self.state == SlotState.HELD

    def unheld_since(self) -> datetime | None:
        """Since when nobody holds this slot, as far as the lease tells; None if unknown.

        An expired slot is unheld since its expiry. A released slot keeps no release time,
        but a released lease is written no more until someone acquires it, so the last write
        the watcher saw (`observed_at`) is when it was released.
        """
        if self.lease is None or self.held:
            return None
        if self.state == SlotState.EXPIRED:
            return self.lease.expires_at
        return self.lease.observed_at


@dataclass(slots=True)
class GroupState:
    """One group as its leases say now, plus the size an admin recorded."""

    cluster_id: int
    cluster: str
    namespace: str
    name: str
    expected: int | None
    # Every index from 0 to the larger of the highest slot seen and expected - 1.
    slots: list[Slot]

    @property
    def seen(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.lease is not None]

    @property
    def highest_seen(self) -> int:
        return max(slot.index for slot in self.seen)

    @property
    def least_size(self) -> int:
        """What the leases prove of maxLeaders: slots 0..highest seen exist."""
        return self.highest_seen + 1

    @property
    def held(self) -> int:
        return sum(1 for slot in self.slots if slot.held)

    @property
    def known(self) -> bool:
        """Every slot's state is known: only then can the group be judged under-staffed."""
        return all(slot.state != SlotState.UNKNOWN for slot in self.slots)

    @property
    def free(self) -> list[Slot]:
        return [slot for slot in self.seen if not slot.held]

    @property
    def unseen(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.lease is None]

    @property
    def foreign_writers(self) -> int:
        return sum(1 for slot in self.seen if slot.lease and slot.lease.foreign_writer)

    @property
    def status(self) -> GroupStatus:
        held = self.held
        if not self.known and (held == 0 or (self.expected is not None and held < self.expected)):
            return GroupStatus.UNKNOWN  # the slots not known may be held
        if held == 0:
            return GroupStatus.UNSTAFFED
        if self.expected is not None and held < self.expected:
            return GroupStatus.DEGRADED
        return GroupStatus.STAFFED

    @property
    def leases(self) -> list[Lease]:
        return [slot.lease for slot in self.slots if slot.lease is not None]

    def unstaffed_since(self) -> datetime | None:
        """When the last slot stopped being held; None while one is held or when unknown."""
        if self.held:
            return None
        moments = [slot.unheld_since() for slot in self.seen]
        if any(moment is None for moment in moments):
            return None
        return max(moment for moment in moments if moment is not None)

    def degraded_since(self) -> datetime | None:
        """Since when fewer slots than expected are held, at the latest; None when unknown.

        From the moment the longest-unheld slot within the expected size went unheld, that
        slot alone kept the group under its size. A never-seen slot has no such moment.
        """
        if self.expected is None:
            return None
        moments = [slot.unheld_since() for slot in self.slots[: self.expected] if not slot.held]
        if not moments or any(moment is None for moment in moments):
            return None
        return min(moment for moment in moments if moment is not None)

    def sort_key(self) -> tuple[str, str, str]:
        return natural_key(self.cluster), natural_key(self.namespace), natural_key(self.name)


def group_member_leases() -> models.QuerySet[Lease]:
    """Live leader-k8s leases that are a slot of a group, with the columns groups read."""
    return (
        Lease.objects.live()
        .filter(library=LeaseLibrary.LEADER_K8S, group_slot__isnull=False)
        .exclude(group_name="")
        .only(*GROUP_LEASE_FIELDS)
    )


def _groups_from(
    leases: Iterable[Lease],
    names: dict[int, str],
    as_of: dict[int, datetime | None],
    sizes: dict[tuple[int, str, str], int | None],
    now: datetime,
) -> list[GroupState]:
    by_group: dict[tuple[int, str, str], dict[int, Lease]] = defaultdict(dict)
    for lease in leases:
        assert lease.group_slot is not None  # filtered in the query
        by_group[(lease.cluster_id, lease.namespace, lease.group_name)][lease.group_slot] = lease
    groups = []
    for (cluster_id, namespace, name), members in by_group.items():
        expected = sizes.get((cluster_id, namespace, name))
        size = max(max(members) + 1, expected or 0)
        slots = []
        for index in range(size):
            lease = members.get(index)
            state = (
                SlotState.UNSEEN
                if lease is None
                else _SLOT_STATES[lease.state_at(now, as_of.get(cluster_id))]
            )
            slots.append(Slot(index=index, state=state, lease=lease))
        groups.append(
            GroupState(
                cluster_id=cluster_id,
                cluster=names[cluster_id],
                namespace=namespace,
                name=name,
                expected=expected,
                slots=slots,
            )
        )
    groups.sort(key=GroupState.sort_key)
    return groups


def leader_groups(
    now: datetime,
    *,
    cluster: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    enabled_only: bool = False,
) -> list[GroupState]:
    """Every group (or the one named), naturally sorted. Three queries, however many groups."""
    clusters = KubeCluster.objects.all()
    if cluster is not None:
        clusters = clusters.filter(name=cluster)
    if enabled_only:
        clusters = clusters.filter(enabled=True)
    rows = list(clusters.values_list("id", "name", "enabled", "leases_as_of"))
    names = {cluster_id: cluster_name for cluster_id, cluster_name, _, _ in rows}
    as_of = {cluster_id: at if enabled else None for cluster_id, _, enabled, at in rows}
    if not names:
        return []
    leases = group_member_leases().filter(cluster_id__in=list(names))
    admin_rows = LeaderGroup.objects.filter(cluster_id__in=list(names))
    if namespace is not None:
        leases = leases.filter(namespace=namespace)
        admin_rows = admin_rows.filter(namespace=namespace)
    if name is not None:
        leases = leases.filter(group_name=name)
        admin_rows = admin_rows.filter(name=name)
    sizes = {
        (cluster_id, ns, group): size
        for cluster_id, ns, group, size in admin_rows.values_list(
            "cluster_id", "namespace", "name", "expected_size"
        )
    }
    return _groups_from(leases, names, as_of, sizes, now)


def leader_group(cluster: str, namespace: str, name: str, now: datetime) -> GroupState | None:
    found = leader_groups(now, cluster=cluster, namespace=namespace, name=name)
    return found[0] if found else None


@transaction.atomic
def set_expected_size(group: GroupState, expected: int | None) -> LeaderGroup:
    """Record (or clear, with None) how many slots the group should have held."""
    row, _ = LeaderGroup.objects.update_or_create(
        cluster_id=group.cluster_id,
        namespace=group.namespace,
        name=group.name,
        defaults={"expected_size": expected},
    )
    return row
