"""Incident timeline entries: every change of state, mail decision and person's action.

Evaluation, mail planning and the incident actions all write them, so they share one way
of clipping the text to what the column holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import translation

from alerts.conditions import Message
from alerts.models import Incident, IncidentEvent, render_message

EVENT_TEXT_LIMIT = 1000
MESSAGE_ID_LIMIT = 300


def clip(text: str, limit: int) -> str:
    """Text cut to `limit` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stored(value: object) -> str | dict[str, Any]:
    """An entry's value as stored: text (data), or a message of its own (a title, a note, a
    duration) that is written in each reader's language too."""
    if isinstance(value, Message):
        return value.as_json()
    if isinstance(value, timedelta):
        return Message("%(duration)s", durations={"duration": value.total_seconds()}).as_json()
    if isinstance(value, dict) and value.get("id"):
        return value
    return str(value)


def _english(value: str | dict[str, Any]) -> str:
    if isinstance(value, str):
        return value
    with translation.override("en"):
        return render_message(value) or ""


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
    readers of other languages (`IncidentEvent.display_text`). Values are stored as text;
    a `alerts.conditions.Message` (or a stored message dict) or a `timedelta` is stored as a
    message, so it is read in the reader's language too.
    """
    if args is None:
        return IncidentEvent(
            incident=incident, kind=kind, text=clip(text, EVENT_TEXT_LIMIT), at=now, user=user
        )
    values = {name: _stored(value) for name, value in args.items()}
    english = {name: _english(value) for name, value in values.items()}
    return IncidentEvent(
        incident=incident,
        kind=kind,
        text=clip(text % english, EVENT_TEXT_LIMIT),
        message=text if len(text) <= MESSAGE_ID_LIMIT else "",
        message_args=values,
        at=now,
        user=user,
    )
