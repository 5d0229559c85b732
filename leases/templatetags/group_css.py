"""How leader-group values look: the CSS class of each SlotState and GroupStatus.

Presenters (leases/presenters/groups.py) hand templates domain values; these filters are the
only place a slot's or a group's state becomes a class of static/css/dashboard.css.
"""

from __future__ import annotations

from django import template

from leases.groups import GroupStatus, SlotState

register = template.Library()

SLOT_PILLS: dict[str, str] = {
    SlotState.HELD: "pill-ok",
    SlotState.EXPIRED: "pill-bad",
    SlotState.FREE: "pill-quiet",
    SlotState.UNSEEN: "pill-quiet",
    SlotState.UNKNOWN: "pill-warn",
}

GROUP_PILLS: dict[str, str] = {
    GroupStatus.STAFFED: "pill-ok",
    GroupStatus.DEGRADED: "pill-warn",
    GroupStatus.UNSTAFFED: "pill-bad",
    GroupStatus.UNKNOWN: "pill-warn",
}

GROUP_COUNTS: dict[str, str] = {
    GroupStatus.STAFFED: "",
    GroupStatus.DEGRADED: "warn",
    GroupStatus.UNSTAFFED: "bad",
    GroupStatus.UNKNOWN: "warn",
}

GROUP_ROWS: dict[str, str] = {
    GroupStatus.STAFFED: "",
    GroupStatus.DEGRADED: "row-warn",
    GroupStatus.UNSTAFFED: "row-bad",
    GroupStatus.UNKNOWN: "",
}


@register.filter
def slot_state_pill(state: str) -> str:
    """Green while held, red once its holder let it expire, grey when free."""
    return SLOT_PILLS.get(state, "")


@register.filter
def group_status_pill(status: str) -> str:
    return GROUP_PILLS.get(status, "")


@register.filter
def group_status_row(status: str) -> str:
    """A table row's class: a group under its size stands out in the list."""
    return GROUP_ROWS.get(status, "")


@register.filter
def group_status_count(status: str) -> str:
    """The class of a count that is only as good as its group (`.counts .warn`)."""
    return GROUP_COUNTS.get(status, "")
