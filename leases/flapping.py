"""Flapping: a lease whose holder keeps changing, because its leader keeps losing it
(overloaded API server, CPU starvation, network trouble).

Every flapping query of the Leases pages lives here, so that there is one definition to
read.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from leases.models import LeaseTransition

# A lease whose holder changed this often within the window is flapping. The same settings
# are the lease_flapping alert rule's defaults, so the page and the mails agree.
FLAP_WINDOW = timedelta(seconds=settings.ALERT_FLAP_WINDOW_SECONDS)
FLAP_THRESHOLD = settings.ALERT_FLAP_CHANGES


def flapping_lease_ids(now: datetime) -> Any:
    """Ids of leases with FLAP_THRESHOLD or more observed holder changes in FLAP_WINDOW.

    Only changes the watcher saw count: `missed` changes happened at unknown times while
    nobody watched, possibly days apart, so they say nothing about the last ten minutes.
    """
    return (
        LeaseTransition.objects.filter(observed_at__gt=now - FLAP_WINDOW)
        .values("lease_id")
        .annotate(changes=Count("id"))
        .filter(changes__gte=FLAP_THRESHOLD)
        .values("lease_id")
    )


def recent_changes(now: datetime) -> Coalesce:
    """Per lease row: holder changes in FLAP_WINDOW, as a correlated subquery.

    Evaluated only for the rows a page returns (an index probe each), in the same query.
    """
    changes = (
        LeaseTransition.objects.filter(lease_id=OuterRef("pk"), observed_at__gt=now - FLAP_WINDOW)
        .order_by()
        .values("lease_id")
        .annotate(changes=Count("id"))
        .values("changes")
    )
    return Coalesce(Subquery(changes), 0)


def flap_counts(lease_ids: Iterable[int], now: datetime) -> dict[int, int]:
    """Holder changes in FLAP_WINDOW for each of these leases, in one grouped query."""
    ids = list(lease_ids)
    if not ids:
        return {}
    rows = (
        LeaseTransition.objects.filter(lease_id__in=ids, observed_at__gt=now - FLAP_WINDOW)
        .values("lease_id")
        .annotate(changes=Count("id"))
        .values_list("lease_id", "changes")
    )
    return dict(rows)


def most_flapping(now: datetime, limit: int) -> dict[int, int]:
    """Live leases flapping now, most holder changes first: lease id -> changes in FLAP_WINDOW."""
    return dict(
        LeaseTransition.objects.filter(
            observed_at__gt=now - FLAP_WINDOW, lease__deleted_at__isnull=True
        )
        .values("lease_id")
        .annotate(changes=Count("id"))
        .filter(changes__gte=FLAP_THRESHOLD)
        .order_by("-changes")
        .values_list("lease_id", "changes")[:limit]
    )
