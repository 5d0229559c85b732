"""Node objects (as raw JSON dicts) into the few fields the dashboard keeps.

A Node is large and written by many hands (the kubelet, the cloud provider, add-ons, anyone
with `patch nodes`), so everything is read leniently and within bounds: a field of the wrong
type is empty, strings are cut to what the columns hold, lists and maps are capped, NUL
characters (which PostgreSQL cannot store) are removed. What was cut or dropped is counted
in `cut`, and `cleaned` says a NUL was removed, so the watcher can say how much of a cluster's
data it could not store as sent. An object without a name is refused (None).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from leases.models import KEPT_NODE_CONDITIONS, NODEGROUP_LABEL, ConditionStatus
from leases.parse import parse_time

MAX_NAME_LENGTH = 253
# A label key is an optional DNS-subdomain prefix (253), "/", and a 63-character name.
MAX_LABEL_KEY_LENGTH = 317
MAX_LABEL_VALUE_LENGTH = 63
MAX_LABELS = 256  # a real node has 15-40; more is somebody's mistake or an attack
MAX_TAINTS = 64
MAX_TAINT_EFFECT_LENGTH = 32
MAX_REASON_LENGTH = 128  # NodeReadyChange.reason
MAX_MESSAGE_LENGTH = 1000
MAX_PROVIDER_ID_LENGTH = 512
MAX_SHORT_TEXT = 64  # kubelet version, address, uid, resourceVersion
# Conditions and addresses are read up to here: a kubelet reports a handful of each.
MAX_LIST_SCAN = 256

_STATUSES = {status.value: status for status in ConditionStatus if status.value}


@dataclass(frozen=True, slots=True)
class ReadyCondition:
    """The Ready condition as the history records it; status "" when none is reported."""

    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: datetime | None


NO_READY = ReadyCondition(ConditionStatus.MISSING, "", "", None)


@dataclass(slots=True)
class NodeObservation:
    name: str
    uid: str
    resource_version: str
    labels: dict[str, str]
    created_at: datetime | None
    provider_id: str
    unschedulable: bool
    taints: list[dict[str, str]]
    # KEPT_NODE_CONDITIONS by type: {"status", "reason", "message", "last_transition_time"}
    # with the time as RFC 3339 text (it is stored as JSON).
    conditions: dict[str, dict[str, str | None]]
    ready: ReadyCondition
    kubelet_version: str
    internal_address: str
    cleaned: bool = False  # NUL characters were removed
    cut: int = 0  # strings shortened plus entries (labels, taints) dropped

    @property
    def nodegroup_label(self) -> str:
        return self.labels.get(NODEGROUP_LABEL, "")[:MAX_NAME_LENGTH]


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """What is read of every event as it arrives: which node, and its Ready condition."""

    name: str
    ready: ReadyCondition


class _Reader:
    """Reads untrusted values into bounded strings, counting what it had to change."""

    __slots__ = ("cleaned", "cut")

    def __init__(self) -> None:
        self.cleaned = False
        self.cut = 0

    def text(self, value: object, limit: int) -> str:
        if not isinstance(value, str):
            return ""
        if "\x00" in value:
            value = value.replace("\x00", "")
            self.cleaned = True
        if len(value) > limit:
            self.cut += 1
            return value[:limit]
        return value


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: object, reader: _Reader | None = None) -> list[Any]:
    if not isinstance(value, list):
        return []
    if len(value) > MAX_LIST_SCAN and reader is not None:
        reader.cut += len(value) - MAX_LIST_SCAN
    return value[:MAX_LIST_SCAN]


def _status_of(value: object) -> ConditionStatus:
    if not isinstance(value, str) or not value:
        return ConditionStatus.MISSING
    # A status no Kubernetes writes still says the node reported the condition: Unknown.
    return _STATUSES.get(value, ConditionStatus.UNKNOWN)


def _ready(conditions: list[Any], reader: _Reader) -> ReadyCondition:
    # The first Ready wins, as GetNodeCondition reads it.
    for item in conditions:
        if isinstance(item, dict) and item.get("type") == "Ready":
            return ReadyCondition(
                status=_status_of(item.get("status")),
                reason=reader.text(item.get("reason"), MAX_REASON_LENGTH),
                message=reader.text(item.get("message"), MAX_MESSAGE_LENGTH),
                last_transition_time=parse_time(item.get("lastTransitionTime")),
            )
    return NO_READY


def node_key(name: object) -> str:
    """A node's name as rows are keyed by it: NUL removed, cut to 253 ("" if not text)."""
    return _Reader().text(name, MAX_NAME_LENGTH)


def node_name_of(obj: object) -> str | None:
    """The name a Node is keyed by (also for DELETED events), or None without one."""
    if not isinstance(obj, dict):
        return None
    return node_key(_mapping(obj.get("metadata")).get("name")) or None


def node_identity(obj: object) -> NodeIdentity | None:
    """The name and Ready condition: cheap enough for every event, full parse at flush."""
    name = node_name_of(obj)
    if name is None:
        return None
    assert isinstance(obj, dict)  # node_name_of checked it
    conditions = _items(_mapping(obj.get("status")).get("conditions"))
    return NodeIdentity(name, _ready(conditions, _Reader()))


def _labels(value: object, reader: _Reader) -> dict[str, str]:
    labels: dict[str, str] = {}
    for key, item in _mapping(value).items():
        if len(labels) >= MAX_LABELS or not isinstance(item, str):
            reader.cut += 1
            continue
        label = reader.text(key, MAX_LABEL_KEY_LENGTH)
        if label:
            labels[label] = reader.text(item, MAX_LABEL_VALUE_LENGTH)
    return labels


def _taints(value: object, reader: _Reader) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = []
    items = value if isinstance(value, list) else []
    for item in items:
        if len(taints) >= MAX_TAINTS:
            reader.cut += len(items) - MAX_TAINTS
            break
        if not isinstance(item, dict):
            continue
        taints.append(
            {
                "key": reader.text(item.get("key"), MAX_LABEL_KEY_LENGTH),
                "value": reader.text(item.get("value"), MAX_LABEL_VALUE_LENGTH),
                "effect": reader.text(item.get("effect"), MAX_TAINT_EFFECT_LENGTH),
            }
        )
    return taints


def _conditions(items: list[Any], reader: _Reader) -> dict[str, dict[str, str | None]]:
    kept: dict[str, dict[str, str | None]] = {}
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind not in KEPT_NODE_CONDITIONS or kind in kept:
            continue
        transition = parse_time(item.get("lastTransitionTime"))
        kept[kind] = {
            "status": _status_of(item.get("status")).value,
            "reason": reader.text(item.get("reason"), MAX_REASON_LENGTH),
            "message": reader.text(item.get("message"), MAX_MESSAGE_LENGTH),
            "last_transition_time": transition.isoformat() if transition else None,
        }
    return kept


def _internal_address(items: list[Any], reader: _Reader) -> str:
    for item in items:
        if isinstance(item, dict) and item.get("type") == "InternalIP":
            return reader.text(item.get("address"), MAX_SHORT_TEXT)
    return ""


def parse_node(obj: object) -> NodeObservation | None:
    """The stored fields of a Node object; None for something without a name."""
    if not isinstance(obj, dict):
        return None
    reader = _Reader()
    metadata = _mapping(obj.get("metadata"))
    name = reader.text(metadata.get("name"), MAX_NAME_LENGTH)
    if not name:
        return None
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    conditions = _items(status.get("conditions"), reader)
    return NodeObservation(
        name=name,
        uid=reader.text(metadata.get("uid"), MAX_SHORT_TEXT),
        resource_version=reader.text(metadata.get("resourceVersion"), MAX_SHORT_TEXT),
        labels=_labels(metadata.get("labels"), reader),
        created_at=parse_time(metadata.get("creationTimestamp")),
        provider_id=reader.text(spec.get("providerID"), MAX_PROVIDER_ID_LENGTH),
        # Only a JSON true cordons: "false" as a string must not read as true.
        unschedulable=spec.get("unschedulable") is True,
        taints=_taints(spec.get("taints"), reader),
        conditions=_conditions(conditions, reader),
        # Its strings were counted once already, by _conditions.
        ready=_ready(conditions, _Reader()),
        kubelet_version=reader.text(
            _mapping(status.get("nodeInfo")).get("kubeletVersion"), MAX_SHORT_TEXT
        ),
        internal_address=_internal_address(_items(status.get("addresses"), reader), reader),
        cleaned=reader.cleaned,
        cut=reader.cut,
    )
