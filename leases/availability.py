"""Leadership availability: how much of the observed time a lease had a valid holder.

The ingestor records each holder's tenure as a LeaseHolderSpan and each stretch of a live
watch as a WatchCoverage row. Here, over a window ending now:

- observed time is the window within the cluster's coverage, and within the lease's life as
  an election: from its first holder's span (the moments between a Lease's creation and its
  first acquisition are no gap: client-go creates the Lease with its holder, stamping a
  whole-second creationTimestamp just before the microsecond acquireTime) until its deletion.
  A lease no holder was ever seen on has no election time to judge;
- valid time is the union of spans, an open span lasting until the lease's expiry;
- a gap is a leaderless stretch between valid spans (a deletion until recreation is one),
  or after the last span until now.

One rule for unobserved time, the same in every figure: a gap (and the takeover that ends
it) that overlaps time the watch did not see, anywhere along its whole length, is left out
of all of them. Its count, its length, its takeover time and even its watched part are
unknown: a holder may have come and gone while nobody watched. Its watched part is neither
available nor unavailable time (the strip shows it as not observed), so a ratio never
counts a gap that the gap count leaves out.

The arithmetic is pure (`_Interval` lists, merged and sorted); the queries are a fixed
handful however many leases are asked about, so the API list and /metrics stay flat.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from statistics import median

from django.db import models
from django.db.models import OuterRef, Q, Subquery
from django.utils.translation import gettext_lazy as _

from leases.models import KubeCluster, Lease, LeaseClass, LeaseHolderSpan, WatchCoverage

WINDOWS: dict[str, timedelta] = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
}
# The leases availability means something for: one holder at a time, taken over on loss.
# Node heartbeats and API server identities are held by their own node or server only.
ELECTION_CLASSES: tuple[str, ...] = (LeaseClass.LEADER_ELECTION, LeaseClass.CONTROL_PLANE)
# How far back recent_gaps looks.
RECENT_GAPS_WINDOW = "7d"

_Interval = tuple[datetime, datetime]


@dataclass(frozen=True, slots=True)
class Availability:
    window: str
    observed_seconds: float
    available_seconds: float
    ratio: float | None  # None: nothing of the window was observed
    gaps: int
    longest_gap_seconds: float
    median_takeover_seconds: float | None  # None: no takeover began in the window


class SegmentKind(models.TextChoices):
    HELD = "held", _("held")
    GAP = "gap", _("leaderless")
    UNOBSERVED = "unobserved", _("not observed")


@dataclass(frozen=True, slots=True)
class Segment:
    """A stretch of a lease's timeline; holder and identity are set on HELD segments."""

    kind: SegmentKind
    start: datetime
    end: datetime
    holder: str = ""
    identity: str = ""

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True, slots=True)
class Gap:
    """A leaderless stretch of one lease; `seconds` is its observed part."""

    lease: Lease
    started_at: datetime
    ended_at: datetime | None  # None: still leaderless
    seconds: float


@dataclass(frozen=True, slots=True)
class _Span:
    holder: str
    identity: str
    start: datetime
    end: datetime  # the end of its validity: ended_at, or the expiry of an open span


@dataclass(slots=True)
class _History:
    """What the queries found about one lease, ready for the arithmetic."""

    lease: Lease
    spans: list[_Span]  # by start; the last span before the fetched range comes first
    coverage: list[_Interval]  # the cluster's, merged
    # The start of its first holder's span: its life as an election. None: no holder seen.
    first_held: datetime | None
    exists_until: datetime
    # Its gaps that overlap unobserved time, whole: no figure counts them (_unseen_gaps).
    unseen: list[_Interval] = field(default_factory=list)


# Interval arithmetic on sorted, merged lists of half-open intervals.


def _merge(intervals: Iterable[_Interval]) -> list[_Interval]:
    merged: list[_Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _clip(intervals: Sequence[_Interval], low: datetime, high: datetime) -> list[_Interval]:
    return [
        (max(start, low), min(end, high))
        for start, end in intervals
        if end > low and start < high and max(start, low) < min(end, high)
    ]


def _intersect(a: Sequence[_Interval], b: Sequence[_Interval]) -> list[_Interval]:
    result: list[_Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if start < end:
            result.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return result


def _complement(intervals: Sequence[_Interval], low: datetime, high: datetime) -> list[_Interval]:
    result: list[_Interval] = []
    cursor = low
    for start, end in intervals:
        if start > cursor:
            result.append((cursor, min(start, high)))
        cursor = max(cursor, end)
    if cursor < high:
        result.append((cursor, high))
    return [(start, end) for start, end in result if start < end]


def _total(intervals: Iterable[_Interval]) -> float:
    return sum((end - start).total_seconds() for start, end in intervals)


def _within(interval: _Interval, coverage: Sequence[_Interval]) -> bool:
    """Whether the whole of `interval` (an instant too) lies inside one merged stretch."""
    start, end = interval
    return any(low <= start and end <= high for low, high in coverage)


def _unseen_gaps(
    valid: Sequence[_Interval], coverage: Sequence[_Interval], low: datetime, high: datetime
) -> list[_Interval]:
    """The leaderless stretches of [low, high] (a life) that are not wholly watched."""
    return [gap for gap in _complement(valid, low, high) if not _within(gap, coverage)]


def _observed(
    coverage: Sequence[_Interval], unseen: Sequence[_Interval], low: datetime, high: datetime
) -> list[_Interval]:
    """The watched part of [low, high], less the gaps that overlap unobserved time."""
    return _intersect(_clip(coverage, low, high), _complement(unseen, low, high))


# The arithmetic of one lease (or one group of slots) over one window.


def _bounds(history: _History, start: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The window within the lease's life as an election; empty (low == high) without one."""
    high = min(now, history.exists_until)
    if history.first_held is None:
        return high, high
    return min(max(start, history.first_held), high), high


def _valid(spans: Iterable[_Span]) -> list[_Interval]:
    return _merge((span.start, span.end) for span in spans)


def _takeovers(
    spans: Sequence[_Span], coverage: Sequence[_Interval], start: datetime, now: datetime
) -> list[float]:
    """For each span begun in the window by another holder than the one before it, how long
    after that one's validity ended (0 when it took over before then). A takeover whose wait
    (or, without a wait, its moment) was not wholly watched is left out, as its gap is."""
    waits: list[float] = []
    for previous, span in pairwise(spans):
        if start <= span.start <= now and span.holder != previous.holder:
            waited = (min(previous.end, span.start), span.start)
            if _within(waited, coverage):
                waits.append((waited[1] - waited[0]).total_seconds())
    return waits


def _figures(
    window: str,
    valid: list[_Interval],
    observed: list[_Interval],
    low: datetime,
    high: datetime,
    takeovers: list[float],
) -> Availability:
    """The figures of [low, high]; `observed` is already cut to it (_observed)."""
    held = _clip(valid, low, high)
    gap_lengths = [_total(_intersect([gap], observed)) for gap in _complement(held, low, high)]
    gap_lengths = [length for length in gap_lengths if length > 0]
    observed_seconds = _total(observed)
    available_seconds = _total(_intersect(held, observed))
    return Availability(
        window=window,
        observed_seconds=observed_seconds,
        available_seconds=available_seconds,
        ratio=available_seconds / observed_seconds if observed_seconds > 0 else None,
        gaps=len(gap_lengths),
        longest_gap_seconds=max(gap_lengths, default=0.0),
        median_takeover_seconds=median(takeovers) if takeovers else None,
    )


def _availability(history: _History, window: str, now: datetime) -> Availability:
    start = now - WINDOWS[window]
    low, high = _bounds(history, start, now)
    return _figures(
        window,
        _valid(history.spans),
        _observed(history.coverage, history.unseen, low, high),
        low,
        high,
        _takeovers(history.spans, history.coverage, start, now) if history.first_held else [],
    )


# The queries: a fixed number for any number of leases.


def _coverage_by_cluster(
    cluster_ids: set[int], start: datetime, now: datetime
) -> dict[int, list[_Interval]]:
    """Each cluster's live-watch stretches since `start`, merged. The newest stretch of a
    cluster whose watcher is live reaches now: it is only moved on each status flush.
    `start` reaches back to the oldest gap asked about: whether a gap was watched is judged
    on the whole gap, not on its part inside the window."""
    clusters = KubeCluster.objects.filter(pk__in=cluster_ids).defer("kubeconfig")
    live = {cluster.pk for cluster in clusters if cluster.enabled and not cluster.is_stale(now)}
    rows = (
        WatchCoverage.objects.filter(cluster_id__in=cluster_ids, last_seen_at__gte=start)
        .order_by("cluster_id", "started_at", "id")
        .values_list("cluster_id", "started_at", "last_seen_at")
    )
    stretches: dict[int, list[list[datetime]]] = defaultdict(list)
    for cluster_id, started_at, last_seen_at in rows:
        stretches[cluster_id].append([started_at, last_seen_at])
    for cluster_id in live:
        if stretches[cluster_id]:
            newest = max(stretches[cluster_id], key=lambda stretch: stretch[0])
            newest[1] = max(newest[1], now)
    return {
        cluster_id: _merge((started, min(seen, now)) for started, seen in items)
        for cluster_id, items in stretches.items()
    }


def _histories(leases: Sequence[Lease], start: datetime, now: datetime) -> dict[int, _History]:
    """Each lease's spans that reach into [start, now], the one span before them (for the
    first takeover's wait), its cluster's coverage and its life."""
    ids = [lease.pk for lease in leases]
    if not ids:
        return {}
    fields = ("lease_id", "holder", "identity", "started_at", "ended_at")
    in_range = (
        LeaseHolderSpan.objects.filter(lease_id__in=ids, started_at__lte=now)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .order_by("lease_id", "started_at", "id")
        .values_list(*fields)
    )
    # The latest span over before the window: one correlated lookup on the (lease,
    # started_at) index per lease, never the lease's whole history.
    before = LeaseHolderSpan.objects.filter(
        pk__in=Lease.objects.filter(pk__in=ids)
        .annotate(
            previous=Subquery(
                LeaseHolderSpan.objects.filter(lease_id=OuterRef("pk"), ended_at__lte=start)
                .order_by("-started_at", "-id")
                .values("pk")[:1]
            )
        )
        .values("previous")
    ).values_list(*fields)
    raw: dict[int, list[tuple[str, str, datetime, datetime | None]]] = defaultdict(list)
    for lease_id, holder, identity, started_at, ended_at in before:
        raw[lease_id].append((holder, identity, started_at, ended_at))
    for lease_id, holder, identity, started_at, ended_at in in_range:
        raw[lease_id].append((holder, identity, started_at, ended_at))
    spans = {lease.pk: _spans(lease, raw.get(lease.pk, []), now) for lease in leases}
    # A gap that reaches into the window begins at a span's end (none before the first
    # span: _bounds): the coverage read goes back to the earliest one.
    since = min([start, *(span.end for items in spans.values() for span in items)])
    coverage = _coverage_by_cluster({lease.cluster_id for lease in leases}, since, now)
    histories: dict[int, _History] = {}
    for lease in leases:
        items = spans[lease.pk]
        cluster_coverage = coverage.get(lease.cluster_id, [])
        first_held = min((span.start for span in items), default=None)
        exists_until = min(lease.deleted_at, now) if lease.deleted_at else now
        histories[lease.pk] = _History(
            lease=lease,
            spans=items,
            coverage=cluster_coverage,
            first_held=first_held,
            exists_until=exists_until,
            unseen=(
                _unseen_gaps(_valid(items), cluster_coverage, first_held, exists_until)
                if first_held is not None
                else []
            ),
        )
    return histories


def _spans(
    lease: Lease, rows: Sequence[tuple[str, str, datetime, datetime | None]], now: datetime
) -> list[_Span]:
    """Spans with the end of their validity. An open span lasts until the lease expires (a
    lease without a duration never does), is deleted, or the next span begins (the
    ingestor's row for a takeover may trail the lease's own)."""
    spans: list[_Span] = []
    for index, (holder, identity, started_at, ended_at) in enumerate(rows):
        if ended_at is None:
            ends = [now]
            if lease.expires_at is not None:
                ends.append(lease.expires_at)
            if lease.deleted_at is not None:
                ends.append(lease.deleted_at)
            if index + 1 < len(rows):
                ends.append(rows[index + 1][2])
            ended_at = min(ends)
        spans.append(_Span(holder, identity, started_at, max(started_at, min(ended_at, now))))
    return spans


# The public reads.


def lease_availability(lease: Lease, now: datetime) -> dict[str, Availability]:
    """The lease's figures over each of WINDOWS."""
    longest = max(WINDOWS.values())
    history = _histories([lease], now - longest, now)[lease.pk]
    return {window: _availability(history, window, now) for window in WINDOWS}


def availability_by_window(
    leases: Sequence[Lease], now: datetime
) -> dict[int, dict[str, Availability]]:
    """Each lease's figures over each of WINDOWS, by lease id: `lease_availability` for many
    leases, one read of the longest window's history for all the windows."""
    histories = _histories(leases, now - max(WINDOWS.values()), now)
    return {
        lease_id: {window: _availability(history, window, now) for window in WINDOWS}
        for lease_id, history in histories.items()
    }


def availability_for_leases(
    leases: Sequence[Lease], now: datetime, window: str = "24h"
) -> dict[int, Availability]:
    """Each lease's figures over one window, by lease id, in a fixed number of queries."""
    histories = _histories(leases, now - WINDOWS[window], now)
    return {
        lease_id: _availability(history, window, now) for lease_id, history in histories.items()
    }


def group_availability(leases: Sequence[Lease], now: datetime) -> dict[str, Availability]:
    """A slot group's figures over each of WINDOWS: a moment is available while at least one
    slot is validly held. A takeover is the end of a stretch with no slot held; its wait is
    that stretch's length. The group's life is its slots' lives as elections, and a stretch
    with no slot held that overlaps unobserved time is left out of every figure."""
    histories = [
        history
        for history in _histories(leases, now - max(WINDOWS.values()), now).values()
        if history.first_held is not None  # a slot never held adds no election time
    ]
    # Slots of one group share a cluster; the union keeps this right for any leases given.
    coverages = {history.lease.cluster_id: history.coverage for history in histories}
    valid = _merge(interval for history in histories for interval in _valid(history.spans))
    coverage = _merge(interval for intervals in coverages.values() for interval in intervals)
    born = [history.first_held for history in histories if history.first_held is not None]
    until = max((history.exists_until for history in histories), default=now)
    unseen = _unseen_gaps(valid, coverage, min(born), until) if born else []
    result: dict[str, Availability] = {}
    for window, length in WINDOWS.items():
        start = now - length
        bounds = [_bounds(history, start, now) for history in histories]
        low = min((low for low, _ in bounds), default=now)
        high = max((high for _, high in bounds), default=now)
        waits = [
            (following[0] - previous[1]).total_seconds()
            for previous, following in pairwise(valid)
            if start <= following[0] <= now and _within((previous[1], following[0]), coverage)
        ]
        observed = _observed(coverage, unseen, low, high)
        result[window] = _figures(window, valid, observed, low, high, waits)
    return result


def recent_gaps(now: datetime, limit: int = 10, leases: Sequence[Lease] | None = None) -> list[Gap]:
    """The most recent leaderless gaps of election leases (RECENT_GAPS_WINDOW), newest first:
    ongoing ones first, then by when they ended. Gaps not wholly watched are left out.

    `leases`: only these (the overview passes a bounded set of candidates); every election
    lease when not given."""
    start = now - WINDOWS[RECENT_GAPS_WINDOW]
    if leases is None:
        leases = list(
            Lease.objects.filter(lease_class__in=ELECTION_CLASSES)
            .filter(Q(deleted_at__isnull=True) | Q(deleted_at__gt=start))
            .select_related("cluster")
            .defer("cluster__kubeconfig", "annotations")
        )
    gaps: list[Gap] = []
    for history in _histories(leases, start, now).values():
        low, high = _bounds(history, start, now)
        if low >= high:
            continue
        observed = _observed(history.coverage, history.unseen, low, high)
        held = _clip(_valid(history.spans), low, high)
        for gap_start, gap_end in _complement(held, low, high):
            seconds = _total(_intersect([(gap_start, gap_end)], observed))
            if seconds <= 0:
                continue
            ongoing = gap_end >= now and history.lease.deleted_at is None
            gaps.append(Gap(history.lease, gap_start, None if ongoing else gap_end, seconds))
    gaps.sort(key=lambda gap: (gap.ended_at or now, gap.started_at), reverse=True)
    return gaps[:limit]


def lease_timeline(lease: Lease, now: datetime, window: timedelta) -> list[Segment]:
    """[now - window, now] cut into held (by whom), leaderless and unobserved stretches,
    oldest first. Time outside the watch's coverage, outside the lease's life as an election,
    or inside a gap that overlaps unobserved time is unobserved whatever the spans say: the
    strip shows what the figures count."""
    start = now - window
    history = _histories([lease], start, now)[lease.pk]
    low, high = _bounds(history, start, now)
    observed = _observed(history.coverage, history.unseen, low, high) if low < high else []
    pieces: list[Segment] = [
        Segment(SegmentKind.UNOBSERVED, gap_start, gap_end)
        for gap_start, gap_end in _complement(observed, start, now)
    ]
    for obs_start, obs_end in observed:
        cursor = obs_start
        for span in history.spans:
            span_start, span_end = max(span.start, cursor), min(span.end, obs_end)
            if span_start >= span_end:
                continue
            if span_start > cursor:
                pieces.append(Segment(SegmentKind.GAP, cursor, span_start))
            pieces.append(
                Segment(SegmentKind.HELD, span_start, span_end, span.holder, span.identity)
            )
            cursor = span_end
        if cursor < obs_end:
            pieces.append(Segment(SegmentKind.GAP, cursor, obs_end))
    pieces.sort(key=lambda segment: segment.start)
    return _joined(pieces)


def _joined(pieces: Sequence[Segment]) -> list[Segment]:
    """Neighbours of the same kind and holder as one segment (a coverage stretch restarted
    mid-span is not a change anyone needs to see)."""
    joined: list[Segment] = []
    for piece in pieces:
        last = joined[-1] if joined else None
        if (
            last is not None
            and last.end == piece.start
            and (last.kind, last.holder) == (piece.kind, piece.holder)
        ):
            joined[-1] = Segment(last.kind, last.start, piece.end, last.holder, last.identity)
        else:
            joined.append(piece)
    return joined
