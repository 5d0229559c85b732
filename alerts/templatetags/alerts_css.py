"""CSS classes for alert states, decided in templates: one filter per domain value.

Presenters return the states; how a state looks (pill colour, row tint) is the page's
business, so it lives here and not in `alerts.presenters`.
"""

from __future__ import annotations

from typing import Any

from django import template

from alerts.models import DeliveryState, IncidentState, Severity

register = template.Library()

# Keyed by the stored values: templates hand over plain strings, and an enum member does not
# hash like its value.
SEVERITY_PILLS = {Severity.CRITICAL.value: "pill-bad", Severity.WARNING.value: "pill-warn"}
DELIVERY_PILLS = {
    DeliveryState.PENDING.value: "pill-warn",
    DeliveryState.SENDING.value: "pill-warn",
    DeliveryState.SENT.value: "pill-ok",
    DeliveryState.FAILED.value: "pill-bad",
    DeliveryState.CANCELLED.value: "pill-quiet",
}


@register.filter
def severity_pill(severity: str) -> str:
    """`{{ row.severity|severity_pill }}`: critical is bad, warning is a warning."""
    return SEVERITY_PILLS.get(str(severity), "pill-quiet")


@register.filter
def delivery_pill(state: str) -> str:
    """`{{ n.state|delivery_pill }}`: a mail's delivery state."""
    return DELIVERY_PILLS.get(str(state), "pill-quiet")


@register.filter
def incident_row_class(row: Any) -> str:
    """`{{ row|incident_row_class }}`: resolved rows recede; open, unacknowledged ones stand
    out by severity; acknowledged ones are someone's already, so they stay plain."""
    if row.state != IncidentState.FIRING:
        return "row-quiet"
    if row.acknowledged is not None:
        return ""
    return "row-bad" if row.severity == Severity.CRITICAL else "row-warn"


@register.filter
def badge_class(badge: Any) -> str:
    """`{{ alerts_badge|badge_class }}`: the navigation badge turns red while a critical is open."""
    return "nav-badge nav-badge-critical" if badge.critical else "nav-badge"
