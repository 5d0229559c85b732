"""Alert pages show times to the second: incidents are judged every few seconds, and the
microseconds Kubernetes' MicroTime carries (shown on the lease pages) only add noise here."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def to_second(iso: str) -> str:
    """`2026-11-29T08:00:13.123456Z` -> `2026-11-29 08:00:13 UTC`."""
    if len(iso) < 19 or iso[10] != "T":
        return iso
    return f"{iso[:10]} {iso[11:19]} UTC"
