"""dashboard.timefmt: the one way pages, APIs and mail write a moment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dashboard.timefmt import (
    api_time,
    expiry_text,
    format_duration,
    local_moment_text,
    mail_moment_text,
    when,
)

MOMENT = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)


def test_tables_read_local_time_and_mail_reads_utc_first(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TIME_ZONE = "Asia/Seoul"

    assert local_moment_text(MOMENT) == "2026-11-29 17:00:00 KST"
    assert mail_moment_text(MOMENT) == "2026-11-29 08:00:00 UTC (2026-11-29 17:00:00 KST)"
    assert (local_moment_text(None), mail_moment_text(None)) == ("", "never")


def test_mail_in_utc_names_no_second_zone(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TIME_ZONE = "UTC"

    assert mail_moment_text(MOMENT) == "2026-11-29 08:00:00 UTC"


def test_api_times_are_exact_utc_or_null() -> None:
    assert api_time(MOMENT + timedelta(microseconds=123456)) == "2026-11-29T08:00:00.123456Z"
    assert api_time(None) is None


def test_expiry_counts_down_then_up_and_nothing_expires_without_a_time() -> None:
    assert expiry_text(MOMENT + timedelta(seconds=12), MOMENT) == "in 12 s"
    assert expiry_text(MOMENT - timedelta(minutes=5), MOMENT) == "expired for 5 min"
    assert expiry_text(None, MOMENT) == "—"


def test_a_moment_ahead_of_our_clock_reads_as_future() -> None:
    ahead = when(MOMENT + timedelta(seconds=3), MOMENT)

    assert ahead is not None and ahead.relative == "in 3 s"
    assert format_duration(172_800) == "2 d"
