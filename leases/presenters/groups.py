"""The groups page and one group's page: leader-k8s slot groups as an engineer reads them.

Each slot shows who holds it in human terms (the node id and audit id leader-k8s writes in
annotations) with its fencing token beside it, when it expires, and a link to the slot
lease's page for its history. Slots that are free or were never seen are listed apart,
because "2 held" only means something next to "of how many".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.translation import gettext, ngettext

from dashboard.links import lease_url, path_segment
from dashboard.timefmt import When, format_duration, iso_js, relative_text, when
from leases.availability import WINDOWS, Availability, group_availability
from leases.cursors import CursorError
from leases.groups import (
    GroupState,
    GroupStatus,
    Slot,
    SlotState,
    leader_group,
    leader_group_page,
)
from leases.models import KubeCluster, LeaseState, LeaseTransition
from leases.presenters.display import expiry_text, leases_prefix
from leases.presenters.lease_detail import WINDOW_LABELS
from leases.presenters.watchers import ClusterStatus, cluster_status, cluster_statuses

# The holder changes of a group's slots shown on its page, newest first.
GROUP_CHANGES_LIMIT = 50


@dataclass(frozen=True, slots=True)
class SlotRange:
    """Consecutive slot indexes, written "3" or "3-7": a lease named `x-slot-9999` must not
    make the page list ten thousand never-seen slots one by one."""

    first: int
    last: int

    def __str__(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"


def slot_ranges(indexes: list[int]) -> list[SlotRange]:
    ranges: list[SlotRange] = []
    for index in sorted(indexes):
        if ranges and ranges[-1].last == index - 1:
            ranges[-1] = SlotRange(ranges[-1].first, index)
        else:
            ranges.append(SlotRange(index, index))
    return ranges


def size_text(group: GroupState) -> str:
    """What is known of the group's size: recorded by an admin, or proven by the slots seen."""
    if group.expected is not None:
        return gettext("%(expected)s expected") % {"expected": group.expected}
    size = group.least_size
    return ngettext(
        "≥ %(size)s slot (highest slot seen)", "≥ %(size)s slots (highest slot seen)", size
    ) % {"size": size}


def group_url(cluster: str, namespace: str, name: str) -> str:
    groups = reverse("leases:groups")
    # /leases/groups/ -> /leases/clusters/<cluster>/groups/<namespace>/<name>/, without a
    # reverse() per row (a list of groups links each one).
    base = groups.removesuffix("groups/")
    return (
        f"{base}clusters/{path_segment(cluster)}/groups/"
        f"{path_segment(namespace)}/{path_segment(name)}/"
    )


@dataclass(slots=True)
class GroupRow:
    cluster: str
    namespace: str
    name: str
    url: str
    status: GroupStatus
    held: int
    expected: int | None
    size: str
    seen: int
    free: list[SlotRange]
    unseen: list[SlotRange]
    foreign_writers: int


def group_row(group: GroupState) -> GroupRow:
    return GroupRow(
        cluster=group.cluster,
        namespace=group.namespace,
        name=group.name,
        url=group_url(group.cluster, group.namespace, group.name),
        status=group.status,
        held=group.held,
        expected=group.expected,
        size=size_text(group),
        seen=len(group.seen),
        free=slot_ranges([slot.index for slot in group.free]),
        unseen=slot_ranges([slot.index for slot in group.unseen]),
        foreign_writers=group.foreign_writers,
    )


# Groups on one page of the groups page: a fleet has hundreds, and each row costs about a
# millisecond to judge and render. Problem groups come first, and the page says how many
# are not shown.
GROUPS_PAGE_SIZE = 25


@dataclass(slots=True)
class GroupsPage:
    groups: list[GroupRow]
    problems: list[ClusterStatus]
    server_now: str
    # "0 s ago" in the reader's language, until the browser's clock takes over.
    updated_text: str
    # Every group, those needing a look (not staffed), and those of each not on this page.
    total: int = 0
    needing_a_look: int = 0
    not_shown: int = 0
    problems_not_shown: int = 0
    # This page's first group's position (1-based) in the whole list.
    first_position: int = 1
    # The query strings of this page, the next page and the first ("" on the first page).
    this_query: str = ""
    next_query: str = ""
    # The page link was no cursor of this page: the first page is shown instead.
    cursor_refused: bool = False

    @property
    def last_position(self) -> int:
        return self.first_position + len(self.groups) - 1


def groups_page(
    now: datetime, cursor: str | None = None, limit: int = GROUPS_PAGE_SIZE
) -> GroupsPage:
    """One page of the groups, problem groups first (`leader_group_page`)."""
    refused = False
    try:
        found = leader_group_page(now, cursor, limit)
    except CursorError:
        found, refused = leader_group_page(now, None, limit), True
    statuses = cluster_statuses(now)
    return GroupsPage(
        groups=[group_row(group) for group in found.groups],
        problems=[status for status in statuses if status.problem],
        server_now=iso_js(now),
        updated_text=relative_text(0),
        total=found.total,
        needing_a_look=found.needing_a_look,
        not_shown=found.not_shown,
        problems_not_shown=found.problems_not_shown,
        first_position=found.before + 1,
        this_query=urlencode({"after": cursor}) if cursor and not refused else "",
        next_query=urlencode({"after": found.next_cursor}) if found.next_cursor else "",
        cursor_refused=refused,
    )


@dataclass(slots=True)
class SlotRow:
    index: int
    state: SlotState
    lease_name: str
    url: str
    identity: str
    token: str
    foreign_writer: bool
    acquired: When | None
    renewed: When | None
    expires: When | None
    expires_text: str
    transitions: int | None
    fencing_reused: When | None


# A slot's state as its lease's (the group's reads judged it already, by the data's as-of).
_LEASE_STATES = {
    SlotState.HELD: LeaseState.HELD,
    SlotState.EXPIRED: LeaseState.EXPIRED,
    SlotState.FREE: LeaseState.RELEASED,
    SlotState.UNKNOWN: LeaseState.UNKNOWN,
}


def slot_row(slot: Slot, cluster: str, prefix: str, now: datetime) -> SlotRow:
    lease = slot.lease
    assert lease is not None  # only seen slots get a row
    state = _LEASE_STATES.get(slot.state, LeaseState.UNKNOWN)
    return SlotRow(
        index=slot.index,
        state=slot.state,
        lease_name=lease.name,
        url=lease_url(prefix, cluster, lease.namespace, lease.name),
        identity=lease.identity,
        token=lease.token,
        foreign_writer=lease.foreign_writer,
        acquired=when(lease.acquire_time, now),
        renewed=when(lease.renew_time, now),
        expires=when(lease.expires_at, now) if lease.holder else None,
        expires_text=expiry_text(state, lease.expires_at, now),
        transitions=lease.lease_transitions,
        fencing_reused=when(lease.fencing_reused_at, now),
    )


@dataclass(slots=True)
class AvailabilityRow:
    window: str
    window_label: str
    ratio: float | None
    percent: str  # "—" when nothing of the window was observed
    observed: str
    gaps: int
    longest_gap: str
    median_takeover: str


def availability_row(figures: Availability) -> AvailabilityRow:
    return AvailabilityRow(
        window=figures.window,
        window_label=str(WINDOW_LABELS.get(figures.window, figures.window)),
        ratio=figures.ratio,
        percent="—" if figures.ratio is None else f"{figures.ratio * 100:.2f} %",
        observed=format_duration(figures.observed_seconds),
        gaps=figures.gaps,
        longest_gap=format_duration(figures.longest_gap_seconds) if figures.gaps else "—",
        median_takeover=(
            "—"
            if figures.median_takeover_seconds is None
            else format_duration(figures.median_takeover_seconds)
        ),
    )


@dataclass(slots=True)
class GroupChange:
    slot: int
    url: str
    from_identity: str
    to_identity: str
    seen: When
    missed: int
    fencing_reused: bool


def group_changes(group: GroupState, prefix: str, now: datetime) -> list[GroupChange]:
    slots = {lease.pk: lease for lease in group.leases}
    transitions = (
        LeaseTransition.objects.filter(lease_id__in=list(slots))
        .only(
            "lease_id",
            "from_holder",
            "to_holder",
            "from_identity",
            "to_identity",
            "observed_at",
            "missed",
            "fencing_reused",
        )
        .order_by("-observed_at", "-id")[:GROUP_CHANGES_LIMIT]
    )
    changes = []
    for transition in transitions:
        lease = slots[transition.lease_id]
        seen = when(transition.observed_at, now)
        assert seen is not None  # observed_at is required
        changes.append(
            GroupChange(
                slot=lease.group_slot or 0,
                url=lease_url(prefix, group.cluster, lease.namespace, lease.name),
                # Rows written before identities were recorded carry only the raw holder.
                from_identity=transition.from_identity or transition.from_holder,
                to_identity=transition.to_identity or transition.to_holder,
                seen=seen,
                missed=transition.missed,
                fencing_reused=transition.fencing_reused,
            )
        )
    return changes


@dataclass(slots=True)
class GroupDetail:
    row: GroupRow
    cluster: ClusterStatus
    slots: list[SlotRow]
    availability: list[AvailabilityRow]
    changes: list[GroupChange]
    server_now: str
    # "0 s ago" in the reader's language, until the browser's clock takes over.
    updated_text: str


def group_detail(cluster: str, namespace: str, name: str, now: datetime) -> GroupDetail | None:
    group = leader_group(cluster, namespace, name, now)
    if group is None:
        return None
    kube_cluster = KubeCluster.objects.defer("kubeconfig").get(pk=group.cluster_id)
    prefix = leases_prefix()
    figures = group_availability(group.leases, now)
    return GroupDetail(
        row=group_row(group),
        cluster=cluster_status(kube_cluster, now),
        slots=[slot_row(slot, group.cluster, prefix, now) for slot in group.seen],
        availability=[availability_row(figures[window]) for window in WINDOWS if window in figures],
        changes=group_changes(group, prefix, now),
        server_now=iso_js(now),
        updated_text=relative_text(0),
    )
