"""In-memory objects, one resourceVersion counter and the watch event log.

It plays etcd: every write gets the next global resourceVersion and appends one
pre-serialized watch event, so a watch is a cursor into a list and costs nothing per event
beyond filtering and a socket write. Stored objects are copy-on-write (a write builds new
`metadata`, `spec` and `status` dicts and never mutates old ones), so readers may serialize
a reference they took under the lock after releasing it. The apiserver's verbs on top are in
`store`, bulk renewal traffic in `renewals`, Nodes as the cluster's actors write them in
`node_store` and by the thousand in `node_traffic`.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.resources import (
    CLIENT_METADATA_KEYS,
    LEASES,
    RESOURCES,
    ResourceType,
    build_metadata,
    format_time,
)

# {"metadata": {...}, "spec": {...}} plus "status" for kinds that have one; no kind/apiVersion
StoredObject = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace, name), which sorts like etcd keys

DEFAULT_EVENT_WINDOW = 20_000
BULK_BATCH = 1000
EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})


class WatchEvent:
    """One line of every matching watch stream, serialized once when the write happens."""

    __slots__ = ("labels", "line", "name", "namespace", "resource", "resource_version")

    def __init__(
        self,
        resource_version: int,
        resource: str,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        line: bytes,
    ) -> None:
        self.resource_version = resource_version
        self.resource = resource  # plural; "" for injected lines every watch receives
        self.namespace = namespace
        self.name = name
        self.labels = labels
        self.line = line


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[StoredObject]
    resource_version: int
    continue_token: str | None
    remaining_item_count: int | None


def watch_line(resource: ResourceType, event_type: str, obj: StoredObject, version: str) -> bytes:
    """`{"type": ..., "object": ...}` plus newline; watch objects carry kind and apiVersion."""
    return orjson.dumps(
        {"type": event_type, "object": with_kind(resource, obj, version)},
        option=orjson.OPT_APPEND_NEWLINE,
    )


def with_kind(resource: ResourceType, obj: StoredObject, version: str) -> dict[str, Any]:
    full = {
        "kind": resource.kind,
        "apiVersion": resource.api_version(version),
        "metadata": obj["metadata"],
        "spec": obj["spec"],
    }
    if "status" in obj:
        full["status"] = obj["status"]
    return full


class WatchSubscription:
    """A cursor into the event log for one watch stream."""

    def __init__(
        self,
        store: StoreBase,
        watch_id: int,
        position: int,
        epoch: int,
        initial_objects: list[StoredObject],
    ) -> None:
        self._store = store
        self._id = watch_id
        self._position = position
        self._epoch = epoch
        self.initial_objects = initial_objects  # synthetic ADDED for a watch from "now"
        self.closed = False

    def _check_closed_locked(self) -> bool:
        store = self._store
        if self._epoch != store._watch_epoch or self._position < store._first_event_index:
            self.closed = True
        return self.closed

    def next_batch(self, timeout: float, max_events: int = BULK_BATCH) -> list[WatchEvent]:
        """Events after the cursor; waits up to `timeout` when there are none. [] if closed."""
        store = self._store
        with store._lock:
            if self._check_closed_locked():
                return []
            if self._position == store._first_event_index + len(store._events):
                store._events_added.wait(timeout)
                if self._check_closed_locked():
                    return []
            start = self._position - store._first_event_index
            batch = store._events[start : start + max_events]
            self._position += len(batch)
            store._watch_positions[self._id] = self._position
            if batch and store._producers_waiting:
                store._events_consumed.notify_all()
            return batch

    def bookmark_resource_version(self) -> int:
        """The newest resourceVersion this watch has seen everything up to."""
        store = self._store
        with store._lock:
            end = store._first_event_index + len(store._events)
            if self._position >= end:
                return store._resource_version
            index = self._position - 1 - store._first_event_index
            if index >= 0:
                return store._events[index].resource_version
            return store._watchable_since_rv

    def close(self) -> None:
        store = self._store
        with store._lock:
            self.closed = True
            store._watch_positions.pop(self._id, None)
            if store._producers_waiting:
                store._events_consumed.notify_all()


class StoreBase:
    """The objects, the resourceVersion counter and the event log, with the primitives every
    write goes through (`*_locked`: call them holding `_lock`)."""

    def __init__(
        self, *, event_window: int = DEFAULT_EVENT_WINDOW, clock: Callable[[], float] = time.time
    ) -> None:
        if event_window < 1:
            raise ValueError("event_window must be at least 1")
        self.event_window = event_window
        self._clock = clock
        self._lock = threading.Lock()
        self._events_added = threading.Condition(self._lock)
        self._events_consumed = threading.Condition(self._lock)
        self._objects: dict[str, dict[ObjectKey, StoredObject]] = {
            plural: {} for plural in RESOURCES
        }
        self._sorted_keys: dict[str, list[ObjectKey] | None] = dict.fromkeys(RESOURCES)
        self._events: list[WatchEvent] = []
        self._first_event_index = 0  # absolute index of _events[0]; cursors are absolute
        self._resource_version = 0
        self._watchable_since_rv = 0  # every event with a newer resourceVersion is retained
        self._compacted_rv = 0  # continue tokens older than this expire, as after etcd compaction
        self._watch_positions: dict[int, int] = {}
        self._next_watch_id = 0
        self._watch_epoch = 0
        self._producers_waiting = 0
        self._renewal_cursor = 0

    # --- introspection ------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._resource_version

    @property
    def open_watch_count(self) -> int:
        with self._lock:
            return len(self._watch_positions)

    def count(self, resource: ResourceType = LEASES, namespace: str | None = None) -> int:
        with self._lock:
            objects = self._objects[resource.plural]
            if namespace is None:
                return len(objects)
            return sum(1 for object_namespace, _ in objects if object_namespace == namespace)

    # --- internals ----------------------------------------------------------------------

    def _keys_locked(self, resource: ResourceType) -> list[ObjectKey]:
        keys = self._sorted_keys[resource.plural]
        if keys is None:
            keys = sorted(self._objects[resource.plural])
            self._sorted_keys[resource.plural] = keys
        return keys

    def _key_range_locked(
        self, resource: ResourceType, namespace: str | None
    ) -> tuple[list[ObjectKey], int, int]:
        keys = self._keys_locked(resource)
        if namespace is None:
            return keys, 0, len(keys)
        low = bisect.bisect_left(keys, (namespace, ""))
        # (namespace + "\0",) sorts after every (namespace, name) and before the next namespace.
        high = bisect.bisect_left(keys, (namespace + "\x00",))
        return keys, low, high

    def _commit_locked(
        self,
        resource: ResourceType,
        key: ObjectKey,
        obj: StoredObject,
        resource_version: int,
        event_type: str,
        *,
        notify: bool = True,
    ) -> None:
        objects = self._objects[resource.plural]
        if event_type == "DELETED":
            del objects[key]
            self._sorted_keys[resource.plural] = None
        else:
            if key not in objects:
                self._sorted_keys[resource.plural] = None
            objects[key] = obj
        self._resource_version = resource_version
        self._events.append(
            WatchEvent(
                resource_version,
                resource.plural,
                key[0],
                key[1],
                obj["metadata"].get("labels") or EMPTY_LABELS,
                watch_line(resource, event_type, obj, resource.storage_version),
            )
        )
        if notify:
            self._after_append_locked()

    def _after_append_locked(self) -> None:
        # Trim in steps of half a window so the O(n) list deletion stays amortized.
        if len(self._events) > self.event_window + self.event_window // 2:
            drop = len(self._events) - self.event_window
            self._watchable_since_rv = self._events[drop - 1].resource_version
            del self._events[:drop]
            self._first_event_index += drop
        self._events_added.notify_all()

    def _new_object_locked(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        client_metadata: Mapping[str, Any],
        spec: dict[str, Any],
        *,
        created_at: float | None = None,
        status: dict[str, Any] | None = None,
    ) -> StoredObject:
        key = (namespace, name)
        if key in self._objects[resource.plural]:
            raise errors.already_exists(resource.plural, name, resource.group)
        resource_version = self._resource_version + 1
        metadata = build_metadata(
            name=name,
            namespace=namespace,
            uid=str(uuid.uuid4()),
            resource_version=resource_version,
            creation_timestamp=format_time(self._clock() if created_at is None else created_at),
            client_metadata=client_metadata,
        )
        obj = {"metadata": metadata, "spec": spec}
        if resource.has_status:
            obj["status"] = status or {}
        self._commit_locked(resource, key, obj, resource_version, "ADDED")
        return obj

    def _replace_object_locked(
        self,
        resource: ResourceType,
        old: StoredObject,
        client_metadata: Mapping[str, Any],
        spec: dict[str, Any],
        status: dict[str, Any] | None = None,
    ) -> StoredObject:
        """Write a new version; `status` None keeps the old status (a main-resource write)."""
        old_metadata = old["metadata"]
        if status is None:
            status = old.get("status")
        unchanged = (
            spec == old["spec"]
            and status == old.get("status")
            and all(
                client_metadata.get(key) == old_metadata.get(key) for key in CLIENT_METADATA_KEYS
            )
        )
        if unchanged:
            # etcd skips a write whose bytes are identical: no new resourceVersion, no event.
            return old
        resource_version = self._resource_version + 1
        metadata = build_metadata(
            name=old_metadata["name"],
            namespace=old_metadata.get("namespace", ""),
            uid=old_metadata["uid"],
            resource_version=resource_version,
            creation_timestamp=old_metadata["creationTimestamp"],
            client_metadata=client_metadata,
        )
        obj = {"metadata": metadata, "spec": spec}
        if status is not None:
            obj["status"] = status
        key = (old_metadata.get("namespace", ""), old_metadata["name"])
        self._commit_locked(resource, key, obj, resource_version, "MODIFIED")
        return obj

    def _delete_object_locked(self, resource: ResourceType, old: StoredObject) -> StoredObject:
        resource_version = self._resource_version + 1
        # The DELETED event carries the deletion's own resourceVersion (watch_stream.jsonl).
        final = {**old, "metadata": {**old["metadata"], "resourceVersion": str(resource_version)}}
        key = (old["metadata"].get("namespace", ""), old["metadata"]["name"])
        self._commit_locked(resource, key, final, resource_version, "DELETED")
        return final

    def _get_locked(self, resource: ResourceType, namespace: str, name: str) -> StoredObject:
        obj = self._objects[resource.plural].get((namespace, name))
        if obj is None:
            raise errors.not_found(resource.plural, name, resource.group)
        return obj
