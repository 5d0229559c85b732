"""PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

The official Python client sends a dict body as a strategic merge patch and a list as a JSON
patch; kubectl uses strategic merge for built-in kinds. Strategic merge here knows the merge
keys of the lists a Node client patches (conditions and addresses by `type`, owner references
by `uid`); other lists are replaced, as they are for fields without a patch strategy. Server-side
apply (application/apply-patch+yaml) is not served: it answers 415 like an unknown type, where a
real apiserver applies it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from fakes.kube import errors

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
ACCEPTED = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)

# patchMergeKey of the lists with patchStrategy "merge" that Node and Lease objects carry.
_MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
    ("metadata", "ownerReferences"): "uid",
}

Patcher = Callable[[dict[str, Any]], dict[str, Any]]


def parse_patch(content_type: str | None, body: bytes) -> Patcher:
    """The patch a request carries, as a function from the current object to the patched one.

    Raises ApiError 415 for a media type this fake does not apply and 400 for a body that is
    not the patch its media type promises.
    """
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type not in ACCEPTED:
        raise errors.unsupported_media_type()
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise errors.bad_request(f"error decoding patch: {error}") from None
    if media_type == JSON_PATCH:
        if not isinstance(document, list):
            raise errors.bad_request(
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
            )
        return lambda target: json_patch(target, document)
    if not isinstance(document, dict):
        raise errors.bad_request("error decoding patch: the patch must be a JSON object")
    if media_type == MERGE_PATCH:
        return lambda target: merge_patch(target, document)
    return lambda target: strategic_merge_patch(target, document)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {key: copy.deepcopy(value) for key, value in patch.items() if key != "$patch"}
    if directive is not None:
        raise errors.bad_request(f"unknown patch type: {directive!r} in map")
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue  # ordering and retention hints: the merged result is the same without them
        if key.startswith("$"):
            raise errors.bad_request(f"unknown patch directive {key!r}")
        if value is None:
            result.pop(key, None)
            continue
        child = (*path, key)
        merge_key = _MERGE_KEYS.get(child)
        if merge_key is not None and isinstance(value, list):
            current = result.get(key)
            result[key] = _merge_list(current if isinstance(current, list) else [], value, child)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = strategic_merge_patch(result[key], value, child)
        else:
            result[key] = strategic_merge_patch(None, value, child)
    return result


def _merge_list(current: list[Any], items: list[Any], path: tuple[str, ...]) -> list[Any]:
    merge_key = _MERGE_KEYS[path]
    if {"$patch": "replace"} in items:
        return [copy.deepcopy(item) for item in items if item != {"$patch": "replace"}]
    merged = [copy.deepcopy(item) for item in current]
    for item in items:
        if not isinstance(item, dict) or merge_key not in item:
            raise errors.bad_request(
                f"map: {item!r} does not contain declared merge key: {merge_key}"
            )
        index = next(
            (
                position
                for position, existing in enumerate(merged)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(strategic_merge_patch(None, item, path))
        else:
            merged[index] = strategic_merge_patch(merged[index], item, path)
    return merged


def json_patch(target: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902 add, remove, replace, move, copy and test, applied in order."""
    document: Any = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict):
            raise errors.bad_request("json patch operations must be objects")
        op = operation.get("op")
        path = _pointer(operation.get("path"))
        if op == "add":
            document = _add(document, path, copy.deepcopy(_value(operation)))
        elif op == "remove":
            document = _remove(document, path)[0]
        elif op == "replace":
            document = _remove(document, path)[0]
            document = _add(document, path, copy.deepcopy(_value(operation)))
        elif op in ("move", "copy"):
            source = _pointer(operation.get("from"))
            if op == "move":
                document, value = _remove(document, source)
            else:
                value = copy.deepcopy(_get(document, source))
            document = _add(document, path, value)
        elif op == "test":
            if _get(document, path) != _value(operation):
                raise errors.bad_request(
                    f"testing value {operation.get('path')} failed: test failed"
                )
        else:
            raise errors.bad_request(f"Unexpected kind: {op}")
    if not isinstance(document, dict):
        raise errors.bad_request("the patched object is not a JSON object")
    return document


def _value(operation: dict[str, Any]) -> Any:
    if "value" not in operation:
        raise errors.bad_request(f"missing value for {operation.get('op')} operation")
    return operation["value"]


def _pointer(text: Any) -> list[str]:
    if not isinstance(text, str) or (text and not text.startswith("/")):
        raise errors.bad_request(f"invalid JSON pointer: {text!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in text.split("/")[1:]]


def _index(container: list[Any], part: str, *, adding: bool) -> int:
    if adding and part == "-":  # "-" is the end of the array (RFC 6901)
        return len(container)
    if not part.isdigit():
        raise errors.bad_request(f"invalid array index: {part!r}")
    index = int(part)
    if index > len(container) or (not adding and index == len(container)):
        raise errors.bad_request(f"array index out of bounds: {index}")
    return index


def _parent(document: Any, path: list[str]) -> Any:
    if not path:
        raise errors.bad_request("the root cannot be the target of this operation")
    return _get(document, path[:-1])


def _get(document: Any, path: list[str]) -> Any:
    current = document
    for part in path:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list):
            current = current[_index(current, part, adding=False)]
        else:
            raise errors.bad_request(f"doc is missing path: /{'/'.join(path)}")
    return current


def _add(document: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _parent(document, path)
    if isinstance(parent, dict):
        parent[path[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, path[-1], adding=True), value)
    else:
        raise errors.bad_request(f"doc is missing path: /{'/'.join(path)}")
    return document


def _remove(document: Any, path: list[str]) -> tuple[Any, Any]:
    parent = _parent(document, path)
    if isinstance(parent, dict) and path[-1] in parent:
        return document, parent.pop(path[-1])
    if isinstance(parent, list):
        return document, parent.pop(_index(parent, path[-1], adding=False))
    raise errors.bad_request(f"doc is missing path: /{'/'.join(path)}")
