"""`{{ value|visible }}`: untrusted text with its bidi controls and other invisible characters
shown as escapes (`dashboard.hostile_input.visible_text`); autoescaped as usual after."""

from __future__ import annotations

from django import template

from dashboard.hostile_input import visible_text

register = template.Library()
register.filter("visible", visible_text)


@register.filter
def visible_lines(value: object) -> str:
    """`{{ text|visible_lines }}`: the same, keeping the line breaks of text laid out in lines."""
    return visible_text(value, keep_lines=True)
