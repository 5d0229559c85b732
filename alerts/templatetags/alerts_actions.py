"""`{% silence_options request.user row as silencing %}`: which silences this person may set
on this incident (the buttons, and the custom field's limit), so the incident actions partial
can be included by any page without its view passing them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import template

from alerts.forms import SILENCE_PRESETS
from alerts.incident_actions import silence_allowance, silence_refusal
from dashboard.timefmt import format_duration

register = template.Library()


@dataclass(slots=True)
class SilenceOptions:
    allowed: bool  # whether to offer silencing at all
    presets: list[tuple[str, str]]  # (value, label) of the buttons within the limit
    limit: str  # the longest silence allowed, in words


@register.simple_tag
def silence_options(user: Any, row: Any) -> SilenceOptions:
    """What `user` is offered for the incident of `row` (an IncidentRow): the same rule the
    action enforces (`alerts.incident_actions.silence_refusal`)."""
    allowance = silence_allowance(user)
    presets = [(value, str(label)) for value, label, delta in SILENCE_PRESETS if delta <= allowance]
    return SilenceOptions(
        allowed=silence_refusal(user, allowance, resolved=not row.is_open) is None,
        presets=presets,
        limit=format_duration(allowance.total_seconds()),
    )
