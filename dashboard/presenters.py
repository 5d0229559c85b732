"""The overview's parts that span apps: what is firing now, with its actions, and the NKS
nodegroups that are down or degraded."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Window

from alerts.models import Incident, IncidentState
from alerts.presenters.incident_links import incident_links
from alerts.presenters.incident_list import OPEN_ORDER, IncidentRow, incident_row
from alerts.queries import active_silences
from nks.models import Health, NksNodegroup
from nks.presenters.rows import NodegroupRow, nodegroup_row

# Enough for one screen; the rest are one link away on the Alerts page.
FIRING_LIMIT = 10
# The NKS list beside them stops at ten clusters; the nodegroups of those are what to look at.
NODEGROUP_LIMIT = 10


@dataclass(slots=True)
class Firing:
    rows: list[IncidentRow]
    total: int

    @property
    def more(self) -> int:
        return self.total - len(self.rows)


def firing_incidents(now: datetime) -> Firing:
    """Open incidents, most severe first, then those nobody has acknowledged, then newest:
    the Alerts page's order, so both pages agree on what comes first."""
    # Sorted in SQL, the total riding along (a window count): a storm of incidents costs
    # one page, in one query.
    shown = list(
        Incident.objects.filter(state=IncidentState.FIRING)
        .select_related("acknowledged_by")
        .annotate(total=Window(Count("id")))
        .order_by(*OPEN_ORDER)[:FIRING_LIMIT]
    )
    total = shown[0].total if shown else 0
    silences = active_silences(now, {incident.key for incident in shown})
    links = incident_links(shown)
    return Firing(
        rows=[
            incident_row(incident, now, silences.get(incident.key), links[incident.pk])
            for incident in shown
        ],
        total=total,
    )


@dataclass(slots=True)
class NodegroupAttention:
    cluster: str
    row: NodegroupRow


def unhealthy_nodegroups(now: datetime) -> list[NodegroupAttention]:
    """Worker nodegroups judged down or degraded, worst first, in one query.

    A nodegroup whose verdict is unknown is not listed: its cluster is, as unknown, in the
    NKS list above, and one stale poll should not list every group of it again.
    """
    groups = (
        NksNodegroup.objects.filter(gone_at__isnull=True, cluster__gone_at__isnull=True)
        .select_related("cluster")
        .defer("node_addresses", "cluster__node_readiness", "cluster__node_addresses")
        .order_by("cluster__name", "name")
    )
    found = []
    for group in groups:
        row = nodegroup_row(group, group.cluster, now)
        if row.health in (Health.DOWN, Health.DEGRADED):
            found.append(NodegroupAttention(cluster=group.cluster.name, row=row))
    found.sort(key=lambda item: item.row.health != Health.DOWN)
    return found[:NODEGROUP_LIMIT]
