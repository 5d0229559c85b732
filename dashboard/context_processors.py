from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

NAVIGATION = (
    ("overview", "Overview", "overview"),
    ("leases", "Leases", "leases:index"),
    ("nks", "Clusters", "nks:index"),
    ("alerts", "Alerts", "alerts:index"),
)


def page_refresh(request: HttpRequest) -> dict[str, Any]:
    """Seconds between htmx refreshes of live regions: one pace for every page."""
    return {"refresh_seconds": settings.PAGE_REFRESH_SECONDS}


def navigation(request: HttpRequest) -> dict[str, Any]:
    """The navigation items and which one is current, for base.html."""
    match = getattr(request, "resolver_match", None)
    current = (match.namespace or match.url_name) if match else None
    return {
        "navigation": [
            {"key": key, "label": label, "url_name": url_name, "current": key == current}
            for key, label, url_name in NAVIGATION
        ]
    }
