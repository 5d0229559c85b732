"""JSON API for leader-k8s slot groups under /api/v1/leader-groups."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.api import api_view, json_response
from dashboard.timefmt import api_time
from leases.groups import GroupState, GroupStatus, Slot, leader_groups
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


@api_view()
def group_list(request: HttpRequest) -> HttpResponse:
    """Every leader-k8s slot group, naturally sorted by cluster, namespace and name.

    Filters: `cluster`, `namespace` (exact). `expected` is the size an admin recorded (the
    library's maxLeaders, written on no lease), else null; `slots` lists the slots seen,
    `free` and `unseen` the other slots as [first, last] ranges. `holder` is the raw
    holderIdentity (a fencing token for leader-k8s), `identity` the node id and audit id.
    """
    now = timezone.now()
    groups = leader_groups(
        now,
        cluster=request.GET.get("cluster") or None,
        namespace=request.GET.get("namespace") or None,
    )
    clusters = KubeCluster.objects.filter(pk__in={group.cluster_id for group in groups})
    known = list(clusters.defer("kubeconfig"))
    stale = {cluster.pk: cluster.is_stale(now) for cluster in known}
    as_of = {cluster.pk: cluster.leases_as_of for cluster in known}
    return json_response(
        {
            "results": [
                api_group(
                    group, stale.get(group.cluster_id, True), now, as_of.get(group.cluster_id)
                )
                for group in groups
            ]
        }
    )
