"""How every page, API and e-mail writes a moment or a length of time.

One home so that a lease, an NKS cluster and an incident show time the same way; the
browser's ticking ages (static/js/dashboard.js) follow `format_duration` too, with the
words of the active language (`js_time_words`). Moments are shown in the active time zone
(the reader's, dashboard.middleware.PreferenceMiddleware; TIME_ZONE otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils import timezone
from django.utils.translation import gettext, pgettext


# Unit abbreviations: the count always goes through %(count)s, so js_time_words can hand the
# browser the same patterns with a marker in its place.
def _seconds(count: int | str) -> str:
    return gettext("%(count)s s") % {"count": count}


def _minutes(count: int | str) -> str:
    return gettext("%(count)s min") % {"count": count}


def _hours(count: int | str) -> str:
    return gettext("%(count)s h") % {"count": count}


def _days(count: int | str) -> str:
    return gettext("%(count)s d") % {"count": count}


def _ago(duration: str) -> str:
    return gettext("%(duration)s ago") % {"duration": duration}


def _in(duration: str) -> str:
    # The same words for "a clock ahead of ours" and "expires in".
    return pgettext("time from now", "in %(duration)s") % {"duration": duration}


def _expired_for(duration: str) -> str:
    return gettext("expired for %(duration)s") % {"duration": duration}


def format_duration(seconds: float) -> str:
    """A coarse, glanceable length of time; static/js/dashboard.js formats the same way."""
    whole = int(abs(seconds))
    if whole < 120:
        return _seconds(whole)
    if whole < 7200:
        return _minutes(whole // 60)
    if whole < 172_800:
        return _hours(whole // 3600)
    return _days(whole // 86_400)


def js_time_words() -> dict[str, str]:
    """The active language's duration patterns for dashboard.js; `{n}` is the count and
    `{d}` a formatted duration. Rendered into <body data-time-words>."""
    return {
        "s": _seconds("{n}"),
        "min": _minutes("{n}"),
        "h": _hours("{n}"),
        "d": _days("{n}"),
        "ago": _ago("{d}"),
        "in": _in("{d}"),
        "expired_for": _expired_for("{d}"),
        "expired": pgettext("lease state", "expired"),
        "pause": gettext("Pause refresh"),
        "resume": gettext("Resume refresh"),
        "refresh_failed": gettext("Refreshing failed; this is old data."),
        "tz_question": gettext("Show times in %(zone)s (your browser's zone)?"),
    }


def iso_utc(moment: datetime) -> str:
    """Exact UTC time, microseconds included when the API server sent them (MicroTime)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def iso_js(moment: datetime) -> str:
    # Milliseconds: every browser's Date.parse accepts them, not all accept microseconds.
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def api_time(moment: datetime | None) -> str | None:
    """A JSON API's timestamp: exact UTC, or null for a moment that has not happened."""
    return iso_utc(moment) if moment is not None else None


def _is_utc_active() -> bool:
    return timezone.get_current_timezone_name() in ("UTC", "Etc/UTC", "Etc/Zulu", "Zulu")


def _local_text(moment: datetime) -> str:
    # Only worth a second line when the reader's zone differs from the UTC shown beside it.
    if _is_utc_active():
        return ""
    local = timezone.localtime(moment)
    fraction = f".{local.microsecond:06d}" if local.microsecond else ""
    return f"{local:%Y-%m-%d %H:%M:%S}{fraction} {local.tzname()}"


@dataclass(frozen=True, slots=True)
class When:
    """One moment, shown exactly (UTC and the active zone) and relative to the request's clock."""

    iso: str
    js: str
    local: str
    relative: str
    seconds_ago: float


def relative_text(seconds_ago: float) -> str:
    # A time slightly in the future is a writer's clock running ahead of ours.
    if seconds_ago >= 0:
        return _ago(format_duration(seconds_ago))
    return _in(format_duration(seconds_ago))


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
    return _in(format_duration(left)) if left > 0 else _expired_for(format_duration(left))


def local_moment_text(moment: datetime | None) -> str:
    """To the second, in the active zone with its name: what a person reads in a table."""
    if moment is None:
        return ""
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def mail_moment_text(moment: datetime | None) -> str:
    """UTC, plus the local time when the active zone (the recipient's) is not UTC.

    For e-mail: it is read later, forwarded, and quoted in tickets by people in other time
    zones, so UTC comes first and a missing moment says so in words.
    """
    if moment is None:
        return never_text()
    text = f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
    if not _is_utc_active():
        local = timezone.localtime(moment)
        text += f" ({local:%Y-%m-%d %H:%M:%S} {local.tzname()})"
    return text


def never_text() -> str:
    """For a moment that has not happened (a lease never renewed, a worker never seen)."""
    return pgettext("moment", "never")
