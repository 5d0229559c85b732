"""Which leases are in which state now, as query conditions and counts: `lease_state`'s rule
(leases/models.py) for many leases at once, judged by each cluster's lease data as-of moment
(leases/freshness.py). The Leases table's filter is SQL of its own (`leases.queries.state_sql`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.db.models import Count, Q

from leases.freshness import is_current
from leases.models import KubeCluster


def lease_as_of(now: datetime) -> dict[int, datetime]:
    """The lease data as-of moment of every cluster whose data is current at `now`
    (enabled, as-of within WATCH_STALE_SECONDS): what lease states are judged by. A cluster
    missing here has no data that says anything of now."""
    return {
        cluster_id: moment
        for cluster_id, moment in KubeCluster.objects.filter(enabled=True).values_list(
            "id", "leases_as_of"
        )
        if is_current(moment, now)
    }


# Never true (ids are never null): what an OR over no cluster is, in a query condition.
_NEVER = Q(pk__isnull=True)


def expired_condition(now: datetime, as_of: Mapping[int, datetime] | None = None) -> Q:
    """Held by someone, expired before its cluster's data as-of moment: the rule of
    `lease_state`, as a query condition (`as_of`: `lease_as_of(now)`, read when not given)."""
    as_of = lease_as_of(now) if as_of is None else as_of
    before = _NEVER
    for cluster_id, moment in as_of.items():
        before |= Q(cluster_id=cluster_id, expires_at__lte=min(now, moment))
    return ~Q(holder="") & before


def unknown_condition(now: datetime, as_of: Mapping[int, datetime] | None = None) -> Q:
    """Not known now: a cluster whose data is not current, or an expiry after the data's
    as-of moment (the rule of `lease_state`)."""
    as_of = lease_as_of(now) if as_of is None else as_of
    late = _NEVER
    for cluster_id, moment in as_of.items():
        late |= Q(cluster_id=cluster_id, expires_at__gt=moment)
    return ~Q(cluster_id__in=list(as_of)) | (~Q(holder="") & Q(expires_at__lte=now) & late)


def state_counts(now: datetime, as_of: Mapping[int, datetime] | None = None) -> dict[str, Count]:
    """Aggregates counting a group's leases by state at `now`, for `.annotate(**...)`.

    `total`, `released`, `expired` and `unknown`; the held ones are the rest (`held_count`).
    """
    as_of = lease_as_of(now) if as_of is None else as_of
    return {
        "total": Count("id"),
        "released": Count("id", filter=Q(holder="") & Q(cluster_id__in=list(as_of))),
        "expired": Count("id", filter=expired_condition(now, as_of)),
        "unknown": Count("id", filter=unknown_condition(now, as_of)),
    }


def held_count(row: Mapping[str, int]) -> int:
    return row["total"] - row["released"] - row["expired"] - row["unknown"]
