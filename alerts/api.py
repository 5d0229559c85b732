"""GET /api/v1/alerts: incidents with their notifications, for scripts and other dashboards."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from alerts.selectors import API_LIMIT, API_MAX_LIMIT, api_incidents
from dashboard.api import api_view, json_error, json_response

STATES = ("open", "resolved", "all")


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
