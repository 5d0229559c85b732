"""How every page, API and e-mail writes a moment or a length of time.

One home so that a lease, an NKS cluster and an incident show time the same way; the
browser's ticking ages (static/js/dashboard.js) follow `format_duration` too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone


def format_duration(seconds: float) -> str:
    """A coarse, glanceable length of time; static/js/dashboard.js formats the same way."""
    whole = int(abs(seconds))
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    if whole < 172_800:
        return f"{whole // 3600} h"
    return f"{whole // 86_400} d"


def iso_utc(moment: datetime) -> str:
    """Exact UTC time, microseconds included when the API server sent them (MicroTime)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def iso_js(moment: datetime) -> str:
    # Milliseconds: every browser's Date.parse accepts them, not all accept microseconds.
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def api_time(moment: datetime | None) -> str | None:
    """A JSON API's timestamp: exact UTC, or null for a moment that has not happened."""
    return iso_utc(moment) if moment is not None else None


def _local_text(moment: datetime) -> str:
    # Only worth a second line when TIME_ZONE differs from the UTC shown beside it.
    if settings.TIME_ZONE == "UTC":
        return ""
    local = timezone.localtime(moment)
    fraction = f".{local.microsecond:06d}" if local.microsecond else ""
    return f"{local:%Y-%m-%d %H:%M:%S}{fraction} {local.tzname()}"


@dataclass(frozen=True, slots=True)
class When:
    """One moment, shown exactly (UTC and TIME_ZONE) and relative to the request's clock."""

    iso: str
    js: str
    local: str
    relative: str
    seconds_ago: float


def relative_text(seconds_ago: float) -> str:
    # A time slightly in the future is a writer's clock running ahead of ours.
    if seconds_ago >= 0:
        return f"{format_duration(seconds_ago)} ago"
    return f"in {format_duration(seconds_ago)}"


def when(moment: datetime | None, now: datetime) -> When | None:
    if moment is None:
        return None
    delta = (now - moment).total_seconds()
    return When(
        iso=iso_utc(moment),
        js=iso_js(moment),
        local=_local_text(moment),
        relative=relative_text(delta),
        seconds_ago=delta,
    )


def expiry_text(expires_at: datetime | None, now: datetime) -> str:
    """A countdown to `expires_at`, or how long ago it passed; a dash when nothing expires."""
    if expires_at is None:
        return "—"
    left = (expires_at - now).total_seconds()
    return f"in {format_duration(left)}" if left > 0 else f"expired for {format_duration(left)}"


def local_moment_text(moment: datetime | None) -> str:
    """To the second, in TIME_ZONE with its name: what a person reads in a table."""
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def mail_moment_text(moment: datetime | None) -> str:
    """UTC, plus the local time when TIME_ZONE is not UTC.

    For e-mail: it is read later, forwarded, and quoted in tickets by people in other time
    zones, so UTC comes first and a missing moment says so in words.
    """
    if moment is None:
        return "never"
    text = f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    if settings.TIME_ZONE != "UTC":
        local = timezone.localtime(moment)
        text += f" ({local:%Y-%m-%d %H:%M:%S} {local.tzname()})"
    return text
