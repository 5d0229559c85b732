"""How lease values look: the CSS class of each LeaseState, decided here and nowhere else.

Presenters hand templates domain values (a state, not a colour); `{% load lease_css %}` and
`{{ detail.state|lease_state_pill }}` turn them into classes of static/css/dashboard.css.
"""

from __future__ import annotations

from django import template

from leases.models import LeaseState

register = template.Library()

STATE_PILLS: dict[str, str] = {
    LeaseState.HELD: "pill-ok",
    LeaseState.EXPIRED: "pill-bad",
    LeaseState.RELEASED: "pill-quiet",
}


@register.filter
def lease_state_pill(state: str) -> str:
    """The pill class of a LeaseState: green while held, red once expired, grey released."""
    return STATE_PILLS.get(state, "")
