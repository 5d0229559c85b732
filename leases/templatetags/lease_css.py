"""How lease values look: the CSS class of each LeaseState, decided here and nowhere else.

Presenters hand templates domain values (a state, not a colour); `{% load lease_css %}` and
`{{ detail.state|lease_state_pill }}` turn them into classes of static/css/dashboard.css.
"""

from __future__ import annotations

from django import template

from leases.availability import SegmentKind
from leases.models import LeaseState

register = template.Library()

STATE_PILLS: dict[str, str] = {
    LeaseState.HELD: "pill-ok",
    LeaseState.EXPIRED: "pill-bad",
    LeaseState.RELEASED: "pill-quiet",
    # Not known (stale data, or an expiry after the data's as-of moment): amber, never red.
    LeaseState.UNKNOWN: "pill-warn",
}


@register.filter
def lease_state_pill(state: str) -> str:
    """The pill class of a LeaseState: green while held, red once expired, grey released."""
    return STATE_PILLS.get(state, "")


SEGMENT_CLASSES: dict[str, str] = {
    SegmentKind.HELD: "tl-held",
    SegmentKind.GAP: "tl-gap",
    SegmentKind.UNOBSERVED: "tl-unobserved",
}


@register.filter
def segment_class(kind: str) -> str:
    """The strip class of an availability SegmentKind: red gaps, grey unobserved time."""
    return SEGMENT_CLASSES.get(kind, "")


@register.filter
def holder_colour_class(colour: int | None) -> str:
    """The class of a holder's colour on the availability strip (static/css/dashboard.css
    .tl-c0 ...; leases/presenters/lease_detail.py keeps the index within the palette)."""
    return "" if colour is None else f"tl-c{colour}"
