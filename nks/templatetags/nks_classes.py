"""CSS classes of NKS states: the one place where a domain value becomes a colour.

Presenters (nks/presenters/) hand the templates domain values; each filter here maps one kind
of value to its class, so how a state looks is changed here and nowhere in Python that decides
what the state is. Anything unforeseen is quiet (grey), never green. A Lease's state has its own
filter in the leases app (``lease_state_pill`` of lease_css).

    <span class="pill {{ row.health|health_class }}">{{ row.health.label }}</span>
"""

from __future__ import annotations

from django import template
from django.utils.translation import gettext

from leases.models import ConditionStatus
from nks.enums import EventState, Freshness, OperationPhase
from nks.models import Health, ResizeState
from nks.node_picture import CrossCheck
from nks.presenters.clusters import ClusterRow
from nks.presenters.nodegroup_detail import NodeRow
from nks.presenters.rows import NodegroupRow

register = template.Library()

OK, WARN, BAD, QUIET = "pill-ok", "pill-warn", "pill-bad", "pill-quiet"

HEALTH_PILLS = {Health.HEALTHY: OK, Health.DEGRADED: WARN, Health.DOWN: BAD, Health.UNKNOWN: QUIET}
# A table row is tinted when it needs a look; an unknown verdict needs one too.
HEALTH_ROWS = {Health.DEGRADED: "row-warn", Health.DOWN: "row-bad", Health.UNKNOWN: "row-warn"}
FRESHNESS_PILLS = {Freshness.FRESH: OK, Freshness.STALE: WARN, Freshness.ROTTEN: BAD}
PHASE_PILLS = {
    OperationPhase.COMPLETE: OK,
    OperationPhase.IN_PROGRESS: WARN,
    OperationPhase.FAILED: BAD,
}
EVENT_PILLS = {EventState.SUCCESS: OK, EventState.IN_PROGRESS: WARN, EventState.FAIL: BAD}
EVENT_ROWS = {EventState.IN_PROGRESS: "row-warn", EventState.FAIL: "row-bad"}
RESIZE_PILLS = {
    ResizeState.PENDING: QUIET,
    ResizeState.SUBMITTING: WARN,
    ResizeState.SUBMITTED: WARN,
    ResizeState.IN_PROGRESS: WARN,
    ResizeState.UNCERTAIN: WARN,
    ResizeState.SUCCEEDED: OK,
    ResizeState.FAILED: BAD,
}
# NKS's own api_status and node_status strings, as it sends them (no enum: the guide's lists
# are incomplete, so the raw value is what the page shows).
API_STATUS_PILLS = {
    "NORMAL": OK,
    "K8S_API_NOT_WORKING": BAD,
    "STALED_DATA": WARN,
    "ROTTEN_DATA": WARN,
}
NODE_STATUS_PILLS = {
    "NORMAL": OK,
    "ALL_NODES_NOT_READY": BAD,
    "NOT_READY_NODE_EXIST": WARN,
    "STALED_DATA": WARN,
    "ROTTEN_DATA": WARN,
}
OK_PILLS = {True: OK, False: BAD}
# A Kubernetes node condition's status. For Ready, False and Unknown are both bad (Unknown is
# what the node controller writes when the kubelet stops reporting).
READY_PILLS = {
    ConditionStatus.TRUE: OK,
    ConditionStatus.FALSE: BAD,
    ConditionStatus.UNKNOWN: BAD,
    ConditionStatus.MISSING: QUIET,
}
# The pressure conditions are good when False: MemoryPressure True is the bad news.
PRESSURE_PILLS = {ConditionStatus.TRUE: BAD, ConditionStatus.FALSE: OK}


@register.filter
def health_class(health: Health | None, kind: str = "pill") -> str:
    """A verdict's pill; ``health_class:"row"`` its table row, ``:"strip"`` its strip segment.

    None (no verdict, or no sample) is a quiet pill, an untinted row, a "no data" segment.
    """
    if kind == "strip":
        return f"h-{Health(health).value}" if health is not None else "h-none"
    if kind == "row":
        return HEALTH_ROWS.get(health, "") if health is not None else ""
    return HEALTH_PILLS.get(health, QUIET) if health is not None else QUIET


@register.filter
def freshness_class(freshness: Freshness | None) -> str:
    return FRESHNESS_PILLS.get(freshness, QUIET) if freshness is not None else QUIET


@register.filter
def phase_class(phase: OperationPhase | None) -> str:
    return PHASE_PILLS.get(phase, QUIET) if phase is not None else QUIET


@register.filter
def event_state_class(state: EventState | None, kind: str = "pill") -> str:
    """An NKS operation's pill, or with ``:"row"`` its table row."""
    if state is None:
        return "" if kind == "row" else QUIET
    if kind == "row":
        return EVENT_ROWS.get(state, "")
    return EVENT_PILLS.get(state, QUIET)


@register.filter
def resize_state_class(state: ResizeState | None) -> str:
    return RESIZE_PILLS.get(state, QUIET) if state is not None else QUIET


@register.filter
def api_status_class(status: str | None) -> str:
    return API_STATUS_PILLS.get((status or "").upper(), QUIET)


@register.filter
def node_status_class(status: str | None) -> str:
    return NODE_STATUS_PILLS.get((status or "").upper(), QUIET)


@register.filter
def ok_class(ok: bool | None) -> str:
    """A yes/no/unknown from NKS (the `api` field, a node's Ready): green, red or grey."""
    return OK_PILLS.get(ok, QUIET) if isinstance(ok, bool) else QUIET


@register.filter
def cluster_row_class(row: ClusterRow) -> str:
    """A clusters-page row: gone clusters are greyed, the others tinted by their verdict."""
    return "row-quiet" if row.gone else health_class(row.health, "row")


@register.filter
def nodegroup_row_class(row: NodegroupRow) -> str:
    """A nodegroup row: tinted by the worse of its last operation and its verdict."""
    if row.gone:
        return "row-quiet"
    if row.phase == OperationPhase.FAILED or row.health == Health.DOWN:
        return "row-bad"
    if row.health in (Health.DEGRADED, Health.UNKNOWN) or row.in_progress:
        return "row-warn"
    return ""


@register.filter
def condition_class(status: ConditionStatus | str | None, kind: str = "Ready") -> str:
    """A node condition's pill: ``{{ c.status|condition_class:c.type }}``."""
    if kind == "Ready":
        return READY_PILLS.get(status, QUIET)  # type: ignore[call-overload]
    return PRESSURE_PILLS.get(status, WARN if status == ConditionStatus.UNKNOWN else QUIET)  # type: ignore[call-overload]


@register.filter
def ready_text(status: ConditionStatus | str | None, place: str = "table") -> str:
    """A Ready pill's words. Ready and NotReady are the Node condition's own values, kept as
    Kubernetes writes them; Unknown too in a table, where the column says what it is. On a
    node's own page (``place`` "page") an unknown or missing condition is said in words."""
    if status == ConditionStatus.TRUE:
        return "Ready"
    if status == ConditionStatus.FALSE:
        return "NotReady"
    if place == "page":
        if status == ConditionStatus.UNKNOWN:
            return gettext("Ready unknown")
        return gettext("Ready not reported")
    return "Unknown" if status == ConditionStatus.UNKNOWN else gettext("not reported")


@register.filter
def node_row_class(row: NodeRow) -> str:
    """A node's table row: red when not Ready or silent, amber when cordoned."""
    if row.ready != ConditionStatus.TRUE or row.heartbeat == "expired":
        return "row-bad"
    if row.cordoned:
        return "row-warn"
    return ""


@register.filter
def cross_check_class(check: CrossCheck | None) -> str:
    """The cross-check's banner: agreement is good news, no verdict is quiet, else a warning."""
    if check is None or check.unjudged:
        return "banner-info"
    return "banner-success" if check.agrees else "banner-warning"
