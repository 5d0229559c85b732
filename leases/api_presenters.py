"""The Leases JSON API's bodies (leases/api.py): plain dicts with exact UTC times."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dashboard.flapping import flap_policy
from dashboard.timefmt import api_time
from leases.availability import ELECTION_CLASSES, Availability, lease_availability
from leases.cursors import Cursor
from leases.freshness import is_current
from leases.models import (
    KubeCluster,
    Lease,
    LeaseCandidate,
    LeaseTransition,
    lease_state,
)
from leases.problems_first import ranked_page
from leases.queries import (
    LeaseFilters,
    filter_leases,
    keyset_page,
)

API_PAGE_SIZE = 500
# A flapping lease can have thousands of transitions: the API shows the newest.
API_HISTORY_LIMIT = 1000

API_FIELDS = (
    "id",
    "cluster_id",
    "namespace",
    "name",
    "lease_class",
    "holder",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "lease_transitions",
    "deleted_at",
    "identity",
    "library",
    "token",
    "group_name",
    "group_slot",
    "foreign_writer",
    "fencing_reused_at",
)
# For the availability block of one lease (leases/availability.py reads these).
AVAILABILITY_FIELDS = ("created_at", "lease_class")


def api_lease(
    row: Mapping[str, Any], cluster: str, now: datetime, as_of: datetime | None = None
) -> dict[str, Any]:
    """One lease for the API, judged by its cluster's lease data as-of moment (`as_of`):
    `as_of` and `stale` say how current the answer is."""
    return {
        "cluster": cluster,
        "namespace": row["namespace"],
        "name": row["name"],
        "class": row["lease_class"],
        "holder": row["holder"],
        "acquire_time": api_time(row["acquire_time"]),
        "renew_time": api_time(row["renew_time"]),
        "lease_duration_seconds": row["lease_duration_seconds"],
        "expires_at": api_time(row["expires_at"]),
        "state": lease_state(row["holder"], row["expires_at"], now, as_of).value,
        "as_of": api_time(as_of),
        "stale": not is_current(as_of, now),
        "transitions": row["lease_transitions"],
        "deleted": row["deleted_at"] is not None,
        # Who really leads (leases/leader_k8s.py); `holder` stays the raw holderIdentity.
        "identity": row["identity"],
        "library": row["library"],
        "token": row["token"],
        "group": (
            {"name": row["group_name"], "slot": row["group_slot"]} if row["group_name"] else None
        ),
        "foreign_writer": row["foreign_writer"],
        "fencing_reused_at": api_time(row["fencing_reused_at"]),
    }


def api_availability(figures: Mapping[str, Availability]) -> dict[str, dict[str, Any]]:
    return {
        window: {
            "ratio": availability.ratio,
            "observed_seconds": availability.observed_seconds,
            "available_seconds": availability.available_seconds,
            "gaps": availability.gaps,
            "longest_gap_seconds": availability.longest_gap_seconds,
            "median_takeover_seconds": availability.median_takeover_seconds,
        }
        for window, availability in figures.items()
    }


def api_lease_page(
    filters: LeaseFilters, now: datetime, cursor: Cursor | None, limit: int = API_PAGE_SIZE
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of leases as API dicts and the cursor of the next page (None: last page)."""
    clusters = KubeCluster.objects.values_list("id", "name", "enabled", "leases_as_of")
    names = {pk: name for pk, name, _, _ in clusters}
    as_of = {pk: at if enabled else None for pk, _, enabled, at in clusters}
    cluster_ids = {name: pk for pk, name in names.items()}
    if filters.sort_key.computed:
        # Problems first: its rank is from the clock, so no index holds it; the table's
        # statement reads the problems and one page of the rest instead of every lease.
        page = ranked_page(filters, now, cluster_ids, flap_policy(), cursor, limit, API_FIELDS)
    else:
        leases = filter_leases(filters, now, cluster_ids)
        page = keyset_page(leases, filters, cursor, limit, API_FIELDS)
    results = [
        api_lease(row, names[row["cluster_id"]], now, as_of.get(row["cluster_id"]))
        for row in page.rows
    ]
    return results, page.next_cursor


def api_lease_detail(
    cluster: str, namespace: str, name: str, now: datetime
) -> tuple[dict[str, Any], bool] | None:
    """The lease, its newest API_HISTORY_LIMIT holder changes (oldest first), candidates.

    The second value says whether older history was left out.
    """
    lease = (
        Lease.objects.filter(cluster__name=cluster, namespace=namespace, name=name)
        .only(*API_FIELDS, *AVAILABILITY_FIELDS)
        .first()
    )
    if lease is None:
        return None
    row = {field: getattr(lease, field) for field in API_FIELDS}
    owner = KubeCluster.objects.filter(pk=lease.cluster_id).values_list("enabled", "leases_as_of")
    enabled, as_of = owner.first() or (False, None)
    body = api_lease(row, cluster, now, as_of if enabled else None)
    # Only where one holder at a time is the point; null for heartbeats and identities.
    body["availability"] = (
        api_availability(lease_availability(lease, now))
        if lease.lease_class in ELECTION_CLASSES
        else None
    )
    newest = list(
        LeaseTransition.objects.filter(lease_id=row["id"])
        .order_by("-observed_at", "-id")
        .values(
            "from_holder",
            "to_holder",
            "from_identity",
            "to_identity",
            "fencing_reused",
            "observed_at",
            "lease_transitions",
            "missed",
        )[: API_HISTORY_LIMIT + 1]
    )
    truncated = len(newest) > API_HISTORY_LIMIT
    body["history"] = [
        {
            "from_holder": change["from_holder"],
            "to_holder": change["to_holder"],
            "from_identity": change["from_identity"],
            "to_identity": change["to_identity"],
            "fencing_reused": change["fencing_reused"],
            "observed_at": api_time(change["observed_at"]),
            "lease_transitions": change["lease_transitions"],
            "missed": change["missed"],
        }
        for change in reversed(newest[:API_HISTORY_LIMIT])
    ]
    body["candidates"] = [
        {
            "name": candidate["name"],
            "binary_version": candidate["binary_version"],
            "emulation_version": candidate["emulation_version"],
            "strategy": candidate["strategy"],
            "renew_time": api_time(candidate["renew_time"]),
            "ping_time": api_time(candidate["ping_time"]),
        }
        for candidate in LeaseCandidate.objects.filter(
            cluster_id=row["cluster_id"],
            namespace=namespace,
            lease_name=name,
            deleted_at__isnull=True,
        )
        .order_by("name")
        .values(
            "name", "binary_version", "emulation_version", "strategy", "renew_time", "ping_time"
        )
    ]
    return body, truncated
