"""The v1 Node's spec and status as a 1.24 apiserver decodes, validates and writes them.

Fields are rebuilt in the Go structs' order, unknown fields are dropped, `null` means absent,
and a wrong JSON type is a 400. Parts of the status this fake never looks into (capacity,
images, volumes, config) are kept as sent once their outer type is right. Only what the
apiserver checks for Nodes is validated (taint effects and keys, the providerID rule).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from fakes.kube import errors
from fakes.kube.errors import FieldError

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
# NodeSystemInfo: every field is a plain Go string, written even when empty.
NODE_INFO_FIELDS = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)


class _Decoder:
    """Type checks with the decoder's 400 wording, for one kind, version and part."""

    def __init__(self, version: str, *, python_values: bool) -> None:
        self.version = version
        self.python_values = python_values

    def fail(self, why: str) -> errors.ApiError:
        return errors.bad_request(
            f'Node in version "{self.version}" cannot be handled as a Node: {why}'
        )

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(f"{path}: expected object, got {type(value).__name__}")
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(f"{path}: expected array, got {type(value).__name__}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(f"{path}: expected string, got {type(value).__name__}")
        return value

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(f"{path}: expected bool, got {type(value).__name__}")
        return value

    def int32(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**31:
            raise self.fail(f"{path}: expected int32, got {value!r}")
        return value

    def time(self, value: Any, path: str) -> str:
        """metav1.Time: RFC 3339 with whole seconds, in UTC."""
        accepted = (str, datetime, int, float) if self.python_values else (str,)
        if isinstance(value, bool) or not isinstance(value, accepted):
            raise self.fail(f"{path}: expected a Time, got {type(value).__name__}")
        try:
            return format_node_time(value)
        except ValueError as error:
            raise self.fail(f"{path}: {error}") from None


def format_node_time(value: str | datetime | float) -> str:
    """Any accepted spelling of a metav1.Time, written the way the apiserver writes it."""
    if isinstance(value, int | float):
        moment = datetime.fromtimestamp(value, UTC)
    elif isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(f"time {value!r} has no time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _string_map(decoder: _Decoder, value: Any, path: str) -> dict[str, Any]:
    mapping = decoder.mapping(value, path)
    return {key: decoder.string(item, f"{path}.{key}") for key, item in mapping.items()}


def _object_list(
    decoder: _Decoder,
    value: Any,
    path: str,
    clean: Callable[[Mapping[str, Any], str], dict[str, Any]],
) -> list[dict[str, Any]]:
    return [
        clean(decoder.mapping(item, f"{path}[{index}]"), f"{path}[{index}]")
        for index, item in enumerate(decoder.items(value, path))
    ]


def clean_node_spec(spec: Any, version: str, *, python_values: bool = False) -> dict[str, Any]:
    """NodeSpec: podCIDR, podCIDRs, providerID, unschedulable, taints, configSource,
    externalID; every field omitempty, so `unschedulable: false` is not written."""
    decoder = _Decoder(version, python_values=python_values)
    source = decoder.mapping(spec if spec is not None else {}, "spec")

    def taint(item: Mapping[str, Any], path: str) -> dict[str, Any]:
        cleaned: dict[str, Any] = {"key": decoder.string(item.get("key") or "", f"{path}.key")}
        if item.get("value"):
            cleaned["value"] = decoder.string(item["value"], f"{path}.value")
        cleaned["effect"] = decoder.string(item.get("effect") or "", f"{path}.effect")
        if item.get("timeAdded") is not None:
            cleaned["timeAdded"] = decoder.time(item["timeAdded"], f"{path}.timeAdded")
        return cleaned

    cleaned: dict[str, Any] = {}
    if source.get("podCIDR"):
        cleaned["podCIDR"] = decoder.string(source["podCIDR"], "spec.podCIDR")
    if source.get("podCIDRs"):
        cleaned["podCIDRs"] = [
            decoder.string(cidr, "spec.podCIDRs")
            for cidr in decoder.items(source["podCIDRs"], "spec.podCIDRs")
        ]
    if source.get("providerID"):
        cleaned["providerID"] = decoder.string(source["providerID"], "spec.providerID")
    if source.get("unschedulable") is not None and decoder.boolean(
        source["unschedulable"], "spec.unschedulable"
    ):
        cleaned["unschedulable"] = True
    if source.get("taints"):
        cleaned["taints"] = _object_list(decoder, source["taints"], "spec.taints", taint)
    if source.get("configSource"):
        cleaned["configSource"] = dict(decoder.mapping(source["configSource"], "spec.configSource"))
    if source.get("externalID"):
        cleaned["externalID"] = decoder.string(source["externalID"], "spec.externalID")
    return cleaned


def clean_node_status(status: Any, version: str, *, python_values: bool = False) -> dict[str, Any]:
    """NodeStatus; daemonEndpoints and nodeInfo are Go structs, so always written."""
    decoder = _Decoder(version, python_values=python_values)
    source = decoder.mapping(status if status is not None else {}, "status")

    def condition(item: Mapping[str, Any], path: str) -> dict[str, Any]:
        cleaned: dict[str, Any] = {
            "type": decoder.string(item.get("type") or "", f"{path}.type"),
            "status": decoder.string(item.get("status") or "", f"{path}.status"),
        }
        # metav1.Time is a struct: a zero time is written as null, never left out.
        for key in ("lastHeartbeatTime", "lastTransitionTime"):
            value = item.get(key)
            cleaned[key] = None if value is None else decoder.time(value, f"{path}.{key}")
        for key in ("reason", "message"):
            if item.get(key):
                cleaned[key] = decoder.string(item[key], f"{path}.{key}")
        return cleaned

    def address(item: Mapping[str, Any], path: str) -> dict[str, Any]:
        return {
            "type": decoder.string(item.get("type") or "", f"{path}.type"),
            "address": decoder.string(item.get("address") or "", f"{path}.address"),
        }

    cleaned: dict[str, Any] = {}
    for key in ("capacity", "allocatable"):
        if source.get(key):
            cleaned[key] = _string_map(decoder, source[key], f"status.{key}")
    if source.get("phase"):
        cleaned["phase"] = decoder.string(source["phase"], "status.phase")
    if source.get("conditions"):
        cleaned["conditions"] = _object_list(
            decoder, source["conditions"], "status.conditions", condition
        )
    if source.get("addresses"):
        cleaned["addresses"] = _object_list(
            decoder, source["addresses"], "status.addresses", address
        )
    endpoints = decoder.mapping(source.get("daemonEndpoints") or {}, "status.daemonEndpoints")
    kubelet = decoder.mapping(
        endpoints.get("kubeletEndpoint") or {}, "status.daemonEndpoints.kubeletEndpoint"
    )
    port = kubelet.get("Port")
    cleaned["daemonEndpoints"] = {
        "kubeletEndpoint": {
            "Port": 0
            if port is None
            else decoder.int32(port, "status.daemonEndpoints.kubeletEndpoint.Port")
        }
    }
    info = decoder.mapping(source.get("nodeInfo") or {}, "status.nodeInfo")
    cleaned["nodeInfo"] = {
        key: decoder.string(info.get(key) or "", f"status.nodeInfo.{key}")
        for key in NODE_INFO_FIELDS
    }
    for key in ("images", "volumesInUse", "volumesAttached"):
        if source.get(key):
            cleaned[key] = list(decoder.items(source[key], f"status.{key}"))
    if source.get("config"):
        cleaned["config"] = dict(decoder.mapping(source["config"], "status.config"))
    return cleaned


_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_SUBDOMAIN_RULE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def _qualified_name_problems(value: str) -> list[str]:
    """IsQualifiedName's messages: an optional DNS-subdomain prefix, '/', a name part."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {_NAME_PART_RULE} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    problems = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            problems.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        elif not _DNS_SUBDOMAIN.match(prefix):
            problems.append(f"prefix part {_SUBDOMAIN_RULE}")
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME_PART.match(name):
        problems.append(f"name part {_NAME_PART_RULE}")
    return problems


def _go_taint(taint: Mapping[str, Any]) -> str:
    """A taint as Go's %#v prints core.Taint (the Duplicate message quotes it so)."""
    added = "<nil>" if taint.get("timeAdded") is None else "(*v1.Time)(0xc000a1e0c0)"
    return (
        f"core.Taint{{Key:{json.dumps(taint['key'])}, Value:{json.dumps(taint.get('value', ''))}, "
        f"Effect:{json.dumps(taint['effect'])}, TimeAdded:{added}}}"
    )


def _taint_problems(taints: list[Mapping[str, Any]]) -> list[FieldError]:
    # 1.24 reports taints under "metadata.taints", not "spec.taints" (its field path).
    problems: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        path = f"metadata.taints[{index}]"
        key, effect = taint["key"], taint["effect"]
        if not key:
            problems.append(errors.required_value(f"{path}.key"))
        for why in _qualified_name_problems(key) if key else []:
            problems.append(errors.invalid_value(f"{path}.key", key, why))
        if not effect:
            problems.append(errors.required_value(f"{path}.effect"))
        elif effect not in TAINT_EFFECTS:
            problems.append(errors.unsupported_value(f"{path}.effect", effect, TAINT_EFFECTS))
        if (key, effect) in seen:
            problems.append(
                errors.FieldError(
                    path,
                    "FieldValueDuplicate",
                    f"Duplicate value: {_go_taint(taint)}: taints must be unique by key and "
                    "effect pair",
                )
            )
        seen.add((key, effect))
    return problems


def admit_new_node(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The NodeTaint admission plugin: a new Node is tainted not-ready (NoSchedule) until
    the node lifecycle controller sees it Ready, whatever status it registers with."""
    taints = list(spec.get("taints", ()))
    if not any(t["key"] == NOT_READY_TAINT and t["effect"] == "NoSchedule" for t in taints):
        taints.append({"key": NOT_READY_TAINT, "effect": "NoSchedule"})
    return {**spec, "taints": taints}


def validate_node_spec(
    spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None
) -> list[FieldError]:
    """What ValidateNode (create) and ValidateNode + ValidateNodeUpdate (update) check in
    the spec. An update checks the taints twice, so its causes list each problem twice (the
    message names it once), as a 1.24 apiserver answers."""
    taint_problems = _taint_problems(list(spec.get("taints", ())))
    if old_spec is None:
        return taint_problems
    problems = list(taint_problems)
    old_id = old_spec.get("providerID", "")
    if old_id and spec.get("providerID", "") != old_id:
        problems.append(
            errors.forbidden_value(
                "spec.providerID",
                'node updates may not change providerID except from "" to valid',
            )
        )
    return problems + taint_problems
