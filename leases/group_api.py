"""JSON API for leader-k8s slot groups under /api/v1/leader-groups."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.api import api_view, json_error, json_response
from dashboard.timefmt import api_time
from leases.cursors import CursorError
from leases.groups import GroupState, GroupStatus, Slot, leader_group_page
from leases.models import KubeCluster
from leases.presenters.groups import group_url, slot_ranges


def _slot(slot: Slot, now: datetime) -> dict[str, Any]:
    lease = slot.lease
    assert lease is not None  # only seen slots are listed
    return {
        "slot": slot.index,
        "lease": lease.name,
        "holder": lease.holder,
        "identity": lease.identity,
        "token": lease.token,
        "foreign_writer": lease.foreign_writer,
        "acquire_time": api_time(lease.acquire_time),
        "renew_time": api_time(lease.renew_time),
        "expires_at": api_time(lease.expires_at),
        "state": slot.state.value,
        "fencing_reused_at": api_time(lease.fencing_reused_at),
    }


def api_group(
    group: GroupState, stale: bool, now: datetime, as_of: datetime | None = None
) -> dict[str, Any]:
    status = group.status
    return {
        "cluster": group.cluster,
        "namespace": group.namespace,
        "name": group.name,
        "url": group_url(group.cluster, group.namespace, group.name),
        "slots_seen": len(group.seen),
        "highest_slot_seen": group.highest_seen,
        "held": group.held,
        "expected": group.expected,
        "status": status.value,
        "unstaffed": status == GroupStatus.UNSTAFFED,
        "degraded": status == GroupStatus.DEGRADED,
        "understaffed": status != GroupStatus.STAFFED,
        # The group's cluster's lease data is not known to be current: these figures may be
        # old, and its slots read "unknown" (`as_of`: the data's as-of moment).
        "stale": stale,
        "as_of": api_time(as_of),
        "slots": [_slot(slot, now) for slot in group.seen],
        "free": [[r.first, r.last] for r in slot_ranges([s.index for s in group.free])],
        "unseen": [[r.first, r.last] for r in slot_ranges([s.index for s in group.unseen])],
    }


# Groups per page of the API: each costs its slot leases and half a millisecond to judge.
API_GROUPS_PAGE_SIZE = 25


@api_view()
def group_list(request: HttpRequest) -> HttpResponse:
    """Leader-k8s slot groups, 25 a page: those needing a look first (unstaffed, degraded,
    unknown), then the staffed, each part naturally sorted by cluster, namespace and name.

    `next` is the URL of the following page, or null on the last page (a cursor, `after`,
    like /api/v1/leases'); `total` counts every group the filters match, `understaffed`
    those of them not staffed, on this page or not. Filters: `cluster`, `namespace`
    (exact). `expected` is the size an admin recorded (the library's maxLeaders, written on
    no lease), else null; `slots` lists the slots seen,
    `free` and `unseen` the other slots as [first, last] ranges. `holder` is the raw
    holderIdentity (a fencing token for leader-k8s), `identity` the node id and audit id.
    """
    now = timezone.now()
    cluster, namespace = request.GET.get("cluster") or None, request.GET.get("namespace") or None
    try:
        page = leader_group_page(
            now,
            request.GET.get("after") or None,
            API_GROUPS_PAGE_SIZE,
            cluster=cluster,
            namespace=namespace,
        )
    except CursorError as error:
        return json_error("invalid filter", 400, fields={"after": [{"message": str(error)}]})
    groups = page.groups
    clusters = KubeCluster.objects.filter(pk__in={group.cluster_id for group in groups})
    known = list(clusters.defer("kubeconfig"))
    stale = {cluster.pk: cluster.is_stale(now) for cluster in known}
    as_of = {cluster.pk: cluster.leases_as_of for cluster in known}
    next_url = None
    if page.next_cursor is not None:
        query = {"cluster": cluster, "namespace": namespace, "after": page.next_cursor}
        next_url = request.build_absolute_uri(
            f"{request.path}?{urlencode({k: v for k, v in query.items() if v})}"
        )
    return json_response(
        {
            "results": [
                api_group(
                    group, stale.get(group.cluster_id, True), now, as_of.get(group.cluster_id)
                )
                for group in groups
            ],
            "next": next_url,
            "total": page.total,
            "understaffed": page.needing_a_look,
        }
    )
