"""Reading a request: which resource a path names, the verb, and the query's values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.resources import (
    GROUP,
    ResourceType,
    clean_client_metadata,
    clean_spec,
    clean_status,
)

_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the server answered, for tests that check what a client asked for."""

    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass(frozen=True, slots=True)
class ResourcePath:
    resource: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str | None = None  # "status"

    @property
    def rbac_resource(self) -> str:
        """What RBAC rules name: `nodes`, or `nodes/status` for the subresource."""
        plural = self.resource.plural
        return f"{plural}/{self.subresource}" if self.subresource else plural


def is_true(value: str | None) -> bool:
    """A query flag as the apiserver reads it (strconv.ParseBool)."""
    return value in _TRUE


def parse_resource_path(
    path: str,
    served: Mapping[str, list[ResourceType]],
    core: Sequence[ResourceType] = (),
) -> ResourcePath | None:
    """The resource a path names, or None for discovery and unknown paths.

    `served` maps coordination.k8s.io versions to their kinds; `core` lists the kinds served
    under /api/v1.
    """
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "api" and parts[1] == "v1":
        version, rest, candidates = "v1", parts[2:], list(core)
    elif len(parts) >= 4 and parts[0] == "apis" and parts[1] == GROUP:
        version, rest = parts[2], parts[3:]
        candidates = served.get(version, [])
    else:
        return None
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = next((kind for kind in candidates if kind.plural == rest[0]), None)
    if resource is None or len(rest) > 3:
        return None
    # A namespaced kind's items live in a namespace; a cluster-scoped kind has none.
    if namespace is not None and not resource.namespaced:
        return None
    name = rest[1] if len(rest) >= 2 else None
    if name is not None and resource.namespaced and namespace is None:
        return None
    subresource = rest[2] if len(rest) == 3 else None
    if subresource is not None and not (subresource == "status" and resource.has_status):
        return None
    return ResourcePath(resource, version, namespace, name, subresource)


def verb(method: str, route: ResourcePath, query: dict[str, str]) -> str:
    if method == "GET":
        if route.name is not None:
            return "get"
        return "watch" if is_true(query.get("watch")) else "list"
    if method == "DELETE":
        return "delete" if route.name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def parse_int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"{name}: Invalid value: {value!r}: must be an integer") from None


def parse_resource_version(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        parsed = -1
    if parsed < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return parsed


def decode_body(resource: ResourceType, version: str, body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        kind = resource.kind
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: {error}'
        ) from None


@dataclass(frozen=True, slots=True)
class UpdateRequest:
    """A PUT body, decoded and type-checked before taking the store lock."""

    client_metadata: dict[str, Any]
    spec: dict[str, Any]
    status: dict[str, Any] | None  # kinds with a status subresource only
    resource_version: str | None
    uid: str | None

    @classmethod
    def from_body(
        cls, resource: ResourceType, namespace: str, name: str, body: Any, version: str
    ) -> UpdateRequest:
        metadata = request_metadata(resource, body, version)
        if metadata.get("name") not in (None, "", name):
            raise errors.bad_request(
                f"the name of the object ({metadata['name']}) does not match the name on "
                f"the URL ({name})"
            )
        # A cluster-scoped object's namespace is ignored (cleared), as the apiserver does.
        if resource.namespaced and metadata.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        resource_version = metadata.get("resourceVersion")
        uid = metadata.get("uid")
        return cls(
            client_metadata=clean_client_metadata(resource, metadata, version),
            spec=clean_spec(resource, body.get("spec"), version),
            status=clean_status(resource, body.get("status"), version)
            if resource.has_status
            else None,
            resource_version=str(resource_version) if resource_version else None,
            uid=str(uid) if uid else None,
        )


def request_metadata(resource: ResourceType, body: Any, version: str) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise errors.bad_request(
            f'{resource.kind} in version "{version}" cannot be handled as a {resource.kind}: '
            "the body must be a JSON object"
        )
    kind = body.get("kind")
    if kind not in (None, "", resource.kind):
        raise errors.bad_request(
            f'{resource.kind} in version "{version}" cannot be handled as a {resource.kind}: '
            f"the object provided is of kind {kind!r}"
        )
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise errors.bad_request(
            f'{resource.kind} in version "{version}" cannot be handled as a {resource.kind}: '
            "metadata must be an object"
        )
    return metadata
