from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.translation import gettext_lazy as _

from dashboard.preferences import NO_PREFERENCE
from dashboard.timefmt import js_time_words

NAVIGATION = (
    ("overview", _("Overview"), "overview"),
    ("leases", _("Leases"), "leases:index"),
    ("nks", _("Clusters"), "nks:index"),
    ("alerts", _("Alerts"), "alerts:index"),
)


def _time_words_json() -> str:
    return json.dumps(js_time_words(), ensure_ascii=False)


# Made once: `lazy` builds a proxy class on every call (a third of a millisecond).
_lazy_time_words_json = lazy(_time_words_json, str)


def page_refresh(request: HttpRequest) -> dict[str, Any]:
    """Seconds between htmx refreshes of live regions: one pace for every page; and the
    active language's words for the ages dashboard.js ticks between refreshes."""
    return {
        "refresh_seconds": settings.PAGE_REFRESH_SECONDS,
        # Regions whose data changes slowly (NKS polls, worker heartbeats) refresh half as
        # often, still at the pace the setting sets.
        "slow_refresh_seconds": 2 * settings.PAGE_REFRESH_SECONDS,
        # Lazy: only base.html's <body> uses it, and most renders are htmx regions without it.
        "time_words_json": _lazy_time_words_json(),
    }


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The header of base.html: navigation items and which one is current, the language
    switch, and whether the browser's time zone is still to be offered."""
    match = getattr(request, "resolver_match", None)
    current = (match.namespace or match.url_name) if match else None
    preference = getattr(request, "user_preference", NO_PREFERENCE)
    user = getattr(request, "user", None)
    signed_in = user is not None and user.is_authenticated
    return {
        "navigation": [
            {"key": key, "label": label, "url_name": url_name, "current": key == current}
            for key, label, url_name in NAVIGATION
        ],
        "header_languages": settings.LANGUAGES,
        "offer_time_zone": signed_in and preference.offer_time_zone,
        "active_time_zone": timezone.get_current_timezone_name(),
    }
