"""How a lease's values read on every Leases page: class labels, holders, expiry, links."""

from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from django.utils.translation import gettext

from dashboard.timefmt import expiry_text as countdown_text
from dashboard.timefmt import format_duration
from leases.models import LeaseClass, LeaseState

CLASS_LABELS: dict[str, str] = dict(LeaseClass.choices)
# Holders are whatever a client wrote, up to kilobytes: the table shows a prefix and the
# title attribute a longer one; the lease page shows it all.
HOLDER_DISPLAY_CHARS = 60
HOLDER_TITLE_CHARS = 1024


def expiry_text(state: str, expires_at: datetime | None, now: datetime) -> str:
    # A released lease has no holder left to expire.
    if state == LeaseState.UNKNOWN and expires_at is not None and expires_at <= now:
        # Its expiry came after the last moment the data is known for: a renewal may have
        # come meanwhile, so no "expired … ago".
        return gettext("not known: due %(ago)s ago, after the data's last confirmed moment") % {
            "ago": format_duration((now - expires_at).total_seconds())
        }
    return countdown_text(None if state == LeaseState.RELEASED else expires_at, now)


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def leases_prefix() -> str:
    """The Leases page's URL: lease pages and filtered lists hang below it."""
    return reverse("leases:index")
