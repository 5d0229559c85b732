from __future__ import annotations

from typing import Any

from django.http import HttpRequest

NAVIGATION = (
    ("overview", "Overview", "overview"),
    ("leases", "Leases", "leases:index"),
    ("nks", "Clusters", "nks:index"),
    ("alerts", "Alerts", "alerts:index"),
)


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
