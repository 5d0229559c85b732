"""One lease: its state, who held it from when to when, and the candidates for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.db.models import Count, Sum
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.flapping import flap_policy
from dashboard.links import path_segment
from dashboard.natural import natural_key
from dashboard.timefmt import (
    When,
    format_duration,
    iso_js,
    local_moment_text,
    relative_text,
    when,
)
from leases.availability import (
    ELECTION_CLASSES,
    WINDOWS,
    Availability,
    Segment,
    SegmentKind,
    lease_availability,
    lease_timeline,
)
from leases.flapping import flap_counts
from leases.leader_k8s import is_token
from leases.models import (
    Lease,
    LeaseCandidate,
    LeaseLibrary,
    LeaseTransition,
    Node,
)
from leases.presenters.display import (
    CLASS_LABELS,
    expiry_text,
    leases_prefix,
)
from leases.presenters.watchers import ClusterStatus, cluster_status

# A candidate answers the API server's pings by renewing; one that has not renewed for a
# minute is not taking part in the election any more.
CANDIDATE_ALIVE_WITHIN = timedelta(minutes=1)
# A flapping lease can have thousands of transitions: the page shows the newest.
TIMELINE_LIMIT = 200
# The availability strip covers the last day, like the NKS health strip.
STRIP_WINDOW = "24h"
# Each of WINDOWS in words (its key stays in the data attributes and the API).
WINDOW_LABELS = {"1h": _("1 hour"), "24h": _("24 hours"), "7d": _("7 days")}
# Holders on the strip take these many colours in turn (static/css/dashboard.css .tl-cN).
STRIP_COLOURS = 6
# A leaderless or unobserved stretch is drawn at least this share of the strip wide: a
# 10-second gap in a day would otherwise be an invisible sliver.
STRIP_MIN_SHARE = 1 / 400
# A flapping lease can have dozens of holders in a day: the legend names the first ones.
STRIP_LEGEND_LIMIT = 12
# ...and thousands of tenures: past this many stretches, the strip is drawn in this many
# equal slots instead, so a page polled every few seconds stays a few kilobytes.
STRIP_MAX_SEGMENTS = 400


@dataclass(slots=True)
class HolderPeriod:
    holder: str
    start: When | None
    end: When | None
    duration: str
    current: bool
    # Holder changes that happened unseen just before this period began.
    missed_before: int
    # The holder in human terms, and leader-k8s's fencing token ("" for other libraries).
    identity: str = ""
    token: str = ""
    # The period began with a fencing token that had held the lease before another one.
    fencing_reused: bool = False


@dataclass(frozen=True, slots=True)
class StripSegment:
    """One stretch of the strip; x and width are whole seconds from the strip's start (the
    SVG's viewBox is the window in seconds)."""

    x: int
    width: int
    kind: SegmentKind
    # The holder's colour on the strip (held segments only): its order of first appearance.
    colour: int | None
    identity: str
    token: str
    start_text: str
    end_text: str
    duration: str

    @property
    def who(self) -> str:
        """Whose stretch it was, for its tooltip: the holder (and token), or what it was."""
        if self.kind != SegmentKind.HELD:
            return str(self.kind.label)
        return f"{self.identity} ({self.token})" if self.token else self.identity


@dataclass(frozen=True, slots=True)
class StripHolder:
    colour: int
    identity: str


@dataclass(slots=True)
class LeaseStrip:
    segments: list[StripSegment]
    seconds: int
    window: str
    window_label: str
    start_label: str
    holders: list[StripHolder]  # the legend: at most STRIP_LEGEND_LIMIT
    more_holders: int


@dataclass(frozen=True, slots=True)
class AvailabilityRow:
    window: str
    window_label: str
    figures: Availability
    percent: str  # "" when nothing was observed
    observed: str
    longest_gap: str
    median_takeover: str  # "" when no takeover began in the window


@dataclass(slots=True)
class CandidateRow:
    namespace: str
    name: str
    binary_version: str
    emulation_version: str
    strategy: str
    renewed: When | None
    pinged: When | None
    alive: bool


@dataclass(slots=True)
class LeaseDetail:
    lease: Lease
    cluster: ClusterStatus
    state: str
    class_label: str
    acquired: When | None
    renewed: When | None
    expires: When | None
    expires_text: str
    created: When | None
    observed: When | None
    deleted: When | None
    flaps: int
    flapping: bool
    timeline: list[HolderPeriod]
    older_changes: int
    missed_total: int
    candidates: list[CandidateRow]
    labels: list[tuple[str, str]]
    # metadata.annotations as stored: bounded (leases/leader_k8s.py), and how many were cut.
    annotations: list[tuple[str, str]]
    annotations_cut: int
    server_now: str
    list_url: str
    time_zone: str
    flap_window: str
    # A kube-node-lease heartbeat's Node page, when the Node watch has seen that node.
    node_url: str = ""
    # Who really leads (leases/leader_k8s.py).
    library_label: str = ""
    leader_k8s: bool = False
    token: str = ""
    fencing_reused: When | None = None
    # A leader-k8s slot lease's group page.
    group_url: str = ""
    # Leader-election and control-plane leases only: figures per window and the strip.
    availability: list[AvailabilityRow] | None = None
    strip: LeaseStrip | None = None
    # In the reader's language: the state's word, the duration, "0 s ago" for the refresh line.
    state_label: str = ""
    duration_text: str = ""
    updated_text: str = ""


def _change_time(transition: LeaseTransition) -> datetime:
    # The new holder's acquireTime is when the change happened; observed_at can be much
    # later (a relist after a reconnect). A future acquireTime (a skewed client) is ignored.
    if transition.acquire_time is not None and transition.acquire_time <= transition.observed_at:
        return transition.acquire_time
    return transition.observed_at


def _change_times(transitions: Sequence[LeaseTransition]) -> list[datetime]:
    """When each change happened, never before the change it follows: a stale holder
    writing back its old view brings an acquireTime from before its successor's."""
    times: list[datetime] = []
    for transition in transitions:
        moment = _change_time(transition)
        if times and moment < times[-1]:
            moment = max(transition.observed_at, times[-1])
        times.append(moment)
    return times


def holder_timeline(
    lease: Lease, transitions: Sequence[LeaseTransition], truncated: bool, now: datetime
) -> list[HolderPeriod]:
    """Each holder, from when to when, oldest first, from the observed transitions."""
    end_of_current = lease.deleted_at
    periods: list[HolderPeriod] = []

    def add(
        holder: str,
        start: datetime | None,
        end: datetime | None,
        missed: int,
        identity: str = "",
        fencing_reused: bool = False,
    ) -> None:
        current = end is None
        until = end or end_of_current or now
        periods.append(
            HolderPeriod(
                holder=holder,
                start=when(start, now),
                end=when(end, now),
                duration=(
                    format_duration((until - start).total_seconds()) if start is not None else ""
                ),
                current=current and end_of_current is None,
                missed_before=missed,
                identity=identity or holder,
                token=holder if is_token(holder) else "",
                fencing_reused=fencing_reused,
            )
        )

    if not transitions:
        add(lease.holder, lease.acquire_time, None, 0, lease.identity)
        return periods
    first = transitions[0]
    changed_at = _change_times(transitions)
    # Who held it before the first change seen; nothing to say when nobody did and the
    # history is complete (a lease created by its first holder).
    if first.from_holder or truncated:
        add(first.from_holder, None, changed_at[0], 0, first.from_identity)
    for index, transition in enumerate(transitions):
        following = index + 1 < len(transitions)
        add(
            transition.to_holder,
            changed_at[index],
            changed_at[index + 1] if following else None,
            transition.missed,
            transition.to_identity,
            transition.fencing_reused,
        )
    if transitions[-1].to_holder != lease.holder:
        # The watcher's latest write disagrees with the last transition row (it was written
        # by an older version, or the change was coalesced away): trust the lease.
        periods[-1].current = False
        add(lease.holder, lease.acquire_time, None, 0, lease.identity)
    return periods


def lease_detail(cluster: str, namespace: str, name: str, now: datetime) -> LeaseDetail | None:
    lease = (
        Lease.objects.select_related("cluster")
        .defer("cluster__kubeconfig")
        .filter(cluster__name=cluster, namespace=namespace, name=name)
        .first()
    )
    if lease is None:
        return None
    newest = list(lease.transitions.order_by("-observed_at", "-id")[: TIMELINE_LIMIT + 1])
    truncated = len(newest) > TIMELINE_LIMIT
    transitions = list(reversed(newest[:TIMELINE_LIMIT]))
    totals = lease.transitions.aggregate(changes=Count("id"), missed=Sum("missed"))
    state = lease.state_at(now)
    policy = flap_policy()
    flaps = flap_counts([lease.pk], now, policy).get(lease.pk, 0)
    availability, strip = _leadership(lease, now)
    return LeaseDetail(
        lease=lease,
        cluster=cluster_status(lease.cluster, now),
        state=state.value,
        class_label=CLASS_LABELS.get(lease.lease_class, lease.lease_class),
        acquired=when(lease.acquire_time, now),
        renewed=when(lease.renew_time, now),
        expires=when(lease.expires_at, now),
        expires_text=expiry_text(state, lease.expires_at, now),
        created=when(lease.created_at, now),
        observed=when(lease.observed_at, now),
        deleted=when(lease.deleted_at, now),
        flaps=flaps,
        flapping=policy.is_flapping(flaps),
        timeline=holder_timeline(lease, transitions, truncated, now),
        older_changes=totals["changes"] - len(transitions),
        missed_total=totals["missed"] or 0,
        candidates=lease_candidates(lease, now),
        labels=sorted((str(key), str(value)) for key, value in (lease.labels or {}).items()),
        annotations=sorted(
            (str(key), str(value)) for key, value in (lease.annotations or {}).items()
        ),
        annotations_cut=lease.annotations_cut,
        server_now=iso_js(now),
        list_url=f"{leases_prefix()}?{urlencode({'cluster': cluster, 'namespace': namespace})}",
        time_zone=timezone.get_current_timezone_name(),
        flap_window=format_duration(policy.window.total_seconds()),
        node_url=_node_url(lease),
        library_label=LeaseLibrary(lease.library).label,
        leader_k8s=lease.library == LeaseLibrary.LEADER_K8S,
        token=lease.token,
        fencing_reused=when(lease.fencing_reused_at, now),
        group_url=_group_url(lease),
        availability=availability,
        strip=strip,
        state_label=str(state.label),
        duration_text=(
            ""
            if lease.lease_duration_seconds is None
            # Exact: leaseDurationSeconds is a setting, not an age to round.
            else gettext("%(seconds)s s") % {"seconds": lease.lease_duration_seconds}
        ),
        updated_text=relative_text(0),
    )


def _group_url(lease: Lease) -> str:
    if not lease.group_name:
        return ""
    return reverse("leases:group", args=[lease.cluster.name, lease.namespace, lease.group_name])


def _leadership(
    lease: Lease, now: datetime
) -> tuple[list[AvailabilityRow] | None, LeaseStrip | None]:
    """The availability figures and strip, for the leases where one holder at a time is
    the point; heartbeats and API server identities get neither."""
    if lease.lease_class not in ELECTION_CLASSES:
        return None, None
    figures = lease_availability(lease, now)
    return (
        [_availability_row(figures[window]) for window in WINDOWS],
        lease_strip(lease_timeline(lease, now, WINDOWS[STRIP_WINDOW]), now),
    )


def _availability_row(figures: Availability) -> AvailabilityRow:
    ratio = figures.ratio
    median = figures.median_takeover_seconds
    return AvailabilityRow(
        window=figures.window,
        window_label=str(WINDOW_LABELS.get(figures.window, figures.window)),
        figures=figures,
        # Two decimals: 99.95 % and 99.5 % are different days for an on-call engineer.
        percent="" if ratio is None else ("100 %" if ratio == 1 else f"{ratio * 100:.2f} %"),
        observed=format_duration(figures.observed_seconds),
        longest_gap=format_duration(figures.longest_gap_seconds),
        median_takeover="" if median is None else format_duration(median),
    )


def lease_strip(segments: Sequence[Segment], now: datetime) -> LeaseStrip:
    """The timeline as SVG-ready stretches; each holder keeps one colour across the strip."""
    window = WINDOWS[STRIP_WINDOW]
    start = now - window
    seconds = int(window.total_seconds())
    narrowest = max(1, round(seconds * STRIP_MIN_SHARE))
    if len(segments) > STRIP_MAX_SEGMENTS:
        segments = coarsened(segments, start, window / STRIP_MAX_SEGMENTS)
    colours: dict[str, int] = {}
    holders: list[StripHolder] = []
    drawn: list[StripSegment] = []
    for segment in segments:
        colour: int | None = None
        token = segment.holder if is_token(segment.holder) else ""
        identity = segment.identity or segment.holder
        if segment.kind == SegmentKind.HELD:
            # By identity: leader-k8s writes a new token at every acquisition, yet the same
            # node leading again should look the same.
            if identity not in colours:
                colours[identity] = len(colours) % STRIP_COLOURS
                holders.append(StripHolder(colours[identity], identity))
            colour = colours[identity]
        x = round((segment.start - start).total_seconds())
        width = max(1, round(segment.seconds))
        if segment.kind != SegmentKind.HELD and width < narrowest:
            width = narrowest
            x = max(0, min(x, seconds - width))
        drawn.append(
            StripSegment(
                x=x,
                width=width,
                kind=segment.kind,
                colour=colour,
                identity=identity,
                token=token,
                start_text=local_moment_text(segment.start),
                end_text=local_moment_text(segment.end),
                duration=format_duration(segment.seconds),
            )
        )
    # Held stretches first, so a widened gap is drawn over its neighbours, not under them.
    drawn.sort(key=lambda segment: segment.kind != SegmentKind.HELD)
    return LeaseStrip(
        segments=drawn,
        seconds=seconds,
        window=STRIP_WINDOW,
        window_label=str(WINDOW_LABELS[STRIP_WINDOW]),
        start_label=local_moment_text(start),
        holders=holders[:STRIP_LEGEND_LIMIT],
        more_holders=max(0, len(holders) - STRIP_LEGEND_LIMIT),
    )


def coarsened(segments: Sequence[Segment], start: datetime, slot: timedelta) -> list[Segment]:
    """The timeline in equal slots: a slot with any leaderless time is a gap (a gap must
    never disappear), else the holder that held longest in it, else unobserved; neighbours
    that read the same are joined."""
    slots: list[Segment] = []
    index = 0
    count = len(segments)
    slot_start = start
    while index < count:
        slot_end = slot_start + slot
        held: dict[tuple[str, str], float] = {}
        has_gap = False
        while index < count and segments[index].end <= slot_end:
            has_gap, held = _tally(segments[index], slot_start, slot_end, has_gap, held)
            index += 1
        if index < count and segments[index].start < slot_end:  # runs on into the next slot
            has_gap, held = _tally(segments[index], slot_start, slot_end, has_gap, held)
        if has_gap:
            kind, holder, identity = SegmentKind.GAP, "", ""
        elif held:
            kind = SegmentKind.HELD
            holder, identity = max(held.items(), key=lambda item: item[1])[0]
        else:
            kind, holder, identity = SegmentKind.UNOBSERVED, "", ""
        previous = slots[-1] if slots else None
        if previous and (previous.kind, previous.holder, previous.identity) == (
            kind,
            holder,
            identity,
        ):
            slots[-1] = Segment(kind, previous.start, slot_end, holder, identity)
        else:
            slots.append(Segment(kind, slot_start, slot_end, holder, identity))
        slot_start = slot_end
    return slots


def _tally(
    segment: Segment,
    slot_start: datetime,
    slot_end: datetime,
    has_gap: bool,
    held: dict[tuple[str, str], float],
) -> tuple[bool, dict[tuple[str, str], float]]:
    overlap = (min(segment.end, slot_end) - max(segment.start, slot_start)).total_seconds()
    if overlap <= 0:
        return has_gap, held
    if segment.kind == SegmentKind.GAP:
        return True, held
    if segment.kind == SegmentKind.HELD:
        key = (segment.holder, segment.identity)
        held[key] = held.get(key, 0.0) + overlap
    return has_gap, held


def _node_url(lease: Lease) -> str:
    if lease.namespace != "kube-node-lease":
        return ""
    if not Node.objects.filter(cluster_id=lease.cluster_id, name=lease.name).exists():
        return ""
    cluster = path_segment(lease.cluster.name)
    return f"{leases_prefix()}clusters/{cluster}/nodes/{path_segment(lease.name)}/"


def lease_candidates(lease: Lease, now: datetime) -> list[CandidateRow]:
    candidates = LeaseCandidate.objects.filter(
        cluster_id=lease.cluster_id,
        namespace=lease.namespace,
        lease_name=lease.name,
        deleted_at__isnull=True,
    )
    candidates = sorted(candidates, key=lambda candidate: natural_key(candidate.name))
    return [
        CandidateRow(
            namespace=candidate.namespace,
            name=candidate.name,
            binary_version=candidate.binary_version,
            emulation_version=candidate.emulation_version,
            strategy=candidate.strategy,
            renewed=when(candidate.renew_time, now),
            pinged=when(candidate.ping_time, now),
            alive=candidate.renew_time is not None
            and now - candidate.renew_time <= CANDIDATE_ALIVE_WITHIN,
        )
        for candidate in candidates
    ]
