"""`{% silence_presets as presets %}`: the silence buttons' (value, label) pairs, so the
incident actions partial can be included by any page without its view passing them."""

from __future__ import annotations

from django import template

from alerts.forms import SILENCE_PRESETS

register = template.Library()


@register.simple_tag
def silence_presets() -> list[tuple[str, str]]:
    return [(value, str(label)) for value, label, _delta in SILENCE_PRESETS]
