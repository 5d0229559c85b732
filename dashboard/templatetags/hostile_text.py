"""`{{ value|visible }}`: untrusted text with its bidi controls and other invisible characters
shown as escapes (`dashboard.hostile_input.visible_text`); autoescaped as usual after."""

from __future__ import annotations

from django import template

from dashboard.hostile_input import visible_text

register = template.Library()
register.filter("visible", visible_text)
