"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch and JSON patch (RFC 6902).

Lease and LeaseCandidate have no list fields with merge keys in their specs, so a strategic
merge patch behaves as a JSON merge patch for them (kubectl apply, label, annotate, edit).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from fakes.kube import errors

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise errors.bad_request(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(document: Any, parts: list[str]) -> Any:
    node = document
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise errors.ApiError(
                errors.status_body(
                    422, "Invalid", f"jsonpatch: path /{'/'.join(parts)} does not exist"
                )
            )
    return node


def _get(document: Any, parts: list[str]) -> Any:
    if not parts:
        return document
    parent = _parent(document, parts)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise errors.ApiError(
        errors.status_body(422, "Invalid", f"jsonpatch: path /{'/'.join(parts)} does not exist")
    )


def _remove(document: Any, parts: list[str]) -> Any:
    value = _get(document, parts)
    parent = _parent(document, parts)
    if isinstance(parent, dict):
        del parent[parts[-1]]
    else:
        del parent[int(parts[-1])]
    return value


def _add(document: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _parent(document, parts)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise errors.bad_request(f"jsonpatch: invalid array index {last!r}")
    else:
        raise errors.bad_request("jsonpatch: cannot add below a scalar")
    return document


def json_patch(document: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise errors.bad_request("a JSON patch must be a list of operations")
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise errors.bad_request(f"invalid JSON patch operation {operation!r}")
        op, parts = operation["op"], _pointer(str(operation["path"]))
        if op == "add":
            document = _add(document, parts, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            _remove(document, parts)
        elif op == "replace":
            _get(document, parts)
            if not parts:
                document = copy.deepcopy(operation.get("value"))
            else:
                _remove(document, parts)
                document = _add(document, parts, copy.deepcopy(operation.get("value")))
        elif op in ("move", "copy"):
            source = _pointer(str(operation.get("from", "")))
            value = (
                _remove(document, source) if op == "move" else copy.deepcopy(_get(document, source))
            )
            document = _add(document, parts, value)
        elif op == "test":
            if _get(document, parts) != operation.get("value"):
                raise errors.ApiError(
                    errors.status_body(
                        422,
                        "Invalid",
                        f"jsonpatch: test operation for path {operation['path']} failed",
                    )
                )
        else:
            raise errors.bad_request(f"unknown JSON patch operation {op!r}")
    return document


def patch_function(content_type: str, body: bytes) -> Callable[[dict[str, Any]], Any]:
    """The transformation a PATCH request asks for; raises ApiError for bad requests."""
    media_type = content_type.split(";")[0].strip().lower()
    if media_type not in (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH):
        raise errors.unsupported_media_type(media_type)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise errors.bad_request(f"error decoding patch: {error}") from None
    if media_type == JSON_PATCH:
        return lambda current: json_patch(current, document)
    if not isinstance(document, dict):
        raise errors.bad_request("a merge patch must be a JSON object")
    return lambda current: merge_patch(current, document)
