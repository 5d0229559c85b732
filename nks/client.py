"""Client for the NKS (NHN Kubernetes Service) API v2 and the identity service behind its tokens.

This is the only module in the project that talks to NKS or to the identity service. It turns
the API's loosely typed JSON (see ``docs/nks-api.md``: the guide contradicts itself about types,
field shapes and enum values) into frozen dataclasses, and every failure into one error type,
:class:`NksError`, that says what went wrong in words and whether trying again can help.

Nothing here imports Django: the poller, the resize task, the demo and the benchmark build a
client from plain values.
"""

from __future__ import annotations

import enum
import http
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import httpx
import orjson

logger = logging.getLogger(__name__)

T = TypeVar("T")

API_VERSION_HEADER = "container-infra latest"
USER_AGENT = "lease-dashboard-nks-client/1.0"

# How much of a server's error text goes into an error message: enough to understand the
# failure, short enough to fit a table cell and an e-mail subject line.
EXCERPT_LIMIT = 200


# --------------------------------------------------------------------------------------------
# Classifications. The raw strings from NKS are always kept next to these: the guide's enums are
# incomplete (it documents FRESH/STALE/ROTTEN and its own examples answer "HEALTHY").
# --------------------------------------------------------------------------------------------


class _ClassifiedEnum(enum.StrEnum):
    """An enum whose members are the documented values, plus UNKNOWN for anything else."""

    @classmethod
    def classify(cls, raw: str | None) -> Self:
        if raw is None:
            return cls("UNKNOWN")
        try:
            return cls(raw.strip().upper())
        except ValueError:
            return cls("UNKNOWN")


class Freshness(_ClassifiedEnum):
    """How much the cluster's health data can be trusted (``health_status``).

    "HEALTHY" (the guide's own examples) is deliberately UNKNOWN, not FRESH: it says nothing
    about how old the data is, and silence must never be shown as health.
    """

    FRESH = "FRESH"
    STALE = "STALE"
    ROTTEN = "ROTTEN"
    UNKNOWN = "UNKNOWN"


class EventState(_ClassifiedEnum):
    """State of an NKS operation (an entry of ``/events``)."""

    SUCCESS = "SUCCESS"
    FAIL = "FAIL"
    IN_PROGRESS = "IN_PROGRESS"
    UNKNOWN = "UNKNOWN"


class OperationPhase(enum.StrEnum):
    """Phase of a Heat-style ``status`` such as ``UPDATE_IN_PROGRESS`` or ``CREATE_FAILED``."""

    IN_PROGRESS = "IN_PROGRESS"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def classify(cls, raw: str | None) -> OperationPhase:
        if not raw:
            return cls.UNKNOWN
        status = raw.strip().upper()
        if status.endswith("_IN_PROGRESS"):
            return cls.IN_PROGRESS
        if status.endswith("_COMPLETE"):
            return cls.COMPLETE
        if status.endswith("_FAILED"):
            return cls.FAILED
        return cls.UNKNOWN


class ErrorKind(enum.StrEnum):
    AUTH = "auth"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    BAD_RESPONSE = "bad_response"
    CONFLICT = "conflict"
    CLIENT = "client"


class NksError(Exception):
    """Any failure to get an answer from NKS or the identity service.

    ``retryable`` says whether the same call can succeed later without anyone changing anything.
    For a write it is only true when the request certainly never reached NKS: a resize whose
    fate is unknown must be checked (nodegroup status, events), not sent again.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None,
        kind: str,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.kind = ErrorKind(kind)
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.kind is ErrorKind.NOT_FOUND

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return (
            f"NksError(kind={self.kind.value!r}, status={self.status!r}, "
            f"retryable={self.retryable!r}, message={self.message!r})"
        )

    def __reduce__(self) -> tuple[Callable[..., NksError], tuple[Any, ...]]:
        # Keyword-only arguments defeat Exception's default pickling, and Celery pickles
        # exceptions raised by tasks.
        return (
            _rebuild_nks_error,
            (self.message, self.retryable, self.status, self.kind.value, self.retry_after),
        )


def _rebuild_nks_error(
    message: str, retryable: bool, status: int | None, kind: str, retry_after: float | None
) -> NksError:
    return NksError(message, retryable=retryable, status=status, kind=kind, retry_after=retry_after)


# --------------------------------------------------------------------------------------------
# Lenient readers: the guide mixes "True"/true, "10"/10, null, and several timestamp styles.
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodegroupHealth:
    """One worker nodegroup's line in ``health_status_reason``."""

    name: str
    node_status: str | None
    ready: int | None
    not_ready: int | None


@dataclass(frozen=True, slots=True)
class HealthReport:
    """``health_status`` and ``health_status_reason`` of a cluster, read defensively.

    Raw values are kept as NKS sent them; ``freshness`` and ``api_ok`` are the classified
    readings. ``problem`` explains why the reason could not be read (it was a string, garbage,
    or missing), in which case every field but ``health_status`` is unknown.
    """

    health_status: str | None
    freshness: Freshness
    timestamp: datetime | None
    api: str | None
    api_status: str | None
    api_ok: bool | None
    node_status: str | None
    nodegroups: dict[str, NodegroupHealth]
    nodes_ready: dict[str, bool | None]
    problem: str | None

    @property
    def all_nodes_ready(self) -> bool | None:
        """True or False when the report says so; None when it does not (stale, unknown)."""
        status = (self.node_status or "").upper()
        if status == "NORMAL":
            return True
        if status in {"NOT_READY_NODE_EXIST", "ALL_NODES_NOT_READY"}:
            return False
        if status:
            return None
        counts = [group.not_ready for group in self.nodegroups.values()]
        if counts and all(count is not None for count in counts):
            return not any(counts)
        readiness = list(self.nodes_ready.values())
        if readiness and all(ready is not None for ready in readiness):
            return all(readiness)
        if False in readiness:
            return False
        return None


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
            problem = "health_status_reason is a string that is not a JSON object"
            reason = {}
    elif reason is None:
        problem = "health_status_reason is missing"
        reason = {}
    elif not isinstance(reason, Mapping):
        problem = f"health_status_reason is a {type(reason).__name__}, not an object"
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


@dataclass(frozen=True, slots=True)
class Cluster:
    """A cluster from the list (``detailed`` False) or from its own page (``detailed`` True).

    Fields only the detail answer carries are None or empty on list results.
    """

    uuid: str
    name: str
    status: str | None
    phase: OperationPhase
    status_reason: str | None
    health: HealthReport
    node_count: int | None
    flavor_id: str | None
    keypair: str | None
    stack_id: str | None
    labels: dict[str, str]
    kube_tag: str | None
    availability_zone: str | None
    detailed: bool
    api_address: str | None
    project_id: str | None
    fixed_network: str | None
    fixed_subnet: str | None
    node_addresses: tuple[str, ...]
    platform_version: str | None
    kube_version_status: str | None
    created_at: datetime | None
    updated_at: datetime | None

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS


@dataclass(frozen=True, slots=True)
class AutoscaleSettings:
    """Cluster-autoscaler settings, from ``/autoscale`` or from a nodegroup's ``ca_*`` labels."""

    enabled: bool | None
    min_node_count: int | None
    max_node_count: int | None
    pod_replicas: int | None
    scale_down_enabled: bool | None
    scale_down_unneeded_time: int | None
    scale_down_util_thresh: int | None
    scale_down_delay_after_add: int | None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            enabled=as_bool(data.get("ca_enable")),
            min_node_count=as_int(data.get("ca_min_node_count")),
            max_node_count=as_int(data.get("ca_max_node_count")),
            pod_replicas=as_int(data.get("ca_pod_replicas")),
            scale_down_enabled=as_bool(data.get("ca_scale_down_enable")),
            scale_down_unneeded_time=as_int(data.get("ca_scale_down_unneeded_time")),
            scale_down_util_thresh=as_int(data.get("ca_scale_down_util_thresh")),
            scale_down_delay_after_add=as_int(data.get("ca_scale_down_delay_after_add")),
        )


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One node of a nodegroup, from the optional ``nodes`` list of a nodegroup's detail.

    The guide's nodegroup answer lists only ``node_addresses`` (IPs); the node instance UUIDs
    that ``nodes_to_remove`` takes are what the Compute API shows for the nodegroup's
    instances. Answers that carry ``nodes: [{"uuid", "name", "address"}]`` (the fake NKS does)
    let the dashboard offer the nodes by name; without it no node can be chosen.
    """

    uuid: str
    name: str | None
    address: str | None


@dataclass(frozen=True, slots=True)
class Nodegroup:
    """A nodegroup from the list (``detailed`` False) or from its own page (``detailed`` True).

    ``autoscale`` is read from the ``ca_*`` labels, which only the detail answer carries.
    ``nodes`` is empty unless the answer carried the optional ``nodes`` list (see NodeInfo).
    """

    uuid: str
    name: str
    cluster_uuid: str | None
    role: str | None
    status: str | None
    phase: OperationPhase
    status_reason: str | None
    node_count: int | None
    min_node_count: int | None
    max_node_count: int | None
    flavor_id: str | None
    image_id: str | None
    stack_id: str | None
    is_default: bool
    node_addresses: tuple[str, ...]
    labels: dict[str, str]
    autoscale: AutoscaleSettings
    kube_tag: str | None
    detailed: bool
    created_at: datetime | None
    updated_at: datetime | None
    nodes: tuple[NodeInfo, ...] = ()

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS

    @property
    def is_worker(self) -> bool:
        return (self.role or "").lower() == "worker"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    """One entry of a cluster's operation history."""

    id: int | None
    uuid: str
    cluster_uuid: str | None
    cluster_name: str | None
    resource_uuid: str | None
    resource_name: str | None
    resource_type: str | None
    type: str | None
    raw_state: str | None
    state: EventState
    contents: str | None
    details: str | None
    created_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True, slots=True)
class Supports:
    supported_k8s: dict[str, bool | None]
    event_types: dict[str, str]

    @property
    def supported_versions(self) -> list[str]:
        return [version for version, supported in self.supported_k8s.items() if supported]


@dataclass(frozen=True, slots=True)
class ResizeAccepted:
    """NKS accepted a resize; progress shows in the nodegroup's status and in the events.

    ``cluster_uuid`` is None when NKS accepted without saying which cluster (it is logged).
    """

    cluster_uuid: str | None


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds allowed for each stage of one HTTP call."""

    connect: float = 5.0
    read: float = 20.0
    write: float = 20.0
    pool: float = 10.0


class _ShapeError(ValueError):
    """The JSON parsed but is not shaped like an NKS answer."""


def _require_uuid(data: Mapping[str, Any], what: str) -> str:
    uuid = as_text(data.get("uuid"))
    if not uuid:
        raise _ShapeError(f"{what} without a uuid")
    return uuid


def _parse_cluster(data: Mapping[str, Any], *, detailed: bool) -> Cluster:
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


def _parse_nodegroup(data: Mapping[str, Any], *, detailed: bool) -> Nodegroup:
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
        autoscale=AutoscaleSettings.from_mapping(labels),
        kube_tag=labels.get("kube_tag"),
        detailed=detailed,
        created_at=as_datetime(data.get("created_at")),
        updated_at=as_datetime(data.get("updated_at")),
        nodes=_parse_nodes(data.get("nodes")),
    )


def _parse_nodes(value: Any) -> tuple[NodeInfo, ...]:
    if not isinstance(value, list):
        return ()
    nodes: list[NodeInfo] = []
    for item in value:
        if not isinstance(item, Mapping):
            continue
        uuid = as_text(item.get("uuid"))
        if uuid:
            nodes.append(
                NodeInfo(
                    uuid=uuid, name=as_text(item.get("name")), address=as_text(item.get("address"))
                )
            )
    return tuple(nodes)


def _parse_event(data: Mapping[str, Any]) -> ClusterEvent:
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


def _event_sort_key(event: ClusterEvent) -> tuple[float, int]:
    created = event.created_at.timestamp() if event.created_at else float("-inf")
    return (created, event.id if event.id is not None else -1)


def _parse_supports(data: Mapping[str, Any]) -> Supports:
    versions = data.get("supported_k8s")
    supported = (
        {str(version): as_bool(flag) for version, flag in versions.items()}
        if isinstance(versions, Mapping)
        else {}
    )
    event_types: dict[str, str] = {}
    raw_types = data.get("supported_event_type")
    if isinstance(raw_types, Mapping):
        # The table groups types by kind (cluster_events/nodegroup_events); the example is flat.
        for name, description in _flatten(raw_types).items():
            event_types[name.rsplit(".", 1)[-1]] = as_text(description) or ""
    return Supports(supported_k8s=supported, event_types=event_types)


# --------------------------------------------------------------------------------------------
# Error text
# --------------------------------------------------------------------------------------------

_HTML_DROP = re.compile(r"(?is)<(script|style)\b.*?</\1\s*>")
_HTML_TAG = re.compile(r"(?s)<[^>]*>")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_WHITESPACE = re.compile(r"\s+")


def _reason_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "(non-standard status)"


def _looks_like_html(response: httpx.Response) -> bool:
    if "html" in response.headers.get("content-type", "").lower():
        return True
    return response.content.lstrip()[:1] == b"<"


def _message_from_json(data: Any) -> str | None:
    """Find the human message in the error shapes OpenStack services use."""
    if isinstance(data, str):
        return data
    if not isinstance(data, Mapping):
        return None
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        # Magnum (the API NKS is built on): {"errors": [{"title", "detail", "code", ...}]}
        first = errors[0]
        return as_text(first.get("detail")) or as_text(first.get("title"))
    error = data.get("error")
    if isinstance(error, Mapping):
        # Keystone: {"error": {"message", "code", "title"}}
        return as_text(error.get("message")) or as_text(error.get("title"))
    if isinstance(error, str):
        return error
    for key in ("message", "detail", "faultstring", "title", "error_message"):
        text = as_text(data.get(key))
        if text:
            return text
    # webob's {"badRequest": {"message": ...}} style
    if len(data) == 1:
        inner = next(iter(data.values()))
        if isinstance(inner, Mapping):
            return as_text(inner.get("message"))
    return None


def _text_excerpt(text: str) -> str:
    text = _HTML_DROP.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _CONTROL.sub(" ", text)
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > EXCERPT_LIMIT:
        text = text[: EXCERPT_LIMIT - 1].rstrip() + "…"
    return text


def _server_excerpt(response: httpx.Response) -> str:
    body = response.content
    if not body.strip():
        return ""
    if not _looks_like_html(response):
        try:
            message = _message_from_json(orjson.loads(body))
        except orjson.JSONDecodeError:
            message = None
        if message:
            return _text_excerpt(message)
    html_title = re.search(rb"(?is)<title[^>]*>(.*?)</title>", body)
    if html_title:
        return _text_excerpt(html_title.group(1).decode("utf-8", "replace"))
    return _text_excerpt(body[: EXCERPT_LIMIT * 8].decode("utf-8", "replace"))


def _parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds)


# Defence in depth for secrets echoed back under their usual names, whatever their value.
_TOKEN_HEADER_VALUE = re.compile(r"(?i)(x-auth-token[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+")
_PASSWORD_VALUE = re.compile(r"(?i)(password[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+")
REMEMBERED_TOKENS = 8

_UNCERTAIN_WRITE = (
    "the request may or may not have been applied; check the nodegroup status and the cluster's "
    "events before trying again"
)


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    # Epoch seconds after which we ask for a new token; None for a configured token.
    renew_at: float | None


class NksClient:
    """One NKS account: a base URL, a token source, and a pooled HTTP connection set.

    Thread-safe: the snapshot fetcher shares one client between its worker threads.
    Reads are retried on transient failures (429, 5xx, timeouts, dropped connections, mangled
    200 bodies); writes are sent exactly once.
    """

    def __init__(
        self,
        api_url: str,
        *,
        token: str | None = None,
        identity_url: str | None = None,
        tenant_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: Timeouts | float | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_retry_after: float = 30.0,
        max_connections: int = 32,
    ) -> None:
        has_credentials = all((identity_url, tenant_id, username, password))
        if not token and not has_credentials:
            raise ValueError(
                "NksClient needs either token= or all of identity_url=, tenant_id=, username= "
                "and password="
            )
        if token and any((identity_url, username, password)):
            # Which one wins would be a guess; a misconfiguration should fail at start-up.
            raise ValueError("NksClient takes token= or identity credentials, not both")
        if retries < 0 or backoff < 0 or max_connections < 1:
            raise ValueError("retries and backoff must be >= 0 and max_connections >= 1")
        self.api_url = api_url.rstrip("/")
        self.identity_url = identity_url.rstrip("/") if identity_url else None
        self.tenant_id = tenant_id
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.max_connections = max_connections
        self._username = username
        self._password = password
        self._fixed_token = token
        self._token: _Token | None = _Token(token, renew_at=None) if token else None
        # The last few tokens issued, for redaction. Replaced whole (never mutated), so readers
        # need no lock.
        self._tokens_used: tuple[str, ...] = ()
        self._token_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._request_count = 0
        if timeout is None:
            timeouts = Timeouts()
        elif isinstance(timeout, Timeouts):
            timeouts = timeout
        else:
            timeouts = Timeouts(connect=timeout, read=timeout, write=timeout, pool=timeout)
        self.timeouts = timeouts
        self._http = httpx.Client(
            base_url=self.api_url,
            timeout=httpx.Timeout(
                connect=timeouts.connect,
                read=timeouts.read,
                write=timeouts.write,
                pool=timeouts.pool,
            ),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=30.0,
            ),
            headers={"User-Agent": USER_AGENT},
            # A redirect from an API is a misconfiguration (http vs https, wrong region); following
            # it could also carry the token to another host.
            follow_redirects=False,
        )

    def __repr__(self) -> str:
        source = "fixed token" if self._fixed_token else f"identity {self.identity_url}"
        return f"<NksClient {self.api_url} ({source})>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def request_count(self) -> int:
        """HTTP requests sent so far, retries and identity calls included."""
        with self._count_lock:
            return self._request_count

    # ---- reads --------------------------------------------------------------------------

    def list_clusters(self) -> list[Cluster]:
        return self._parse_items(
            self._read("/v1/clusters"),
            "clusters",
            "/v1/clusters",
            lambda data: _parse_cluster(data, detailed=False),
        )

    def get_cluster(self, cluster: str) -> Cluster:
        path = f"/v1/clusters/{_segment(cluster)}"
        return self._parse_one(self._read(path), path, lambda d: _parse_cluster(d, detailed=True))

    def list_nodegroups(self, cluster: str) -> list[Nodegroup]:
        path = f"/v1/clusters/{_segment(cluster)}/nodegroups"
        return self._parse_items(
            self._read(path),
            "nodegroups",
            path,
            lambda data: _parse_nodegroup(data, detailed=False),
        )

    def get_nodegroup(self, cluster: str, nodegroup: str) -> Nodegroup:
        path = f"/v1/clusters/{_segment(cluster)}/nodegroups/{_segment(nodegroup)}"
        return self._parse_one(self._read(path), path, lambda d: _parse_nodegroup(d, detailed=True))

    def get_autoscale(self, cluster: str, nodegroup: str) -> AutoscaleSettings:
        path = f"/v1/clusters/{_segment(cluster)}/nodegroups/{_segment(nodegroup)}/autoscale"
        return AutoscaleSettings.from_mapping(self._read(path))

    def list_events(self, cluster_uuid: str) -> list[ClusterEvent]:
        """The cluster's operations, newest first (NKS does not promise an order)."""
        path = f"/v1/clusters/{_segment(cluster_uuid)}/events"
        events = self._parse_items(self._read(path), "events", path, _parse_event)
        return sorted(events, key=_event_sort_key, reverse=True)

    def get_event(self, cluster_uuid: str, event_uuid: str) -> ClusterEvent:
        path = f"/v1/clusters/{_segment(cluster_uuid)}/events/{_segment(event_uuid)}"
        return self._parse_one(self._read(path), path, _parse_event)

    def get_supports(self) -> Supports:
        return _parse_supports(self._read("/v1/supports"))

    def get_kubeconfig(self, cluster: str) -> str:
        path = f"/v1/clusters/{_segment(cluster)}/config"
        config = self._read(path).get("config")
        if not isinstance(config, str) or not config.strip():
            raise NksError(
                f"NKS answered GET {path} without a kubeconfig in the 'config' field",
                retryable=False,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            )
        return config

    # ---- writes -------------------------------------------------------------------------

    def resize(
        self,
        cluster: str,
        nodegroup: str,
        node_count: int,
        nodes_to_remove: Sequence[str] | None = None,
    ) -> ResizeAccepted:
        """Ask NKS to resize a nodegroup. Sent once; never retried (see :class:`NksError`).

        The range of ``node_count`` is left to NKS to check: the upper bound is a quota.
        """
        if isinstance(node_count, bool) or not isinstance(node_count, int):
            raise TypeError(f"node_count must be an int, not {type(node_count).__name__}")
        body: dict[str, Any] = {"nodegroup": nodegroup, "node_count": node_count}
        if nodes_to_remove:
            body["nodes_to_remove"] = list(nodes_to_remove)
        path = f"/v1/clusters/{_segment(cluster)}/actions/resize"
        answer = self._request("POST", path, json_body=body, idempotent=False)
        cluster_uuid = as_text(answer.get("uuid")) if isinstance(answer, Mapping) else None
        if cluster_uuid is None:
            logger.warning("NKS accepted POST %s without naming the cluster in its answer", path)
        return ResizeAccepted(cluster_uuid=cluster_uuid)

    # ---- parsing helpers ----------------------------------------------------------------

    def _parse_items(
        self,
        body: Mapping[str, Any],
        key: str,
        path: str,
        parse: Callable[[Mapping[str, Any]], T],
    ) -> list[T]:
        items = body.get(key)
        if not isinstance(items, list):
            raise NksError(
                f"NKS answered GET {path} without a '{key}' list",
                retryable=True,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            )
        parsed: list[T] = []
        for index, item in enumerate(items):
            # One malformed entry must not hide every other cluster from the dashboard.
            if not isinstance(item, Mapping):
                logger.warning("Skipping %s[%d] from GET %s: not an object", key, index, path)
                continue
            try:
                parsed.append(parse(item))
            except _ShapeError as exc:
                logger.warning("Skipping %s[%d] from GET %s: %s", key, index, path, exc)
        return parsed

    def _parse_one(
        self, body: Mapping[str, Any], path: str, parse: Callable[[Mapping[str, Any]], T]
    ) -> T:
        try:
            return parse(body)
        except _ShapeError as exc:
            raise NksError(
                f"NKS answered GET {path} with {exc}",
                retryable=False,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            ) from None

    # ---- transport ----------------------------------------------------------------------

    def _read(self, path: str) -> dict[str, Any]:
        return self._request("GET", path, json_body=None, idempotent=True)

    def _count_request(self) -> None:
        with self._count_lock:
            self._request_count += 1

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Mapping[str, Any] | None,
        idempotent: bool,
    ) -> dict[str, Any]:
        attempt = 0
        renewed_after_rejection = False
        while True:
            token = self._current_token()
            headers = {
                "Accept": "application/json",
                "Content-Type": "application/json",
                "OpenStack-API-Version": API_VERSION_HEADER,
                "X-Auth-Token": token,
            }
            content = orjson.dumps(json_body) if json_body is not None else None
            self._count_request()
            try:
                response = self._http.request(method, path, headers=headers, content=content)
            except httpx.RequestError as exc:
                error = self._transport_error(method, path, exc, idempotent=idempotent)
            else:
                if (
                    response.status_code == http.HTTPStatus.UNAUTHORIZED
                    and not renewed_after_rejection
                    and self._fixed_token is None
                ):
                    # A 401 is decided before NKS acts on a request, so sending it again with a
                    # fresh token is safe even for a write.
                    renewed_after_rejection = True
                    logger.info("NKS rejected the token for %s %s; getting a new one", method, path)
                    self._renew_rejected_token(token)
                    continue
                try:
                    return self._decode(method, path, response, idempotent=idempotent)
                except NksError as exc:
                    error = exc
            delay = self._retry_delay(attempt, error) if idempotent else None
            if delay is None:
                raise error
            attempt += 1
            logger.warning(
                "Retrying %s %s in %.2f s (attempt %d of %d): %s",
                method,
                path,
                delay,
                attempt + 1,
                self.retries + 1,
                error.message,
            )
            time.sleep(delay)

    def _retry_delay(self, attempt: int, error: NksError) -> float | None:
        if not error.retryable or attempt >= self.retries:
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                # NKS asks for a long pause: let the caller (a Celery retry) wait, not a thread.
                return None
            return error.retry_after
        ceiling = min(self.max_backoff, self.backoff * (2**attempt))
        # Jitter keeps a fleet of pollers that failed together from retrying in lockstep.
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - not cryptographic

    def _transport_error(
        self, method: str, path: str, exc: httpx.RequestError, *, idempotent: bool
    ) -> NksError:
        detail = self._redact(_text_excerpt(str(exc))) or type(exc).__name__
        if isinstance(exc, httpx.DecodingError):
            # A 2xx whose compressed body is corrupt: the same ambiguity as a mangled JSON body.
            return NksError(
                f"NKS answered {method} {path} with a body that could not be decoded: {detail}"
                + ("" if idempotent else f"; {_UNCERTAIN_WRITE}"),
                retryable=idempotent,
                status=None,
                kind=ErrorKind.BAD_RESPONSE,
            )
        # Connect failures never reached NKS; anything later may have, which matters for writes.
        never_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
        retryable = idempotent or never_sent
        suffix = "" if retryable else f"; {_UNCERTAIN_WRITE}"
        host = urlsplit(self.api_url).netloc
        if isinstance(exc, httpx.TimeoutException):
            stage = {
                httpx.ConnectTimeout: ("connecting", self.timeouts.connect),
                httpx.ReadTimeout: ("waiting for the answer", self.timeouts.read),
                httpx.WriteTimeout: ("sending the request", self.timeouts.write),
                httpx.PoolTimeout: ("waiting for a free connection", self.timeouts.pool),
            }.get(type(exc), ("waiting", self.timeouts.read))
            return NksError(
                f"NKS at {host} timed out {stage[0]} for {method} {path} "
                f"(limit {stage[1]:g} s){suffix}",
                retryable=retryable,
                status=None,
                kind=ErrorKind.TIMEOUT,
            )
        return NksError(
            f"Could not talk to NKS at {host} for {method} {path}: {detail}{suffix}",
            retryable=retryable,
            status=None,
            kind=ErrorKind.CONNECTION,
        )

    def _decode(
        self, method: str, path: str, response: httpx.Response, *, idempotent: bool
    ) -> dict[str, Any]:
        status = response.status_code
        if not 200 <= status < 300:
            raise self._status_error(method, path, response, idempotent=idempotent)
        if not idempotent and not response.content.strip():
            return {}
        # A 200 can still be a proxy's HTML error page or a body cut short by a dropped
        # connection. For a read that is worth another try; for a write it is ambiguous.
        problem: str | None = None
        data: Any = None
        if _looks_like_html(response):
            excerpt = _server_excerpt(response)
            problem = "an HTML page instead of JSON" + (f" ({excerpt})" if excerpt else "")
        else:
            try:
                data = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                problem = "a body that is not valid JSON (truncated or garbled)"
            else:
                if not isinstance(data, dict):
                    problem = f"JSON that is a {type(data).__name__}, not an object"
        if problem is None:
            return data
        if not idempotent and not _looks_like_html(response):
            # NKS took the write (2xx) and only its answer is odd: reporting a failure here would
            # invite a second resize, so accept it and leave a trace.
            logger.warning("NKS accepted %s %s but answered with %s", method, path, problem)
            return {}
        suffix = "" if idempotent else f"; {_UNCERTAIN_WRITE}"
        raise NksError(
            self._redact(
                f"NKS answered {status} {_reason_phrase(status)} for {method} {path} "
                f"with {problem}{suffix}"
            ),
            retryable=idempotent,
            status=status,
            kind=ErrorKind.BAD_RESPONSE,
        )

    def _status_error(
        self, method: str, path: str, response: httpx.Response, *, idempotent: bool
    ) -> NksError:
        status = response.status_code
        excerpt = _server_excerpt(response)
        message = f"NKS answered {status} {_reason_phrase(status)} for {method} {path}"
        if excerpt:
            message += f": {excerpt}"
        retry_after: float | None = None
        if 300 <= status < 400:
            kind, retryable = ErrorKind.CLIENT, False
            location = _text_excerpt(response.headers.get("location", ""))
            message += f" (redirected to {location or 'nowhere'}; check the configured API URL)"
        elif status == http.HTTPStatus.UNAUTHORIZED:
            kind, retryable = ErrorKind.AUTH, False
            message += (
                " (the configured NKS token was rejected; it may have expired)"
                if self._fixed_token
                else " (rejected even with a freshly issued token; check the account's access)"
            )
        elif status == http.HTTPStatus.FORBIDDEN:
            kind, retryable = ErrorKind.FORBIDDEN, False
            message += " (the account is not allowed to do this)"
        elif status == http.HTTPStatus.NOT_FOUND:
            kind, retryable = ErrorKind.NOT_FOUND, False
        elif status == http.HTTPStatus.CONFLICT:
            kind, retryable = ErrorKind.CONFLICT, False
        elif status == http.HTTPStatus.TOO_MANY_REQUESTS:
            kind, retryable = ErrorKind.RATE_LIMITED, True
            retry_after = _parse_retry_after(response.headers.get("retry-after"))
        elif status == http.HTTPStatus.REQUEST_TIMEOUT:
            kind, retryable = ErrorKind.TIMEOUT, idempotent
        elif status >= 500:
            kind, retryable = ErrorKind.SERVER, idempotent
            if status == http.HTTPStatus.SERVICE_UNAVAILABLE:
                retry_after = _parse_retry_after(response.headers.get("retry-after"))
            if not idempotent:
                message += f"; {_UNCERTAIN_WRITE}"
        else:
            kind, retryable = ErrorKind.CLIENT, False
        return NksError(
            self._redact(message),
            retryable=retryable,
            status=status,
            kind=kind,
            retry_after=retry_after,
        )

    def _redact(self, text: str) -> str:
        # Servers sometimes echo the request back in an error; never let a secret out that way,
        # including tokens replaced since (they may still be valid).
        for secret in (self._password, self._fixed_token, *self._tokens_used):
            if secret and len(secret) >= 4:
                text = text.replace(secret, "[redacted]")
        text = _TOKEN_HEADER_VALUE.sub(r"\1[redacted]", text)
        return _PASSWORD_VALUE.sub(r"\1[redacted]", text)

    # ---- tokens -------------------------------------------------------------------------

    def _current_token(self) -> str:
        with self._token_lock:
            token = self._token
            if token is not None and (token.renew_at is None or time.time() < token.renew_at):
                return token.value
            # Holding the lock while asking for a token is deliberate: sixteen snapshot threads
            # finding the token expired at once should cause one identity call, not sixteen.
            self._token = self._issue_token()
            return self._token.value

    def _renew_rejected_token(self, rejected: str) -> None:
        with self._token_lock:
            if self._token is not None and self._token.value != rejected:
                return  # another thread already replaced it
            self._token = self._issue_token()

    def _issue_token(self) -> _Token:
        if self.identity_url is None or self._username is None or self._password is None:
            raise RuntimeError("token renewal needs identity credentials")
        url = f"{self.identity_url}/v2.0/tokens"
        path = urlsplit(url).path
        body = {
            "auth": {
                "tenantId": self.tenant_id,
                "passwordCredentials": {"username": self._username, "password": self._password},
            }
        }
        attempt = 0
        while True:
            self._count_request()
            try:
                response = self._http.post(
                    url,
                    content=orjson.dumps(body),
                    headers={"Accept": "application/json", "Content-Type": "application/json"},
                )
            except httpx.RequestError as exc:
                error = self._identity_transport_error(path, exc)
            else:
                try:
                    return self._token_from(response, path)
                except NksError as exc:
                    error = exc
            delay = self._retry_delay(attempt, error)
            if delay is None:
                raise error
            attempt += 1
            logger.warning(
                "Retrying the NKS token request in %.2f s (attempt %d of %d): %s",
                delay,
                attempt + 1,
                self.retries + 1,
                error.message,
            )
            time.sleep(delay)

    def _identity_transport_error(self, path: str, exc: httpx.RequestError) -> NksError:
        host = urlsplit(self.identity_url or "").netloc
        if isinstance(exc, httpx.TimeoutException):
            return NksError(
                f"The identity service at {host} timed out for POST {path}",
                retryable=True,
                status=None,
                kind=ErrorKind.TIMEOUT,
            )
        detail = self._redact(_text_excerpt(str(exc))) or type(exc).__name__
        return NksError(
            f"Could not talk to the identity service at {host} for POST {path}: {detail}",
            retryable=True,
            status=None,
            kind=ErrorKind.CONNECTION,
        )

    def _token_from(self, response: httpx.Response, path: str) -> _Token:
        status = response.status_code
        if status in (http.HTTPStatus.UNAUTHORIZED, http.HTTPStatus.FORBIDDEN):
            # The credentials themselves were refused: that needs a person, not a retry.
            excerpt = self._redact(_server_excerpt(response))
            raise NksError(
                f"The identity service answered {status} {_reason_phrase(status)} for POST "
                f"{path}: it refused the NKS credentials for tenant {self.tenant_id}"
                + (f" ({excerpt})" if excerpt else ""),
                retryable=False,
                status=status,
                kind=ErrorKind.AUTH,
            )
        if not 200 <= status < 300:
            error = self._status_error("POST", path, response, idempotent=True)
            raise NksError(
                error.message.replace("NKS answered", "The identity service answered", 1),
                retryable=error.retryable,
                status=status,
                kind=error.kind,
                retry_after=error.retry_after,
            )
        try:
            data = orjson.loads(response.content)
            token_data = data["access"]["token"]
            value = token_data["id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise NksError(
                f"The identity service answered {status} for POST {path} without "
                "access.token.id in JSON",
                retryable=True,
                status=status,
                kind=ErrorKind.BAD_RESPONSE,
            ) from None
        if not isinstance(value, str) or not value:
            raise NksError(
                f"The identity service answered POST {path} with an empty token id",
                retryable=True,
                status=status,
                kind=ErrorKind.BAD_RESPONSE,
            )
        self._tokens_used = (*self._tokens_used[-(REMEMBERED_TOKENS - 1) :], value)
        return _Token(value, renew_at=_renewal_time(token_data))


def _renewal_time(token_data: Mapping[str, Any]) -> float:
    now = time.time()
    expires = as_datetime(token_data.get("expires"))
    if expires is None:
        # Without an expiry, renew conservatively; a 401 would still trigger a renewal.
        return now + 600.0
    issued = as_datetime(token_data.get("issued_at"))
    # Lifetime measured on the server's own clock, so a skewed local clock cannot make every
    # token look expired on arrival (which would mean one identity call per API call).
    lifetime = (expires - issued).total_seconds() if issued else expires.timestamp() - now
    if lifetime <= 0:
        return now + 30.0
    margin = min(60.0, lifetime * 0.1)
    return now + lifetime - margin


def _segment(value: str) -> str:
    # Cluster and nodegroup names are user data: quote them so "a/../b" stays one path segment.
    return quote(value, safe="")


# --------------------------------------------------------------------------------------------
# Snapshot of one account, fetched concurrently
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything fetched about one cluster in one poll.

    ``cluster`` is the detail answer, or the list entry when the detail could not be fetched.
    ``nodegroups``/``events`` are None when their list could not be fetched (keep the previous
    data then, marked stale); a nodegroup whose detail failed appears as its list entry.
    ``error`` is the first failure met; ``gone`` means the cluster vanished after the list.
    """

    cluster: Cluster
    nodegroups: tuple[Nodegroup, ...] | None
    events: tuple[ClusterEvent, ...] | None
    error: NksError | None
    gone: bool = False

    @property
    def complete(self) -> bool:
        return self.error is None


@dataclass(frozen=True, slots=True)
class AccountSnapshot:
    clusters: tuple[ClusterSnapshot, ...]
    started_at: datetime
    duration_seconds: float
    http_calls: int

    @property
    def failed(self) -> tuple[ClusterSnapshot, ...]:
        return tuple(snapshot for snapshot in self.clusters if snapshot.error is not None)


def _outcome(future: Future[T]) -> tuple[T | None, NksError | None]:
    try:
        return future.result(), None
    except NksError as exc:
        return None, exc


def fetch_snapshot(
    client: NksClient, *, max_workers: int = 32, include_events: bool = True
) -> AccountSnapshot:
    """List the account's clusters, then fetch every cluster's details concurrently.

    Calls are scheduled one per task (cluster detail, nodegroup list, each nodegroup detail,
    events) rather than one task per cluster, so a slow cluster does not hold a worker for six
    round trips. A failure to list clusters raises; every later failure is recorded on the
    cluster it belongs to. ``http_calls`` counts the client's requests during the fetch.

    A poll makes 1 + clusters x (3 + nodegroups) calls, nearly all waiting on the network, so
    the time is about calls x latency / workers: 32 workers take 100 clusters of 3 nodegroups
    at 100 ms a call in ~2 s (16 would need ~4 s). Past the client's ``max_connections``
    extra workers would only queue.
    """
    started_at = datetime.now(UTC)
    started = time.monotonic()
    calls_before = client.request_count
    listed = client.list_clusters()
    # More threads than pooled connections would only queue for a connection (and could hit
    # the pool timeout), so the pool size caps the parallelism.
    workers = max(1, min(max_workers, client.max_connections))
    snapshots: list[ClusterSnapshot] = []
    if listed:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nks-snapshot") as pool:
            details = {c.uuid: pool.submit(client.get_cluster, c.uuid) for c in listed}
            nodegroup_lists = {c.uuid: pool.submit(client.list_nodegroups, c.uuid) for c in listed}
            events = (
                {c.uuid: pool.submit(client.list_events, c.uuid) for c in listed}
                if include_events
                else {}
            )
            cluster_of = {future: uuid for uuid, future in nodegroup_lists.items()}
            nodegroup_details: dict[str, list[tuple[Nodegroup, Future[Nodegroup]]]] = {}
            for future in as_completed(cluster_of):
                uuid = cluster_of[future]
                groups, _ = _outcome(future)
                if groups is None:
                    continue
                nodegroup_details[uuid] = [
                    (group, pool.submit(client.get_nodegroup, uuid, group.uuid)) for group in groups
                ]
            for listed_cluster in listed:
                snapshots.append(
                    _assemble(
                        listed_cluster,
                        details[listed_cluster.uuid],
                        nodegroup_lists[listed_cluster.uuid],
                        nodegroup_details.get(listed_cluster.uuid, []),
                        events.get(listed_cluster.uuid),
                    )
                )
    return AccountSnapshot(
        clusters=tuple(snapshots),
        started_at=started_at,
        duration_seconds=time.monotonic() - started,
        http_calls=client.request_count - calls_before,
    )


def _assemble(
    listed: Cluster,
    detail_future: Future[Cluster],
    nodegroup_list_future: Future[list[Nodegroup]],
    nodegroup_details: Iterable[tuple[Nodegroup, Future[Nodegroup]]],
    events_future: Future[list[ClusterEvent]] | None,
) -> ClusterSnapshot:
    errors: list[NksError] = []
    detail, detail_error = _outcome(detail_future)
    if detail_error is not None:
        errors.append(detail_error)
        if detail_error.not_found:
            # Deleted between the list and the detail: report it gone, with what the list said.
            logger.info("Cluster %s (%s) disappeared during the poll", listed.name, listed.uuid)
            return ClusterSnapshot(
                cluster=listed, nodegroups=None, events=None, error=detail_error, gone=True
            )

    nodegroups: tuple[Nodegroup, ...] | None = None
    _, list_error = _outcome(nodegroup_list_future)
    if list_error is not None:
        errors.append(list_error)
    else:
        collected: list[Nodegroup] = []
        for listed_group, future in nodegroup_details:
            group, group_error = _outcome(future)
            if group is not None:
                collected.append(group)
            elif group_error is not None and group_error.not_found:
                logger.info("Nodegroup %s disappeared during the poll", listed_group.uuid)
            else:
                collected.append(listed_group)
                if group_error is not None:
                    errors.append(group_error)
        nodegroups = tuple(collected)

    events: tuple[ClusterEvent, ...] | None = None
    if events_future is not None:
        found, events_error = _outcome(events_future)
        if events_error is not None:
            errors.append(events_error)
        else:
            events = tuple(found or ())
    return ClusterSnapshot(
        cluster=detail or listed,
        nodegroups=nodegroups,
        events=events,
        error=errors[0] if errors else None,
    )
