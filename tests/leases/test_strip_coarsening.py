"""The availability strip of a lease that flapped all day stays small, and keeps its gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from leases.availability import Segment, SegmentKind
from leases.presenters.lease_detail import STRIP_MAX_SEGMENTS, coarsened, lease_strip

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
START = NOW - timedelta(hours=24)


def flapping_day() -> list[Segment]:
    """Two holders taking turns every 10 s for a day, one 5 s gap at 18:00."""
    segments = []
    moment = START
    turn = 0
    gap_at = NOW - timedelta(hours=18)
    while moment < NOW:
        end = min(moment + timedelta(seconds=10), NOW)
        if moment <= gap_at < end:
            segments.append(Segment(SegmentKind.GAP, moment, moment + timedelta(seconds=5)))
            moment += timedelta(seconds=5)
            continue
        holder = "pod-a" if turn % 2 else "pod-b"
        segments.append(Segment(SegmentKind.HELD, moment, end, f"b4k-{turn}", holder))
        turn += 1
        moment = end
    return segments


def test_a_day_of_flapping_is_drawn_in_at_most_the_slot_count_and_its_gap_survives() -> None:
    segments = flapping_day()
    assert len(segments) > 8_000
    strip = lease_strip(segments, NOW)
    assert len(strip.segments) <= STRIP_MAX_SEGMENTS
    gaps = [segment for segment in strip.segments if segment.kind == SegmentKind.GAP]
    assert len(gaps) == 1
    # The strip still covers the whole day, without overlaps between neighbours.
    held = sorted((segment.x, segment.width) for segment in strip.segments if segment.kind != "gap")
    assert held[0][0] == 0 and sum(width for _, width in held) + gaps[0].width >= 86_000


def test_coarsened_slots_join_neighbours_that_read_the_same() -> None:
    slot = timedelta(hours=1)
    segments = [
        Segment(SegmentKind.UNOBSERVED, START, START + timedelta(hours=2)),
        Segment(SegmentKind.HELD, START + timedelta(hours=2), NOW, "b4k-x", "pod-a"),
    ]
    assert coarsened(segments, START, slot) == [
        Segment(SegmentKind.UNOBSERVED, START, START + timedelta(hours=2)),
        Segment(SegmentKind.HELD, START + timedelta(hours=2), NOW, "b4k-x", "pod-a"),
    ]


def test_a_short_strip_is_drawn_as_it_is() -> None:
    segments = [
        Segment(SegmentKind.HELD, START, NOW - timedelta(hours=1), "b4k-x", "pod-a"),
        Segment(SegmentKind.GAP, NOW - timedelta(hours=1), NOW),
    ]
    strip = lease_strip(segments, NOW)
    assert [segment.kind for segment in strip.segments] == ["held", "gap"]
