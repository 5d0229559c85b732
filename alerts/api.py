"""GET /api/v1/alerts: incidents with their notifications, for scripts and other dashboards."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from alerts.models import DeliveryState, Incident, IncidentState, Notification, Silence
from alerts.queries import active_silences
from dashboard.api import api_view, json_error, json_response
from dashboard.timefmt import api_time

STATES = ("open", "resolved", "all")
API_LIMIT = 100
API_MAX_LIMIT = 500


def api_incidents(state: str, limit: int, now: datetime) -> list[dict[str, Any]]:
    """Incidents newest first as JSON objects, each with its mail oldest first."""
    incidents = Incident.objects.select_related("acknowledged_by").prefetch_related(
        Prefetch("notifications", queryset=Notification.objects.order_by("created_at", "id"))
    )
    if state == "open":
        incidents = incidents.filter(state=IncidentState.FIRING).order_by("-opened_at", "-id")
    elif state == "resolved":
        incidents = incidents.filter(state=IncidentState.RESOLVED).order_by("-resolved_at", "-id")
    else:
        incidents = incidents.exclude(state=IncidentState.PENDING).order_by("-opened_at", "-id")
    keys = set(incidents.values_list("key", flat=True)[:limit])
    silences = active_silences(now, keys)
    return [
        {
            "id": incident.pk,
            "rule": incident.rule,
            "key": incident.key,
            "severity": incident.severity,
            "state": "open" if incident.state == IncidentState.FIRING else "resolved",
            "cluster": incident.cluster,
            "title": incident.title,
            "details": incident.details,
            "since": api_time(incident.since),
            "opened_at": api_time(incident.opened_at),
            "last_seen_at": api_time(incident.last_seen_at),
            "resolved_at": api_time(incident.resolved_at),
            "duration_seconds": round(incident.duration(now).total_seconds(), 3),
            "resolution": incident.resolution,
            "acknowledged_by": incident.acknowledged_by.get_username()
            if incident.acknowledged_by
            else None,
            "acknowledged_at": api_time(incident.acknowledged_at),
            "silenced_until": api_time(silences[incident.key].ends_at)
            if incident.key in silences
            else None,
            "silenced_by": _author(silences[incident.key]) if incident.key in silences else None,
            "url": f"{settings.DASHBOARD_URL}{incident.get_absolute_url()}",
            "notifications": [
                {
                    "id": notification.pk,
                    "kind": notification.kind,
                    "recipients": notification.recipients,
                    "state": notification.state,
                    "attempts": notification.attempts,
                    "created_at": api_time(notification.created_at),
                    "sent_at": api_time(notification.sent_at),
                    "next_attempt_at": api_time(notification.next_attempt_at)
                    if notification.state == DeliveryState.PENDING
                    else None,
                    "last_error": notification.last_error,
                }
                for notification in incident.notifications.all()
            ],
        }
        for incident in incidents[:limit]
    ]


def _author(silence: Silence) -> str | None:
    return silence.created_by.get_username() if silence.created_by else None


@api_view()
def incident_list(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state", "open")
    if state not in STATES:
        return json_error(f"state must be one of: {', '.join(STATES)}", 400)
    raw_limit = request.GET.get("limit", str(API_LIMIT))
    try:
        limit = int(raw_limit)
    except ValueError:
        return json_error("limit must be a whole number", 400)
    if not 1 <= limit <= API_MAX_LIMIT:
        return json_error(f"limit must be between 1 and {API_MAX_LIMIT}", 400)
    incidents = api_incidents(state, limit, timezone.now())
    return json_response({"state": state, "count": len(incidents), "incidents": incidents})
