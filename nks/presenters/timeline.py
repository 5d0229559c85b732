"""The 24 h health strip and the periods that were not healthy, for a cluster or a nodegroup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext

from dashboard.timefmt import When, format_duration, local_moment_text, when
from nks.models import HEALTH_RANK, Health, stale_after
from nks.queries import cluster_health_points

TIMELINE_HOURS = 24
TIMELINE_BUCKETS = 144  # 10 minutes each
PERIODS_SHOWN = 20


@dataclass(frozen=True, slots=True)
class StripSegment:
    x: int
    width: int
    health: Health | None  # None: no sample in these buckets
    title: str


@dataclass(frozen=True, slots=True)
class Period:
    health: Health | None  # None: a silence longer than three polls
    label: str
    start: When
    end: When | None
    duration: str
    start_text: str
    end_text: str


@dataclass(slots=True)
class Timeline:
    segments: list[StripSegment]
    buckets: int
    periods: list[Period]
    current: Period | None
    start_label: str
    samples: int


def _local(moment: datetime) -> str:
    return f"{timezone.localtime(moment):%H:%M}"


def _label(health: Health | None) -> str:
    return str(health.label) if health is not None else gettext("no data")


def _segments(points: Sequence[tuple[datetime, Health]], start: datetime) -> list[StripSegment]:
    """Worst verdict per bucket, equal neighbours merged; buckets without samples are gaps."""
    bucket_seconds = (TIMELINE_HOURS * 3600) / TIMELINE_BUCKETS
    worst: list[Health | None] = [None] * TIMELINE_BUCKETS
    for taken_at, health in points:
        if taken_at < start:
            continue
        index = min(TIMELINE_BUCKETS - 1, int((taken_at - start).total_seconds() / bucket_seconds))
        current = worst[index]
        if current is None or HEALTH_RANK[health] < HEALTH_RANK[current]:
            worst[index] = health
    segments: list[StripSegment] = []
    index = 0
    while index < TIMELINE_BUCKETS:
        health = worst[index]
        end = index
        while end + 1 < TIMELINE_BUCKETS and worst[end + 1] == health:
            end += 1
        begin_at = start + timedelta(seconds=index * bucket_seconds)
        end_at = start + timedelta(seconds=(end + 1) * bucket_seconds)
        segments.append(
            StripSegment(
                x=index,
                width=end - index + 1,
                health=health,
                title=f"{_local(begin_at)}-{_local(end_at)}: {_label(health)}",
            )
        )
        index = end + 1
    return segments


def _runs(points: Sequence[tuple[datetime, Health]], now: datetime) -> list[list[Any]]:
    """Runs of equal verdicts between consecutive samples: [health or None, start, end].

    A silence longer than three polls is a run of its own ("no data"), never folded into the
    ones around it. The last run's end is None while it lasts.
    """
    gap = stale_after()
    runs: list[list[Any]] = []
    previous_at: datetime | None = None
    for taken_at, health in points:
        if previous_at is not None and taken_at - previous_at > gap:
            runs[-1][2] = previous_at
            runs.append([None, previous_at, taken_at])
        if not runs or runs[-1][2] is not None or runs[-1][0] != health:
            if runs and runs[-1][2] is None:
                runs[-1][2] = taken_at
            runs.append([health, taken_at, None])
        previous_at = taken_at
    if previous_at is not None and now - previous_at > gap:
        runs[-1][2] = previous_at
        runs.append([None, previous_at, None])
    return runs


def _period(health: Health | None, begin: datetime, end: datetime | None, now: datetime) -> Period:
    begin_when = when(begin, now)
    assert begin_when is not None
    length = ((end or now) - begin).total_seconds()
    return Period(
        health=health,
        label=_label(health),
        start=begin_when,
        end=when(end, now),
        duration=format_duration(length)
        if end
        else gettext("%(duration)s so far") % {"duration": format_duration(length)},
        start_text=local_moment_text(begin),
        end_text=local_moment_text(end),
    )


def build_timeline(points: Sequence[tuple[datetime, Health]], now: datetime) -> Timeline:
    """The 24 h strip (worst verdict per 10-minute bucket, gaps shown as "no data") and the
    periods that were not healthy, newest first, with how long each lasted."""
    start = now - timedelta(hours=TIMELINE_HOURS)
    runs = _runs(points, now)
    periods = [
        _period(health, begin, end, now)
        for health, begin, end in reversed(runs)
        if health != Health.HEALTHY and (end is None or end >= start)
    ]
    return Timeline(
        segments=_segments(points, start),
        buckets=TIMELINE_BUCKETS,
        periods=periods[:PERIODS_SHOWN],
        current=_period(*runs[-1], now) if runs else None,
        start_label=_local(start),
        samples=len(points),
    )


def cluster_timeline(cluster_id: int, now: datetime) -> Timeline:
    points = cluster_health_points(cluster_id, now - timedelta(hours=TIMELINE_HOURS))
    return build_timeline(points, now)
