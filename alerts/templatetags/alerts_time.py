"""Alert pages show times to the second: incidents are judged every few seconds, and the
microseconds Kubernetes' MicroTime carries (shown on the lease pages) only add noise here."""

from __future__ import annotations

from datetime import datetime

from django import template

from dashboard.timefmt import local_moment_text

register = template.Library()


@register.filter
def to_second(iso: str) -> str:
    """`2026-11-29T08:00:13.123456Z` -> `2026-11-29 17:00:13 KST` in the reader's zone
    (`2026-11-29 08:00:13 UTC` for a reader in UTC); the exact value goes in a tooltip."""
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return iso
    if moment.tzinfo is None:
        return iso
    return local_moment_text(moment)
