"""Reading NKS's loosely typed JSON into the client's dataclasses, surviving the guide's quirks.

The guide mixes "True"/true, "10"/10, null, several timestamp styles, dotted keys and nested
objects, and an example that is not even JSON (``docs/nks-api.md``, "Quirks"). The readers
here return None for what they cannot read instead of failing: one odd field must not hide a
cluster from the dashboard. Only an answer without a uuid is refused (:class:`ShapeError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from django.utils.translation import gettext

from nks.client.types import (
    AutoscaleSettings,
    Cluster,
    ClusterEvent,
    HealthReport,
    Nodegroup,
    NodegroupHealth,
)
from nks.enums import EventState, Freshness, OperationPhase


def as_text(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def as_int(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if re.fullmatch(r"[+-]?\d+\.0*", text):
            return int(float(text))
    return None


_TRUE_WORDS = frozenset({"true", "yes", "1", "on"})
_FALSE_WORDS = frozenset({"false", "no", "0", "off"})


def as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return {0: False, 1: True}.get(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def as_datetime(value: Any) -> datetime | None:
    """Parse ``2021-08-05T01:48:39+00:00``, ``...Z`` or a naive UTC time; anything else is None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    # NKS documents its times as UTC; a time without an offset is UTC, not local time.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _as_labels(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    labels: dict[str, str] = {}
    for key, item in value.items():
        text = as_text(item)
        if text is not None:
            labels[str(key)] = text
    return labels


def _as_string_tuple(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(text for text in (as_text(item) for item in value) if text is not None)


_NODEGROUP_STATUS_PREFIX = "nodegroup.node_status."
_NODEGROUP_STATS_PREFIX = "nodegroup-stats."
_NODE_READY_SUFFIX = ".Ready"


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    # The guide writes keys with dots; some answers nest them instead. Flattening the nested form
    # into the dotted one lets one reader handle both (and any mix of them).
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping):
            flat.update(_flatten(item, f"{name}."))
        else:
            flat[name] = item
    return flat


def _parse_ready_counts(value: Any) -> tuple[int | None, int | None]:
    text = as_text(value)
    if text is None:
        return None, None
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        return None, None
    return int(match.group(1)), int(match.group(2))


def _classify_api(api: str | None, api_status: str | None) -> bool | None:
    verdicts: set[bool] = set()
    if api is not None:
        verdict = {"OK": True, "NOT_OK": False}.get(api.strip().upper())
        if verdict is not None:
            verdicts.add(verdict)
    if api_status is not None:
        verdict = {"NORMAL": True, "K8S_API_NOT_WORKING": False}.get(api_status.strip().upper())
        if verdict is not None:
            verdicts.add(verdict)
    if not verdicts:
        return None
    # Any sign of a broken API wins: a false alarm costs less than a missed outage.
    return False not in verdicts


def parse_health(health_status: Any, reason: Any) -> HealthReport:
    raw_status = as_text(health_status)
    problem: str | None = None
    if isinstance(reason, str):
        # The guide's single-cluster example is not even valid JSON; an answer might also carry
        # the object encoded as a string. Decode it if we can, otherwise record it as unreadable.
        try:
            decoded = orjson.loads(reason)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict):
            reason = decoded
        else:
            problem = gettext("health_status_reason is a string that is not a JSON object")
            reason = {}
    elif reason is None:
        problem = gettext("health_status_reason is missing")
        reason = {}
    elif not isinstance(reason, Mapping):
        problem = gettext("health_status_reason is a %(type)s, not an object") % {
            "type": type(reason).__name__
        }
        reason = {}

    flat = _flatten(reason)
    api = as_text(flat.get("api"))
    api_status = as_text(flat.get("cluster.api_status"))

    node_statuses: dict[str, str | None] = {}
    counts: dict[str, tuple[int | None, int | None]] = {}
    nodes_ready: dict[str, bool | None] = {}
    for key, value in flat.items():
        if key.startswith(_NODEGROUP_STATUS_PREFIX):
            node_statuses[key.removeprefix(_NODEGROUP_STATUS_PREFIX)] = as_text(value)
        elif key.startswith(_NODEGROUP_STATS_PREFIX):
            counts[key.removeprefix(_NODEGROUP_STATS_PREFIX)] = _parse_ready_counts(value)
        elif key.endswith(_NODE_READY_SUFFIX) and len(key) > len(_NODE_READY_SUFFIX):
            nodes_ready[key.removesuffix(_NODE_READY_SUFFIX)] = as_bool(value)

    nodegroups = {
        name: NodegroupHealth(
            name=name,
            node_status=node_statuses.get(name),
            ready=counts.get(name, (None, None))[0],
            not_ready=counts.get(name, (None, None))[1],
        )
        for name in sorted(node_statuses.keys() | counts.keys())
    }
    return HealthReport(
        health_status=raw_status,
        freshness=Freshness.classify(raw_status),
        timestamp=as_datetime(flat.get("timestamp")),
        api=api,
        api_status=api_status,
        api_ok=_classify_api(api, api_status),
        node_status=as_text(flat.get("cluster.node_status")),
        nodegroups=nodegroups,
        nodes_ready=nodes_ready,
        problem=problem,
    )


class ShapeError(ValueError):
    """The JSON parsed but is not shaped like an NKS answer."""


def _require_uuid(data: Mapping[str, Any], what: str) -> str:
    uuid = as_text(data.get("uuid"))
    if not uuid:
        raise ShapeError(f"{what} without a uuid")
    return uuid


def parse_cluster(data: Mapping[str, Any], *, detailed: bool) -> Cluster:
    uuid = _require_uuid(data, "a cluster")
    labels = _as_labels(data.get("labels"))
    status = as_text(data.get("status"))
    return Cluster(
        uuid=uuid,
        name=as_text(data.get("name")) or uuid,
        status=status,
        phase=OperationPhase.classify(status),
        status_reason=as_text(data.get("status_reason")),
        health=parse_health(data.get("health_status"), data.get("health_status_reason")),
        node_count=as_int(data.get("node_count")),
        flavor_id=as_text(data.get("flavor_id")),
        keypair=as_text(data.get("keypair")),
        stack_id=as_text(data.get("stack_id")),
        labels=labels,
        kube_tag=labels.get("kube_tag") or as_text(data.get("coe_version")),
        availability_zone=labels.get("availability_zone") or None,
        detailed=detailed,
        api_address=as_text(data.get("api_address")),
        project_id=as_text(data.get("project_id")),
        fixed_network=as_text(data.get("fixed_network")),
        fixed_subnet=as_text(data.get("fixed_subnet")),
        node_addresses=_as_string_tuple(data.get("node_addresses")),
        platform_version=labels.get("platform_version"),
        kube_version_status=labels.get("kube_version_status"),
        created_at=as_datetime(data.get("created_at")),
        updated_at=as_datetime(data.get("updated_at")),
    )


def parse_autoscale(data: Mapping[str, Any]) -> AutoscaleSettings:
    return AutoscaleSettings(
        enabled=as_bool(data.get("ca_enable")),
        min_node_count=as_int(data.get("ca_min_node_count")),
        max_node_count=as_int(data.get("ca_max_node_count")),
        pod_replicas=as_int(data.get("ca_pod_replicas")),
        scale_down_enabled=as_bool(data.get("ca_scale_down_enable")),
        scale_down_unneeded_time=as_int(data.get("ca_scale_down_unneeded_time")),
        scale_down_util_thresh=as_int(data.get("ca_scale_down_util_thresh")),
        scale_down_delay_after_add=as_int(data.get("ca_scale_down_delay_after_add")),
    )


def parse_nodegroup(data: Mapping[str, Any], *, detailed: bool) -> Nodegroup:
    uuid = _require_uuid(data, "a nodegroup")
    labels = _as_labels(data.get("labels"))
    status = as_text(data.get("status"))
    return Nodegroup(
        uuid=uuid,
        name=as_text(data.get("name")) or uuid,
        cluster_uuid=as_text(data.get("cluster_id")),
        role=as_text(data.get("role")),
        status=status,
        phase=OperationPhase.classify(status),
        status_reason=as_text(data.get("status_reason")),
        node_count=as_int(data.get("node_count")),
        min_node_count=as_int(data.get("min_node_count")),
        max_node_count=as_int(data.get("max_node_count")),
        flavor_id=as_text(data.get("flavor_id")),
        image_id=as_text(data.get("image_id")),
        stack_id=as_text(data.get("stack_id")),
        is_default=as_bool(data.get("is_default")) is True,
        node_addresses=_as_string_tuple(data.get("node_addresses")),
        labels=labels,
        autoscale=parse_autoscale(labels),
        kube_tag=labels.get("kube_tag"),
        detailed=detailed,
        created_at=as_datetime(data.get("created_at")),
        updated_at=as_datetime(data.get("updated_at")),
    )


def parse_event(data: Mapping[str, Any]) -> ClusterEvent:
    uuid = _require_uuid(data, "an event")
    raw_state = as_text(data.get("state"))
    details = data.get("details")
    if details is not None and not isinstance(details, str):
        details = orjson.dumps(details).decode()
    return ClusterEvent(
        id=as_int(data.get("id")),
        uuid=uuid,
        cluster_uuid=as_text(data.get("cluster_uuid")),
        cluster_name=as_text(data.get("cluster_name")),
        resource_uuid=as_text(data.get("resource_uuid")),
        resource_name=as_text(data.get("resource_name")),
        resource_type=as_text(data.get("resource_type")),
        type=as_text(data.get("type")),
        raw_state=raw_state,
        state=EventState.classify(raw_state),
        contents=as_text(data.get("contents")),
        details=details,
        created_at=as_datetime(data.get("created_at")),
        updated_at=as_datetime(data.get("updated_at")),
    )


def event_sort_key(event: ClusterEvent) -> tuple[float, int]:
    created = event.created_at.timestamp() if event.created_at else float("-inf")
    return (created, event.id if event.id is not None else -1)
