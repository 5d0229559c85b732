"""The overview's parts that span apps: what is firing now, with its actions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from alerts.models import Incident, IncidentState, severity_rank
from alerts.presenters.incident_links import incident_links
from alerts.presenters.incident_list import IncidentRow, incident_row
from alerts.queries import active_silences

# Enough for one screen; the rest are one link away on the Alerts page.
FIRING_LIMIT = 10


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
    incidents = list(
        Incident.objects.filter(state=IncidentState.FIRING).select_related("acknowledged_by")
    )
    incidents.sort(key=lambda i: i.opened_at or i.since, reverse=True)
    incidents.sort(key=lambda i: (-severity_rank(i.severity), i.acknowledged_at is not None))
    shown = incidents[:FIRING_LIMIT]
    silences = active_silences(now, {incident.key for incident in shown})
    links = incident_links(shown)
    return Firing(
        rows=[
            incident_row(incident, now, silences.get(incident.key), links[incident.pk])
            for incident in shown
        ],
        total=len(incidents),
    )
