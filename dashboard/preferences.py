"""A person's language and time zone: which ones apply to a request, and saving a choice.

The language is, in order: the saved choice (UserPreference.language), the browser's
Accept-Language (or the language cookie Django's set_language leaves for anonymous visitors),
then LANGUAGE_CODE. The first is applied by `dashboard.middleware.PreferenceMiddleware`,
the other two by Django's LocaleMiddleware before it. The time zone is the saved one, else
TIME_ZONE; the browser's zone is offered once (the banner in base.html, dashboard.js).
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from dashboard.models import UserPreference

# Offered first in the time zone select: where most of the engineers are, and UTC.
COMMON_TIME_ZONES = ("Asia/Seoul", "UTC")


@dataclass(frozen=True, slots=True)
class Preference:
    """What a request needs of a UserPreference, read with one query."""

    language: str
    time_zone: str
    time_zone_offered: bool

    @property
    def offer_time_zone(self) -> bool:
        """Whether the browser's zone is still to be offered (never asked, nothing chosen)."""
        return not self.time_zone and not self.time_zone_offered


# A user without a row yet: nothing chosen, nothing offered.
NO_PREFERENCE = Preference(language="", time_zone="", time_zone_offered=False)


def language_codes() -> tuple[str, ...]:
    return tuple(code for code, _name in settings.LANGUAGES)


@cache
def known_time_zones() -> frozenset[str]:
    # Reading the tz database walks the file system: once per process is enough.
    return frozenset(zoneinfo.available_timezones())


def is_known_time_zone(name: str) -> bool:
    return name in known_time_zones()


@cache
def time_zone_choices() -> tuple[tuple[str, str], ...]:
    """Every zone of the tz database, the common ones first."""
    rest = sorted(known_time_zones() - set(COMMON_TIME_ZONES))
    return tuple((name, name) for name in (*COMMON_TIME_ZONES, *rest))


def zone_info(name: str) -> zoneinfo.ZoneInfo:
    """The zone called `name`, or TIME_ZONE when it is blank or no longer known.

    A zone can disappear from the tz database after an upgrade: the page then shows the
    server's zone rather than failing.
    """
    if name and is_known_time_zone(name):
        return zoneinfo.ZoneInfo(name)
    return zoneinfo.ZoneInfo(settings.TIME_ZONE)


@cache
def _preference_sql() -> str:
    # Every signed-in request runs it: one fixed statement (prepared by PostgreSQL after
    # its second run), without the ORM's compilation each time.
    quote = connection.ops.quote_name
    columns = ", ".join(quote(name) for name in ("language", "time_zone", "time_zone_offered"))
    table = quote(UserPreference._meta.db_table)
    return f"SELECT {columns} FROM {table} WHERE {quote('user_id')} = %s"  # noqa: S608


def load_preference(user_id: Any) -> Preference:
    """The user's choices, in one query; NO_PREFERENCE for someone who never chose."""
    with connection.cursor() as cursor:
        cursor.execute(_preference_sql(), [user_id])
        row = cursor.fetchone()
    if row is None:
        return NO_PREFERENCE
    language, time_zone, offered = row
    # A language removed from LANGUAGES since it was saved falls back to the negotiation.
    return Preference(
        language=language if language in language_codes() else "",
        time_zone=time_zone,
        time_zone_offered=offered,
    )


@transaction.atomic
def save_language(user: Any, language: str) -> UserPreference:
    """Remember `language` ("" for the browser's) as the user's choice."""
    if language and language not in language_codes():
        raise ValueError(f"{language!r} is not one of LANGUAGES")
    preference, _created = UserPreference.objects.select_for_update().get_or_create(user=user)
    preference.language = language
    preference.save(update_fields=["language", "updated_at"])
    return preference


@transaction.atomic
def save_preferences(user: Any, *, language: str, time_zone: str) -> UserPreference:
    """Both choices from the preferences page; choosing a zone also answers the offer."""
    if language and language not in language_codes():
        raise ValueError(f"{language!r} is not one of LANGUAGES")
    if time_zone and not is_known_time_zone(time_zone):
        raise ValueError(f"{time_zone!r} is not a known time zone")
    preference, _created = UserPreference.objects.select_for_update().get_or_create(user=user)
    preference.language = language
    preference.time_zone = time_zone
    preference.time_zone_offered = True
    preference.save(update_fields=["language", "time_zone", "time_zone_offered", "updated_at"])
    return preference


@transaction.atomic
def answer_time_zone_offer(user: Any, time_zone: str | None) -> UserPreference:
    """The answer to the banner: the browser's zone (`time_zone`) or the default (None).

    Either answer is final: the offer is not made again. A zone chosen meanwhile on the
    preferences page (another tab) is not overwritten by a stale banner.
    """
    if time_zone is not None and not is_known_time_zone(time_zone):
        raise ValueError(f"{time_zone!r} is not a known time zone")
    preference, _created = UserPreference.objects.select_for_update().get_or_create(user=user)
    if time_zone is not None and not preference.time_zone:
        preference.time_zone = time_zone
    preference.time_zone_offered = True
    preference.save(update_fields=["time_zone", "time_zone_offered", "updated_at"])
    return preference
