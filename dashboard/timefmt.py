"""How every page, API and e-mail writes a moment or a length of time.

One home so that a lease, an NKS cluster and an incident show time the same way; the
browser's ticking ages (static/js/dashboard.js) follow `format_duration` too, with the
words of the active language (`js_time_words`). Moments are shown in the active time zone
(the reader's, dashboard.middleware.PreferenceMiddleware; TIME_ZONE otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils import timezone
from django.utils.translation import get_language, gettext, pgettext


@dataclass(frozen=True, slots=True)
class TimeWords:
    """Durations in one language's words. The count always goes through %(count)s, so
    js_time_words can hand the browser the same patterns with a marker in its place.

    A table that writes several durations per row takes `time_words()` once and calls these
    methods: finding the active language costs more than the formatting itself (measured:
    a third of the Leases table's build when looked up per duration)."""

    seconds: str
    minutes: str
    hours: str
    days: str
    ago: str
    ahead: str
    expired_for: str

    def duration(self, seconds: float) -> str:
        """A coarse, glanceable length of time; static/js/dashboard.js formats the same way."""
        whole = int(abs(seconds))
        if whole < 120:
            return self.seconds % {"count": whole}
        if whole < 7200:
            return self.minutes % {"count": whole // 60}
        if whole < 172_800:
            return self.hours % {"count": whole // 3600}
        return self.days % {"count": whole // 86_400}

    def relative(self, seconds_ago: float) -> str:
        # A time slightly in the future is a writer's clock running ahead of ours.
        pattern = self.ago if seconds_ago >= 0 else self.ahead
        return pattern % {"duration": self.duration(seconds_ago)}

    def countdown(self, expires_at: datetime | None, now: datetime) -> str:
        """A countdown to `expires_at`, or how long ago it passed; a dash when nothing
        expires."""
        if expires_at is None:
            return "—"
        left = (expires_at - now).total_seconds()
        pattern = self.ahead if left > 0 else self.expired_for
        return pattern % {"duration": self.duration(left)}


_WORDS: dict[str | None, TimeWords] = {}


def time_words() -> TimeWords:
    """The active language's `TimeWords`, looked up in the catalog once per language."""
    language = get_language()
    words = _WORDS.get(language)
    if words is None:
        words = _WORDS[language] = TimeWords(
            seconds=gettext("%(count)s s"),
            minutes=gettext("%(count)s min"),
            hours=gettext("%(count)s h"),
            days=gettext("%(count)s d"),
            ago=gettext("%(duration)s ago"),
            # The same words for "a clock ahead of ours" and "expires in".
            ahead=pgettext("time from now", "in %(duration)s"),
            expired_for=gettext("expired for %(duration)s"),
        )
    return words


@receiver(setting_changed)
def _forget_words(*, setting: str, **kwargs: Any) -> None:
    # Tests that change the languages or catalogs get their new words.
    if setting in {"LANGUAGES", "LANGUAGE_CODE", "LOCALE_PATHS"}:
        _WORDS.clear()


def format_duration(seconds: float) -> str:
    """A coarse, glanceable length of time in the active language (`TimeWords.duration`)."""
    return time_words().duration(seconds)


def js_time_words() -> dict[str, str]:
    """The active language's duration patterns for dashboard.js; `{n}` is the count and
    `{d}` a formatted duration. Rendered into <body data-time-words>."""
    words = time_words()
    return {
        "s": words.seconds % {"count": "{n}"},
        "min": words.minutes % {"count": "{n}"},
        "h": words.hours % {"count": "{n}"},
        "d": words.days % {"count": "{n}"},
        "ago": words.ago % {"duration": "{d}"},
        "in": words.ahead % {"duration": "{d}"},
        "expired_for": words.expired_for % {"duration": "{d}"},
        "expired": pgettext("lease state", "expired"),
        "unknown": pgettext("lease state", "unknown"),
        # A countdown that ran out in the browser, before the server confirmed the expiry.
        "due_for": gettext("due %(duration)s ago, not confirmed yet") % {"duration": "{d}"},
        "pause": gettext("Pause refresh"),
        "resume": gettext("Resume refresh"),
        "refresh_failed": gettext("Refreshing failed; this is old data."),
        "tz_question": gettext("Show times in %(zone)s (your browser's zone)?"),
        # "Paused at 03:12:09": the clock time is formatted in the browser, in `zone`, the
        # zone the pages show times in (not the browser's own, which may differ).
        "paused_at": gettext("Paused at %(time)s"),
        "zone": timezone.get_current_timezone_name(),
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
    """ "5 s ago", or "in 5 s" for a writer's clock ahead of ours (`TimeWords.relative`)."""
    return time_words().relative(seconds_ago)


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
    """A countdown to `expires_at`, or how long ago it passed (`TimeWords.countdown`)."""
    return time_words().countdown(expires_at, now)


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
