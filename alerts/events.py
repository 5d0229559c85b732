"""Incident timeline entries: every change of state, mail decision and person's action.

Evaluation, mail planning and the incident actions all write them, so they share one way
of clipping the text to what the column holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser

from alerts.models import Incident, IncidentEvent

EVENT_TEXT_LIMIT = 1000
MESSAGE_ID_LIMIT = 300


def clip(text: str, limit: int) -> str:
    """Text cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def incident_event(
    incident: Incident,
    kind: str,
    text: str,
    now: datetime,
    user: AbstractBaseUser | None = None,
    *,
    args: Mapping[str, object] | None = None,
) -> IncidentEvent:
    """An unsaved timeline entry (callers save one or bulk-create many).

    With `args`, `text` is an English message id (marked with `gettext_noop`) whose
    `%(name)s` placeholders `args` fills: kept filled in as `text`, and as id and values for
    readers of other languages (`IncidentEvent.display_text`). Values are stored as text.
    """
    if args is None:
        return IncidentEvent(
            incident=incident, kind=kind, text=clip(text, EVENT_TEXT_LIMIT), at=now, user=user
        )
    values = {name: str(value) for name, value in args.items()}
    return IncidentEvent(
        incident=incident,
        kind=kind,
        text=clip(text % values, EVENT_TEXT_LIMIT),
        message=text if len(text) <= MESSAGE_ID_LIMIT else "",
        message_args=values,
        at=now,
        user=user,
    )
