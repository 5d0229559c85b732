"""leader-k8s slot groups: which leases form a group, and how staffed each group is now.

Group election in the bluetape4k leader-k8s library keeps one Lease per slot, named
`<lock>-slot-<index>` (index 0..maxLeaders-1); the watcher stores the parsed lock and index
on each leader-k8s lease (`Lease.group_name`, `Lease.group_slot`, leases/leader_k8s.py). A
lease of another library named like a slot is no member: only leader-k8s writes slots.

maxLeaders is written on no lease, so a group's size is what an admin recorded
(`LeaderGroup.expected_size`), else unknown: at least the highest slot seen plus one.

Only live leases count: a deleted slot lease is a slot nobody can hold until the elector
recreates it. Everything here reads; nothing writes but `set_expected_size`.

A fleet has many groups: the groups page and the API show a page of them
(`leader_group_page`), problem groups first. Which groups there are and how each is staffed
is one aggregate query over the slot leases (`group_summaries`, no lease rows leave the
database); only the groups on the page have their slot leases read.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from operator import attrgetter, or_

import orjson
from django.db import models, transaction
from django.db.models import Case, IntegerField, Q, Sum, Value, When
from django.db.models.expressions import RawSQL
from django.utils.translation import gettext_lazy as _

from dashboard.natural import natural_key
from leases.cursors import CursorError
from leases.models import KubeCluster, LeaderGroup, Lease, LeaseLibrary, LeaseState
from leases.queries import state_sql

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


def judge_status(held: int, expected: int | None, *, known: bool) -> GroupStatus:
    """A group's status from its slots held, its recorded size and whether every slot's
    state is known (a slot never seen is known: nobody holds it)."""
    if not known and (held == 0 or (expected is not None and held < expected)):
        return GroupStatus.UNKNOWN  # the slots not known may be held
    if held == 0:
        return GroupStatus.UNSTAFFED
    if expected is not None and held < expected:
        return GroupStatus.DEGRADED
    return GroupStatus.STAFFED


# The groups pages' order: those needing a look first, the worst first, then the rest.
STATUS_ORDER = {
    GroupStatus.UNSTAFFED: 0,
    GroupStatus.DEGRADED: 1,
    GroupStatus.UNKNOWN: 2,
    GroupStatus.STAFFED: 3,
}

# (cluster id, namespace, group name): a group, as the slot leases name it.
GroupKey = tuple[int, str, str]
# Groups named in one statement by `leader_groups(keys=...)`: three parameters each, well
# within SQLite's limit.
KEYS_PER_QUERY = 200


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
        return judge_status(self.held, self.expected, known=self.known)

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


def _cluster_rows(
    cluster: str | None, enabled_only: bool
) -> list[tuple[int, str, bool, datetime | None]]:
    """(id, name, enabled, leases_as_of) of the clusters whose groups are asked for."""
    clusters = KubeCluster.objects.all()
    if cluster is not None:
        clusters = clusters.filter(name=cluster)
    if enabled_only:
        clusters = clusters.filter(enabled=True)
    return list(clusters.values_list("id", "name", "enabled", "leases_as_of"))


def leader_groups(
    now: datetime,
    *,
    cluster: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    enabled_only: bool = False,
    keys: Collection[GroupKey] | None = None,
) -> list[GroupState]:
    """Every group (or the one named, or those of `keys`), naturally sorted. Three queries,
    however many groups (with `keys`: two more per KEYS_PER_QUERY groups past the first)."""
    rows = _cluster_rows(cluster, enabled_only)
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
    if keys is not None:
        if not keys:
            return []
        # By the (cluster, namespace, group_name) index: only these groups' slots are read,
        # a statement per KEYS_PER_QUERY groups (a mass expiry can name thousands).
        wanted = list(keys)
        chunks = [wanted[at : at + KEYS_PER_QUERY] for at in range(0, len(wanted), KEYS_PER_QUERY)]
        found = [
            lease
            for chunk in chunks
            for lease in leases.filter(
                reduce(or_, (Q(cluster_id=c, namespace=n, group_name=g) for c, n, g in chunk))
            )
        ]
        sizes = {
            (cluster_id, ns, group): size
            for chunk in chunks
            for cluster_id, ns, group, size in admin_rows.filter(
                reduce(or_, (Q(cluster_id=c, namespace=n, name=g) for c, n, g in chunk))
            ).values_list("cluster_id", "namespace", "name", "expected_size")
        }
        return _groups_from(found, names, as_of, sizes, now)
    sizes = {
        (cluster_id, ns, group): size
        for cluster_id, ns, group, size in admin_rows.values_list(
            "cluster_id", "namespace", "name", "expected_size"
        )
    }
    return _groups_from(leases, names, as_of, sizes, now)


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """A group's name and status, without its slots (`group_summaries`)."""

    cluster_id: int
    cluster: str
    namespace: str
    name: str
    status: GroupStatus
    # Its place on the groups pages: problem groups first, then in natural order. Worked
    # out once: the list is sorted by it and searched for a cursor's place.
    order: tuple[int, str, str, str] = field(init=False)

    def __post_init__(self) -> None:
        place = (
            STATUS_ORDER[self.status],
            natural_key(self.cluster),
            natural_key(self.namespace),
            natural_key(self.name),
        )
        object.__setattr__(self, "order", place)

    @property
    def key(self) -> GroupKey:
        return self.cluster_id, self.namespace, self.name


def _counted(condition: tuple[str, list[object]]) -> Sum:
    sql, params = condition
    # Built from column names and placeholders only (leases.queries.state_sql).
    matches = RawSQL(sql, tuple(params), output_field=models.BooleanField())  # noqa: S611
    return Sum(Case(When(matches, then=Value(1)), default=Value(0), output_field=IntegerField()))


def group_summaries(
    now: datetime,
    *,
    cluster: str | None = None,
    namespace: str | None = None,
    enabled_only: bool = False,
) -> list[GroupSummary]:
    """Every group's status at `now`, in the groups pages' order: three queries, one of them
    an aggregate over the slot leases that returns a row per group, not per lease. Each
    slot judged by `leases.queries.state_sql`, the SQL form of `Lease.state_at`."""
    rows = _cluster_rows(cluster, enabled_only)
    names = {cluster_id: cluster_name for cluster_id, cluster_name, _, _ in rows}
    if not names:
        return []
    # What state_sql judges by: the as-of moment of each enabled cluster (it keeps those
    # whose data is current), as `leader_groups` judges each slot.
    as_of = {cluster_id: at for cluster_id, _, enabled, at in rows if enabled and at is not None}
    held, unknown = (
        state_sql(state, now, as_of) for state in (LeaseState.HELD, LeaseState.UNKNOWN)
    )
    assert held is not None and unknown is not None
    leases = group_member_leases().filter(cluster_id__in=list(names))
    sizes = LeaderGroup.objects.filter(cluster_id__in=list(names), expected_size__isnull=False)
    if namespace is not None:
        leases = leases.filter(namespace=namespace)
        sizes = sizes.filter(namespace=namespace)
    expected = {
        (cluster_id, ns, group): size
        for cluster_id, ns, group, size in sizes.values_list(
            "cluster_id", "namespace", "name", "expected_size"
        )
    }
    counted = (
        leases.order_by()
        .values_list("cluster_id", "namespace", "group_name")
        .annotate(held=_counted(held), unknown=_counted(unknown))
    )
    summaries = [
        GroupSummary(
            cluster_id=cluster_id,
            cluster=names[cluster_id],
            namespace=ns,
            name=group,
            status=judge_status(
                held_slots, expected.get((cluster_id, ns, group)), known=not unknown_slots
            ),
        )
        for cluster_id, ns, group, held_slots, unknown_slots in counted
    ]
    summaries.sort(key=attrgetter("order"))
    return summaries


def encode_group_cursor(summary: GroupSummary) -> str:
    """The cursor of the page after this group: its place in the order, not an offset, so a
    group added or gone before it moves no other group to another page."""
    payload = [STATUS_ORDER[summary.status], summary.cluster, summary.namespace, summary.name]
    return base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=").decode()


def decode_group_cursor(token: str) -> tuple[int, str, str, str]:
    """The place a cursor names, as `GroupSummary.order` gives it; CursorError if it is not
    one (a URL anyone can edit)."""
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as error:
        raise CursorError("not a page cursor") from error
    if (
        not isinstance(payload, list)
        or len(payload) != 4
        or not isinstance(payload[0], int)
        or not all(isinstance(part, str) for part in payload[1:])
    ):
        raise CursorError("not a page cursor")
    rank, cluster, namespace, name = payload
    return rank, natural_key(cluster), natural_key(namespace), natural_key(name)


@dataclass(slots=True)
class GroupPage:
    """One page of groups, with what the whole list holds: how many groups in all, and
    how many of each status, so that no problem group is out of sight."""

    groups: list[GroupState]
    total: int
    by_status: Counter[GroupStatus]
    # Groups before this page (0 on the first) and after it.
    before: int
    next_cursor: str | None

    @property
    def needing_a_look(self) -> int:
        return self.total - self.by_status[GroupStatus.STAFFED]

    @property
    def not_shown(self) -> int:
        return self.total - len(self.groups)

    @property
    def problems_not_shown(self) -> int:
        shown = sum(1 for group in self.groups if group.status != GroupStatus.STAFFED)
        return self.needing_a_look - shown


def leader_group_page(
    now: datetime,
    cursor: str | None,
    limit: int,
    *,
    cluster: str | None = None,
    namespace: str | None = None,
) -> GroupPage:
    """`limit` groups after `cursor` (None: the first page) in the groups pages' order, with
    their slots. Its reads grow with the groups (one aggregate row each) and with the page's
    slot leases, not with the leases of the other groups. CursorError for a bad cursor."""
    after = decode_group_cursor(cursor) if cursor is not None else None
    summaries = group_summaries(now, cluster=cluster, namespace=namespace)
    start = 0 if after is None else bisect_right(summaries, after, key=attrgetter("order"))
    shown = summaries[start : start + limit]
    more = start + limit < len(summaries)
    by_key = {
        (group.cluster_id, group.namespace, group.name): group
        for group in leader_groups(
            now, cluster=cluster, namespace=namespace, keys=[summary.key for summary in shown]
        )
    }
    # A group gone between the two reads is left out; the order is the summaries'.
    groups = [by_key[summary.key] for summary in shown if summary.key in by_key]
    return GroupPage(
        groups=groups,
        total=len(summaries),
        by_status=Counter(summary.status for summary in summaries),
        before=start,
        next_cursor=encode_group_cursor(shown[-1]) if shown and more else None,
    )


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
