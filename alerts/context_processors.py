"""The open-incident badge in the navigation, on every page that extends base.html."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext, ngettext

from alerts.queries import open_incident_counts


@dataclass(frozen=True, slots=True)
class Badge:
    count: int
    critical: int
    unacknowledged: int

    @property
    def text(self) -> str:
        if not self.count:
            return gettext("no open incidents")
        return ngettext(
            "%(count)s open incident, %(unacknowledged)s not acknowledged",
            "%(count)s open incidents, %(unacknowledged)s not acknowledged",
            self.count,
        ) % {"count": self.count, "unacknowledged": self.unacknowledged}


def _badge() -> Badge:
    try:
        return Badge(**open_incident_counts())
    except DatabaseError:
        # The page itself decides what to say about a database outage; the badge is
        # only decoration and must not turn a page into a 500.
        return Badge(count=0, critical=0, unacknowledged=0)


def alerts_badge(request: HttpRequest) -> dict[str, Any]:
    """Lazy: the count query runs only when a template shows the badge (logged-in pages)."""
    return {"alerts_badge": SimpleLazyObject(_badge)}
