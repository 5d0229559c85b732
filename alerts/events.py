"""Incident timeline entries: every change of state, mail decision and person's action.

Evaluation, mail planning and the incident actions all write them, so they share one way
of clipping the text to what the column holds.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser

from alerts.models import Incident, IncidentEvent

EVENT_TEXT_LIMIT = 1000


def clip(text: str, limit: int) -> str:
    """Text cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def incident_event(
    incident: Incident,
    kind: str,
    text: str,
    now: datetime,
    user: AbstractBaseUser | None = None,
) -> IncidentEvent:
    """An unsaved timeline entry (callers save one or bulk-create many)."""
    return IncidentEvent(
        incident=incident, kind=kind, text=clip(text, EVENT_TEXT_LIMIT), at=now, user=user
    )
