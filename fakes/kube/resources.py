"""The kinds this fake serves (Lease, LeaseCandidate, Node): schemas, time formats, validation.

Bodies are cleaned the way the apiserver's decoder does it: fields are rebuilt in the Go
struct's order, unknown fields are dropped, `null` means absent, a wrong JSON type is a 400
and a semantically wrong value is a 422 with the apiserver's field-error wording.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from fakes.kube import errors
from fakes.kube.errors import ApiError, FieldError
from fakes.kube.node_schema import clean_node_spec, clean_node_status, validate_node_spec

GROUP = errors.GROUP
OLDEST_EMULATION_VERSION = "OldestEmulationVersion"


class FieldType(Enum):
    STRING = "string"
    INT32 = "int32"
    MICRO_TIME = "MicroTime"


@dataclass(frozen=True, slots=True)
class SpecField:
    name: str
    type: FieldType
    # Go `*T` pointers and `omitempty` values drop out of the JSON when unset; plain Go
    # strings (LeaseCandidate's required fields) are always written, "" included.
    always_present: bool = False
    omit_empty: bool = False


@dataclass(frozen=True, slots=True)
class ResourceType:
    plural: str
    singular: str
    kind: str
    storage_version: str  # the version whose JSON the event log stores
    versions: tuple[str, ...]  # every version this fake knows how to serve
    storage_version_hash: str
    spec_fields: tuple[SpecField, ...]
    table_columns: tuple[tuple[str, str], ...]  # (column name, spec field or "" for Name/Age)
    group: str = GROUP  # "" is the core group, served under /api instead of /apis
    namespaced: bool = True
    # Kinds with a status subresource keep `status` beside `spec`; the main resource's
    # writes leave it alone and `<plural>/status` writes touch nothing else.
    has_status: bool = False
    short_names: tuple[str, ...] = ()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


LEASES = ResourceType(
    plural="leases",
    singular="lease",
    kind="Lease",
    storage_version="v1",
    versions=("v1",),
    storage_version_hash="gqkMMb/YqFM=",
    spec_fields=(
        SpecField("holderIdentity", FieldType.STRING),
        SpecField("leaseDurationSeconds", FieldType.INT32),
        SpecField("acquireTime", FieldType.MICRO_TIME),
        SpecField("renewTime", FieldType.MICRO_TIME),
        SpecField("leaseTransitions", FieldType.INT32),
        SpecField("strategy", FieldType.STRING),
        SpecField("preferredHolder", FieldType.STRING),
    ),
    table_columns=(("Name", ""), ("Holder", "holderIdentity"), ("Age", "")),
)

LEASE_CANDIDATES = ResourceType(
    plural="leasecandidates",
    singular="leasecandidate",
    kind="LeaseCandidate",
    storage_version="v1beta1",
    versions=("v1beta1", "v1alpha2"),
    storage_version_hash="Hhl9vDvDLmo=",
    spec_fields=(
        SpecField("leaseName", FieldType.STRING, always_present=True),
        SpecField("pingTime", FieldType.MICRO_TIME),
        SpecField("renewTime", FieldType.MICRO_TIME),
        SpecField("binaryVersion", FieldType.STRING, always_present=True),
        SpecField("emulationVersion", FieldType.STRING, omit_empty=True),
        SpecField("strategy", FieldType.STRING, always_present=True),
    ),
    table_columns=(
        ("Name", ""),
        ("LeaseName", "leaseName"),
        ("BinaryVersion", "binaryVersion"),
        ("EmulationVersion", "emulationVersion"),
        ("Age", ""),
    ),
)

NODES = ResourceType(
    plural="nodes",
    singular="node",
    kind="Node",
    storage_version="v1",
    versions=("v1",),
    storage_version_hash="XwShjMxG9Fs=",
    spec_fields=(),  # nested: node_schema cleans it
    table_columns=(("Name", ""), ("Age", "")),
    group="",
    namespaced=False,
    has_status=True,
    short_names=("no",),
)

RESOURCES: dict[str, ResourceType] = {
    LEASES.plural: LEASES,
    LEASE_CANDIDATES.plural: LEASE_CANDIDATES,
    NODES.plural: NODES,
}

# Metadata keys a client may set; everything else in metadata is owned by the server.
CLIENT_METADATA_KEYS = ("labels", "annotations", "ownerReferences", "finalizers")

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INT32_MAX = 2**31 - 1


# --- time -------------------------------------------------------------------------------


def format_time(epoch_seconds: float) -> str:
    """metav1.Time: RFC 3339 in UTC with whole seconds (creationTimestamp)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_seconds))


class _MicroTimeFormatter:
    """metav1.MicroTime (`2026-11-29T07:00:00.123456Z`) without strftime on every call.

    The bulk renewal path formats a timestamp per event; caching the seconds part makes
    that a string concatenation. The cache is one tuple, replaced atomically, so threads
    never pair one second with another second's text.
    """

    def __init__(self) -> None:
        self._cache: tuple[int, str] = (-1, "")

    def __call__(self, epoch_seconds: float) -> str:
        whole = int(epoch_seconds)
        micros = round((epoch_seconds - whole) * 1_000_000)
        if micros >= 1_000_000:
            whole += 1
            micros -= 1_000_000
        second, prefix = self._cache
        if second != whole:
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
            self._cache = (whole, prefix)
        return f"{prefix}.{micros:06d}Z"


format_micro_time = _MicroTimeFormatter()


def parse_time(value: str) -> datetime:
    """Parse RFC 3339 as the apiserver does; a zone is required (naive times are ambiguous)."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"parsing time {value!r}: missing time zone")
    return parsed


def normalize_micro_time(value: str | datetime | float) -> str:
    """Any accepted spelling of a MicroTime, re-encoded the way the apiserver writes it."""
    if isinstance(value, int | float):
        return format_micro_time(float(value))
    moment = value if isinstance(value, datetime) else parse_time(value)
    if moment.tzinfo is None:
        raise ValueError(f"time {moment.isoformat()} has no time zone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- decoding and validation ------------------------------------------------------------


def _decode_error(resource: ResourceType, version: str, why: str) -> ApiError:
    return errors.bad_request(
        f'{resource.kind} in version "{version}" cannot be handled as a {resource.kind}: {why}'
    )


def clean_spec(
    resource: ResourceType, spec: Any, version: str, *, python_values: bool = False
) -> dict[str, Any]:
    """The spec as the apiserver would store it: known fields only, in struct order.

    `python_values` lets in-process callers pass datetimes or epoch seconds for MicroTime
    fields; over the wire only strings are valid, as for the real decoder.
    """
    if resource is NODES:
        return clean_node_spec(spec, version, python_values=python_values)
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise _decode_error(resource, version, "spec must be an object")
    cleaned: dict[str, Any] = {}
    for field in resource.spec_fields:
        value = spec.get(field.name)
        if value is None:
            if field.always_present:
                cleaned[field.name] = ""
            continue
        if field.type is FieldType.STRING:
            if not isinstance(value, str):
                raise _decode_error(
                    resource,
                    version,
                    f"spec.{field.name}: expected string, got {type(value).__name__}",
                )
            if field.omit_empty and value == "":
                continue
        elif field.type is FieldType.INT32:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _decode_error(
                    resource, version, f"spec.{field.name}: expected int32, got {value!r}"
                )
            if not -(2**31) <= value <= _INT32_MAX:
                raise _decode_error(
                    resource, version, f"spec.{field.name}: {value} overflows int32"
                )
        else:
            accepted = (str, datetime, int, float) if python_values else (str,)
            if not isinstance(value, accepted) or isinstance(value, bool):
                raise _decode_error(resource, version, f"spec.{field.name}: expected a MicroTime")
            try:
                value = normalize_micro_time(value)
            except ValueError as error:
                raise _decode_error(resource, version, f"spec.{field.name}: {error}") from None
        cleaned[field.name] = value
    return cleaned


def clean_status(
    resource: ResourceType, status: Any, version: str, *, python_values: bool = False
) -> dict[str, Any]:
    """The status as the apiserver would store it (kinds with a status subresource only)."""
    if resource is not NODES:
        raise ValueError(f"{resource.kind} has no status")
    return clean_node_status(status, version, python_values=python_values)


def clean_client_metadata(resource: ResourceType, metadata: Any, version: str) -> dict[str, Any]:
    """The parts of a request's metadata a client owns, type-checked."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise _decode_error(resource, version, "metadata must be an object")
    cleaned: dict[str, Any] = {}
    for key in ("labels", "annotations"):
        value = metadata.get(key)
        if value is None:
            continue
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise _decode_error(resource, version, f"metadata.{key} must map strings to strings")
        if value:
            cleaned[key] = dict(value)
    owners = metadata.get("ownerReferences")
    if owners:
        if not isinstance(owners, list) or not all(isinstance(owner, Mapping) for owner in owners):
            raise _decode_error(resource, version, "metadata.ownerReferences must be a list")
        cleaned["ownerReferences"] = [dict(owner) for owner in owners]
    finalizers = metadata.get("finalizers")
    if finalizers:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            raise _decode_error(resource, version, "metadata.finalizers must be a list of strings")
        cleaned["finalizers"] = list(finalizers)
    return cleaned


def validate_name(name: str, field: str = "metadata.name") -> list[FieldError]:
    if not name:
        return [errors.required_value(field, "name or generateName is required")]
    if len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [
            errors.invalid_value(
                field,
                name,
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character "
                "(e.g. 'example.com', regex used for validation is "
                "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        ]
    return []


def validate_namespace(namespace: str) -> list[FieldError]:
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        return [
            errors.invalid_value(
                "metadata.namespace",
                namespace,
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                "or '-', and must start and end with an alphanumeric character",
            )
        ]
    return []


def _validate_strategy(strategy: str, field: str) -> list[FieldError]:
    # Custom strategies must be prefixed ("example.com/my-strategy"), like any extension name.
    if strategy == OLDEST_EMULATION_VERSION or "/" in strategy:
        return []
    return [errors.unsupported_value(field, strategy, [OLDEST_EMULATION_VERSION])]


def validate_spec(
    resource: ResourceType, spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None
) -> list[FieldError]:
    """The apiserver's semantic checks (pkg/apis/coordination/validation)."""
    if resource is NODES:
        return validate_node_spec(spec, old_spec)
    problems: list[FieldError] = []
    if resource is LEASES:
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            problems.append(
                errors.invalid_value(
                    "spec.leaseDurationSeconds", duration, "must be greater than 0"
                )
            )
        transitions = spec.get("leaseTransitions")
        if transitions is not None and transitions < 0:
            problems.append(
                errors.invalid_value(
                    "spec.leaseTransitions", transitions, "must to greater or equal than 0"
                )
            )
        strategy = spec.get("strategy")
        if spec.get("preferredHolder") and not strategy:
            problems.append(
                errors.forbidden_value(
                    "spec.preferredHolder", "may only be specified if `strategy` is defined"
                )
            )
        if strategy:
            problems.extend(_validate_strategy(strategy, "spec.strategy"))
        return problems

    if not spec.get("leaseName"):
        problems.append(errors.required_value("spec.leaseName"))
    elif old_spec is not None and old_spec.get("leaseName") != spec["leaseName"]:
        problems.append(
            errors.invalid_value("spec.leaseName", spec["leaseName"], "field is immutable")
        )
    if not spec.get("binaryVersion"):
        problems.append(errors.required_value("spec.binaryVersion"))
    strategy = spec.get("strategy", "")
    if not strategy:
        problems.append(errors.required_value("spec.strategy"))
    else:
        problems.extend(_validate_strategy(strategy, "spec.strategy"))
        if strategy == OLDEST_EMULATION_VERSION and not spec.get("emulationVersion"):
            problems.append(
                errors.required_value(
                    "spec.emulationVersion",
                    'must be specified when strategy is "OldestEmulationVersion"',
                )
            )
    return problems


def build_metadata(
    *,
    name: str,
    namespace: str,
    uid: str,
    resource_version: int,
    creation_timestamp: str,
    client_metadata: Mapping[str, Any],
) -> dict[str, Any]:
    """ObjectMeta in the apiserver's key order (managedFields are not tracked); a
    cluster-scoped object (namespace "") has no namespace key."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata.update(
        uid=uid, resourceVersion=str(resource_version), creationTimestamp=creation_timestamp
    )
    for key in CLIENT_METADATA_KEYS:
        if key in client_metadata:
            metadata[key] = client_metadata[key]
    return metadata
