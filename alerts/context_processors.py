"""The incidents-needing-attention badge in the navigation, on every page that extends base.html."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject
from django.utils.translation import gettext, ngettext

from alerts.queries import attention_counts


@dataclass(frozen=True, slots=True)
class Badge:
    """Open incidents that need someone: unacknowledged and not silenced."""

    count: int
    critical: int

    @property
    def text(self) -> str:
        """What the number means; read out after "Alerts," as part of the link's name."""
        if not self.count:
            return gettext("nothing needs attention")
        return ngettext(
            "%(count)s needs attention",
            "%(count)s need attention",
            self.count,
        ) % {"count": self.count}


def _badge() -> Badge:
    try:
        return Badge(**attention_counts())
    except DatabaseError:
        # The page itself decides what to say about a database outage; the badge is
        # only decoration and must not turn a page into a 500.
        return Badge(count=0, critical=0)


def alerts_badge(request: HttpRequest) -> dict[str, Any]:
    """Lazy: the count query runs only when a template shows the badge (logged-in pages)."""
    return {"alerts_badge": SimpleLazyObject(_badge)}
