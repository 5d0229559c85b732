"""In-memory objects, one resourceVersion counter and the watch event log.

It plays etcd plus the apiserver's registry: every write gets the next global
resourceVersion and appends one pre-serialized watch event, so a watch is a cursor into a
list and costs nothing per event beyond filtering and a socket write. Stored objects are
copy-on-write (a write builds new `metadata` and `spec` dicts and never mutates old ones),
so readers may serialize a reference they took under the lock after releasing it.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextlib
import gc
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.resources import (
    CLIENT_METADATA_KEYS,
    LEASE_CANDIDATES,
    LEASES,
    RESOURCES,
    ResourceType,
    build_metadata,
    clean_client_metadata,
    clean_spec,
    format_micro_time,
    format_time,
    normalize_micro_time,
    validate_name,
    validate_namespace,
    validate_spec,
)
from fakes.kube.selectors import ObjectFilter

StoredObject = dict[str, Any]  # {"metadata": {...}, "spec": {...}}, no kind/apiVersion
ObjectKey = tuple[str, str]  # (namespace, name), which sorts like etcd keys

DEFAULT_EVENT_WINDOW = 20_000
# How long a bulk producer waits for a slow watcher before letting the log outrun it
# (the watcher is then cut off and must resume, as a real apiserver does to slow watchers).
SLOW_WATCHER_PATIENCE_SECONDS = 10.0
_BULK_BATCH = 1000
_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
_TOO_OLD_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


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
class PreparedRenewals:
    """Renewal events built ahead of time (see ObjectStore.prepare_renewals)."""

    namespace: str
    base_resource_version: int  # the events continue from here
    first_cursor: int  # round-robin position of the first renewal
    key_count: int  # leases in the namespace when prepared
    keys: list[ObjectKey]
    objects: list[StoredObject]
    events: list[WatchEvent]

    def __len__(self) -> int:
        return len(self.events)


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
    return {
        "kind": resource.kind,
        "apiVersion": resource.api_version(version),
        "metadata": obj["metadata"],
        "spec": obj["spec"],
    }


def _deep_copy(value: dict[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(value))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic GC while bulk-building acyclic events.

    With a few hundred thousand live objects (the retained log) every generation-2 pass is
    costly, and building events triggers them: pausing makes the bulk paths 2-4x faster.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def encode_continue(resource_version: int, start: str) -> str:
    """The apiserver's opaque token: base64url of {"v","rv","start"} (see list_limit1.json)."""
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": resource_version, "start": start})
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        decoded = orjson.loads(raw)
        if decoded.get("v") != "meta.k8s.io/v1":
            raise ValueError("incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
        resource_version, start = int(decoded["rv"]), str(decoded["start"])
    except (
        binascii.Error,
        orjson.JSONDecodeError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
    ) as error:
        raise errors.bad_request(f"continue key is not valid: {error}") from None
    if resource_version <= 0 or not start:
        raise errors.bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion"
        )
    return resource_version, start


class WatchSubscription:
    """A cursor into the event log for one watch stream."""

    def __init__(
        self,
        store: ObjectStore,
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

    def next_batch(self, timeout: float, max_events: int = _BULK_BATCH) -> list[WatchEvent]:
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


class ObjectStore:
    """Leases and LeaseCandidates with etcd-like resourceVersions and a bounded watch history.

    Every public method is thread-safe. Objects handed out by the `*_lease` / `*_candidate`
    helpers are deep copies with `kind` and `apiVersion`, like a GET answer.
    """

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
                obj["metadata"].get("labels") or _EMPTY_LABELS,
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
    ) -> StoredObject:
        key = (namespace, name)
        if key in self._objects[resource.plural]:
            raise errors.already_exists(resource.plural, name)
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
        self._commit_locked(resource, key, obj, resource_version, "ADDED")
        return obj

    def _replace_object_locked(
        self,
        resource: ResourceType,
        old: StoredObject,
        client_metadata: Mapping[str, Any],
        spec: dict[str, Any],
    ) -> StoredObject:
        old_metadata = old["metadata"]
        unchanged = spec == old["spec"] and all(
            client_metadata.get(key) == old_metadata.get(key) for key in CLIENT_METADATA_KEYS
        )
        if unchanged:
            # etcd skips a write whose bytes are identical: no new resourceVersion, no event.
            return old
        resource_version = self._resource_version + 1
        metadata = build_metadata(
            name=old_metadata["name"],
            namespace=old_metadata["namespace"],
            uid=old_metadata["uid"],
            resource_version=resource_version,
            creation_timestamp=old_metadata["creationTimestamp"],
            client_metadata=client_metadata,
        )
        obj = {"metadata": metadata, "spec": spec}
        key = (old_metadata["namespace"], old_metadata["name"])
        self._commit_locked(resource, key, obj, resource_version, "MODIFIED")
        return obj

    def _delete_object_locked(self, resource: ResourceType, old: StoredObject) -> StoredObject:
        resource_version = self._resource_version + 1
        # The DELETED event carries the deletion's own resourceVersion (watch_stream.jsonl).
        final = {
            "metadata": {**old["metadata"], "resourceVersion": str(resource_version)},
            "spec": old["spec"],
        }
        key = (old["metadata"]["namespace"], old["metadata"]["name"])
        self._commit_locked(resource, key, final, resource_version, "DELETED")
        return final

    def _get_locked(self, resource: ResourceType, namespace: str, name: str) -> StoredObject:
        obj = self._objects[resource.plural].get((namespace, name))
        if obj is None:
            raise errors.not_found(resource.plural, name)
        return obj

    # --- the API server's verbs ---------------------------------------------------------

    def get(self, resource: ResourceType, namespace: str, name: str) -> StoredObject:
        """The stored object itself: callers must not mutate it."""
        with self._lock:
            return self._get_locked(resource, namespace, name)

    def list_page(
        self,
        resource: ResourceType,
        object_filter: ObjectFilter,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> ListPage:
        with self._lock:
            if continue_token:
                list_rv, start = decode_continue(continue_token)
                if list_rv < self._compacted_rv:
                    body = errors.status_body(410, "Expired", _TOO_OLD_CONTINUE)
                    body["metadata"] = {"continue": encode_continue(self._resource_version, start)}
                    raise errors.ApiError(body)
            else:
                list_rv, start = self._resource_version, ""
            keys, low, high = self._key_range_locked(resource, object_filter.namespace)
            if start:
                if object_filter.namespace is not None:
                    start_key = (object_filter.namespace, start)
                else:
                    namespace, _, name = start.partition("/")
                    start_key = (namespace, name)
                low = max(low, bisect.bisect_left(keys, start_key))
            objects = self._objects[resource.plural]
            items: list[StoredObject] = []
            index = low
            everything = object_filter.selects_everything or (
                object_filter.namespace is not None and not object_filter.has_selectors
            )
            while index < high and (not limit or len(items) < limit):
                key = keys[index]
                index += 1
                obj = objects[key]
                if everything or object_filter.matches(
                    key[0], key[1], obj["metadata"].get("labels") or _EMPTY_LABELS
                ):
                    items.append(obj)
            token: str | None = None
            remaining: int | None = None
            if limit and items and index < high:
                last_namespace, last_name = keys[index - 1]
                start_after = (
                    f"{last_name}\x00"
                    if object_filter.namespace is not None
                    else f"{last_namespace}/{last_name}\x00"
                )
                token = encode_continue(list_rv, start_after)
                # Only countable without selectors; the apiserver omits it otherwise.
                remaining = None if object_filter.has_selectors else high - index
            return ListPage(items, list_rv, token, remaining)

    def create(
        self,
        resource: ResourceType,
        namespace: str,
        body: Mapping[str, Any],
        *,
        version: str,
    ) -> StoredObject:
        metadata = _request_metadata(resource, body, version)
        if metadata.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        client_metadata = clean_client_metadata(resource, metadata, version)
        spec = clean_spec(resource, body.get("spec"), version)
        name = metadata.get("name") or ""
        if not isinstance(name, str):
            raise errors.bad_request("metadata.name must be a string")
        with self._lock:
            problems = [
                *validate_name(name),
                *validate_namespace(namespace),
                *validate_spec(resource, spec, None),
            ]
            if problems:
                raise errors.invalid(resource.kind, name, problems)
            return self._new_object_locked(resource, namespace, name, client_metadata, spec)

    def update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        version: str,
    ) -> StoredObject:
        """PUT semantics; `metadata.resourceVersion` in the body is an optimistic lock."""
        request = _UpdateRequest.from_body(resource, namespace, name, body, version)
        with self._lock:
            # Leases do not allow create-on-update: a PUT to a missing name is a 404.
            old = self._get_locked(resource, namespace, name)
            old_metadata = old["metadata"]
            if request.uid and request.uid != old_metadata["uid"]:
                raise errors.conflict(
                    resource.plural,
                    name,
                    f"Precondition failed: UID in precondition: {request.uid}, "
                    f"UID in object meta: {old_metadata['uid']}",
                )
            if request.resource_version not in (None, old_metadata["resourceVersion"]):
                raise errors.conflict(resource.plural, name)
            problems = validate_spec(resource, request.spec, old["spec"])
            if problems:
                raise errors.invalid(resource.kind, name, problems)
            return self._replace_object_locked(resource, old, request.client_metadata, request.spec)

    def delete(self, resource: ResourceType, namespace: str, name: str) -> StoredObject:
        with self._lock:
            return self._delete_object_locked(resource, self._get_locked(resource, namespace, name))

    def subscribe(
        self, resource: ResourceType, object_filter: ObjectFilter, since: int | None
    ) -> WatchSubscription:
        """A watch cursor after resourceVersion `since`; None means "from now", with the
        current objects as synthetic ADDED events, as the apiserver does for "" and "0".

        Raises ApiError 410 Expired for history that is gone and 504 for a resourceVersion
        this store never issued (a client resuming across a restart of the fake).
        """
        with self._lock:
            end = self._first_event_index + len(self._events)
            initial: list[StoredObject] = []
            if since is None:
                keys, low, high = self._key_range_locked(resource, object_filter.namespace)
                objects = self._objects[resource.plural]
                for key in keys[low:high]:
                    obj = objects[key]
                    if object_filter.matches(
                        key[0], key[1], obj["metadata"].get("labels") or _EMPTY_LABELS
                    ):
                        initial.append(obj)
                position = end
            elif since > self._resource_version:
                raise errors.resource_version_too_large(since, self._resource_version)
            elif since < self._watchable_since_rv:
                raise errors.expired(
                    f"too old resource version: {since} ({self._watchable_since_rv})"
                )
            else:
                position = self._first_event_index + bisect.bisect_right(
                    self._events, since, key=lambda event: event.resource_version
                )
            watch_id = self._next_watch_id
            self._next_watch_id += 1
            self._watch_positions[watch_id] = position
            return WatchSubscription(self, watch_id, position, self._watch_epoch, initial)

    # --- operations for tests, scenarios and benchmarks ---------------------------------

    def _put(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        *,
        labels: Mapping[str, str] | None,
        annotations: Mapping[str, str] | None,
        owner_references: Iterable[Mapping[str, Any]] | None,
        created_at: float | datetime | None,
    ) -> dict[str, Any]:
        cleaned = clean_spec(resource, dict(spec), resource.storage_version, python_values=True)
        problems = [*validate_name(name), *validate_namespace(namespace)]
        with self._lock:
            old = self._objects[resource.plural].get((namespace, name))
            problems += validate_spec(resource, cleaned, old["spec"] if old else None)
            if problems:
                raise errors.invalid(resource.kind, name, problems)
            client_metadata: dict[str, Any] = {}
            previous = old["metadata"] if old else {}
            for key, given in (
                ("labels", labels),
                ("annotations", annotations),
                ("ownerReferences", owner_references),
            ):
                if given is None:
                    if key in previous:
                        client_metadata[key] = previous[key]
                elif given:
                    client_metadata[key] = (
                        dict(given) if isinstance(given, Mapping) else [dict(i) for i in given]
                    )
            if "finalizers" in previous:
                client_metadata["finalizers"] = previous["finalizers"]
            if old is None:
                created = created_at.timestamp() if isinstance(created_at, datetime) else created_at
                obj = self._new_object_locked(
                    resource, namespace, name, client_metadata, cleaned, created_at=created
                )
            else:
                obj = self._replace_object_locked(resource, old, client_metadata, cleaned)
            return _deep_copy(with_kind(resource, obj, resource.storage_version))

    def apply_lease(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        *,
        annotations: Mapping[str, str] | None = None,
        owner_references: Iterable[Mapping[str, Any]] | None = None,
        created_at: float | datetime | None = None,
    ) -> dict[str, Any]:
        """Create the Lease or replace its spec (ADDED / MODIFIED; no event if unchanged).

        MicroTime fields accept RFC 3339 strings, aware datetimes or epoch seconds. Labels,
        annotations and ownerReferences are kept when passed as None. `created_at` sets
        creationTimestamp of a new Lease (for demo objects that "exist for days").
        """
        return self._put(
            LEASES,
            namespace,
            name,
            spec,
            labels=labels,
            annotations=annotations,
            owner_references=owner_references,
            created_at=created_at,
        )

    def apply_candidate(
        self,
        namespace: str,
        name: str,
        spec: Mapping[str, Any],
        labels: Mapping[str, str] | None = None,
        *,
        created_at: float | datetime | None = None,
    ) -> dict[str, Any]:
        """Create or replace a LeaseCandidate (same rules as apply_lease)."""
        return self._put(
            LEASE_CANDIDATES,
            namespace,
            name,
            spec,
            labels=labels,
            annotations=None,
            owner_references=None,
            created_at=created_at,
        )

    def _get_copy(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects[resource.plural].get((namespace, name))
            if obj is None:
                return None
            return _deep_copy(with_kind(resource, obj, resource.storage_version))

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_copy(LEASES, namespace, name)

    def get_candidate(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_copy(LEASE_CANDIDATES, namespace, name)

    def _list_copies(self, resource: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        with self._lock:
            keys, low, high = self._key_range_locked(resource, namespace)
            objects = self._objects[resource.plural]
            chosen = [objects[key] for key in keys[low:high]]
        return [_deep_copy(with_kind(resource, obj, resource.storage_version)) for obj in chosen]

    def list_leases(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._list_copies(LEASES, namespace)

    def list_candidates(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return self._list_copies(LEASE_CANDIDATES, namespace)

    def _delete_if_present(self, resource: ResourceType, namespace: str, name: str) -> bool:
        with self._lock:
            obj = self._objects[resource.plural].get((namespace, name))
            if obj is None:
                return False
            self._delete_object_locked(resource, obj)
            return True

    def delete_lease(self, namespace: str, name: str) -> bool:
        """Delete (DELETED event); False when there was nothing to delete."""
        return self._delete_if_present(LEASES, namespace, name)

    def _renew_locked(self, key: ObjectKey, renew_time: str, *, notify: bool) -> bool:
        old = self._objects[LEASES.plural].get(key)
        if old is None:
            return False
        resource_version = self._resource_version + 1
        metadata = {**old["metadata"], "resourceVersion": str(resource_version)}
        spec = {**old["spec"], "renewTime": renew_time}
        self._commit_locked(
            LEASES,
            key,
            {"metadata": metadata, "spec": spec},
            resource_version,
            "MODIFIED",
            notify=notify,
        )
        return True

    def renew_lease(
        self, namespace: str, name: str, renew_time: str | datetime | float | None = None
    ) -> bool:
        """Set renewTime (now by default), as a holder's heartbeat does. False if missing."""
        stamp = (
            format_micro_time(self._clock())
            if renew_time is None
            else normalize_micro_time(renew_time)
        )
        with self._lock:
            return self._renew_locked((namespace, name), stamp, notify=True)

    def seed_node_leases(
        self,
        count: int,
        *,
        namespace: str = "kube-node-lease",
        name_format: str = "node-{index:05d}",
        lease_duration_seconds: int = 40,
    ) -> list[str]:
        """Create `count` kubelet-style node leases at once (one ADDED each); their names."""
        now = self._clock()
        stamp = format_micro_time(now)
        names = [name_format.format(index=index) for index in range(count)]
        with self._lock:
            for name in names:
                spec = {
                    "holderIdentity": name,
                    "leaseDurationSeconds": lease_duration_seconds,
                    "renewTime": stamp,
                }
                owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": str(uuid.uuid4())}
                self._new_object_locked(
                    LEASES, namespace, name, {"ownerReferences": [owner]}, spec, created_at=now
                )
        return names

    def emit_renewals(
        self,
        count: int,
        *,
        namespace: str = "kube-node-lease",
        rate: float | None = None,
    ) -> int:
        """Renew the leases of `namespace` round-robin, `count` MODIFIED events in total.

        With `rate` None it writes as fast as it can, in batches of 1,000 under one lock
        acquisition, but never more than half the event window ahead of the slowest open
        watch (so a benchmark measures its client, not the log's trimming). With a `rate`
        (events per second) it paces itself like a cluster of rate * 10 nodes. Returns the
        resourceVersion of the last renewal.
        """
        with self._lock:
            _, low, high = self._key_range_locked(LEASES, namespace)
            keys = self._keys_locked(LEASES)[low:high]
        if not keys:
            raise ValueError(f"no leases in namespace {namespace!r} to renew")
        batch = _BULK_BATCH if rate is None else max(1, min(_BULK_BATCH, int(rate / 100)))
        started = time.monotonic()
        emitted = 0
        while emitted < count:
            size = min(batch, count - emitted)
            if rate is not None:
                delay = started + emitted / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self._wait_for_slow_watches()
            stamp = format_micro_time(self._clock())
            with self._lock, _collector_paused():
                cursor = self._renewal_cursor
                for offset in range(size):
                    self._renew_locked(keys[(cursor + offset) % len(keys)], stamp, notify=False)
                self._renewal_cursor = (cursor + size) % len(keys)
                self._after_append_locked()
            emitted += size
        return self.resource_version

    def prepare_renewals(
        self, count: int, *, namespace: str = "kube-node-lease"
    ) -> PreparedRenewals:
        """Build `count` round-robin renewal events without publishing them.

        The costly part (copying and serializing objects) happens here, so a benchmark
        can do it before its clock starts; `publish()` then only appends. The events
        continue from the current resourceVersion; if anything else writes in between,
        `publish()` prepares them again.
        """
        with self._lock:
            _, low, high = self._key_range_locked(LEASES, namespace)
            keys = self._keys_locked(LEASES)[low:high]
            current = {key: self._objects[LEASES.plural][key] for key in keys}
            base = self._resource_version
            cursor = self._renewal_cursor
        if not keys:
            raise ValueError(f"no leases in namespace {namespace!r} to renew")
        chosen: list[ObjectKey] = []
        objects: list[StoredObject] = []
        events: list[WatchEvent] = []
        dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE
        kind, api_version = LEASES.kind, LEASES.api_version(LEASES.storage_version)
        stamp = ""
        with _collector_paused():
            for offset in range(count):
                if offset % _BULK_BATCH == 0:
                    stamp = format_micro_time(self._clock())
                key = keys[(cursor + offset) % len(keys)]
                resource_version = base + offset + 1
                old = current[key]
                metadata = {**old["metadata"], "resourceVersion": str(resource_version)}
                spec = {**old["spec"], "renewTime": stamp}
                obj = {"metadata": metadata, "spec": spec}
                current[key] = obj
                event = {
                    "type": "MODIFIED",
                    "object": {
                        "kind": kind,
                        "apiVersion": api_version,
                        "metadata": metadata,
                        "spec": spec,
                    },
                }
                labels = metadata.get("labels") or _EMPTY_LABELS
                chosen.append(key)
                objects.append(obj)
                events.append(
                    WatchEvent(
                        resource_version,
                        LEASES.plural,
                        key[0],
                        key[1],
                        labels,
                        dumps(event, option=option),
                    )
                )
        return PreparedRenewals(namespace, base, cursor, len(keys), chosen, objects, events)

    def publish(self, prepared: PreparedRenewals) -> int:
        """Make prepared renewals visible; returns the last resourceVersion.

        Appends in slices of half the event window, waiting between slices for open
        watches to keep up (as emit_renewals does), so no watcher is cut off. If another
        writer got in first, the rest is prepared again with fresh resourceVersions.
        """
        step = max(1, self.event_window // 2)
        leases = self._objects[LEASES.plural]
        total = len(prepared.events)
        for start in range(0, total, step):
            self._wait_for_slow_watches()
            end = min(start + step, total)
            with self._lock:
                if self._resource_version != prepared.base_resource_version + start:
                    stale = True
                else:
                    stale = False
                    for key, obj in zip(
                        prepared.keys[start:end], prepared.objects[start:end], strict=True
                    ):
                        if key in leases:  # a lease deleted meanwhile stays deleted
                            leases[key] = obj
                    self._events.extend(prepared.events[start:end])
                    self._resource_version = prepared.base_resource_version + end
                    self._renewal_cursor = (prepared.first_cursor + end) % prepared.key_count
                    self._after_append_locked()
            if stale:
                rest = self.prepare_renewals(total - start, namespace=prepared.namespace)
                return self.publish(rest)
        return self.resource_version

    def _wait_for_slow_watches(self) -> None:
        limit = max(1, self.event_window // 2)
        deadline = time.monotonic() + SLOW_WATCHER_PATIENCE_SECONDS
        with self._lock:
            while self._watch_positions:
                end = self._first_event_index + len(self._events)
                if end - min(self._watch_positions.values()) <= limit:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._producers_waiting += 1
                try:
                    self._events_consumed.wait(min(remaining, 0.5))
                finally:
                    self._producers_waiting -= 1

    def compact(self) -> int:
        """Forget all history, like an etcd compaction at the current revision.

        Watches from any older resourceVersion then get `410 Expired`, as do continue tokens
        of lists taken before. Returns the compaction resourceVersion.
        """
        with self._lock:
            self._first_event_index += len(self._events)
            self._events.clear()
            self._watchable_since_rv = self._resource_version
            self._compacted_rv = self._resource_version
            return self._resource_version

    def inject_watch_line(self, line: bytes) -> None:
        """Send raw bytes as one line to every open watch (garbage, unknown types, ...)."""
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            self._events.append(WatchEvent(self._resource_version, "", "", "", _EMPTY_LABELS, line))
            self._after_append_locked()

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as an apiserver restart or timeout does."""
        with self._lock:
            self._watch_epoch += 1
            self._events_added.notify_all()


@dataclass(frozen=True, slots=True)
class _UpdateRequest:
    """A PUT body, decoded and type-checked before taking the store lock."""

    client_metadata: dict[str, Any]
    spec: dict[str, Any]
    resource_version: str | None
    uid: str | None

    @classmethod
    def from_body(
        cls, resource: ResourceType, namespace: str, name: str, body: Any, version: str
    ) -> _UpdateRequest:
        metadata = _request_metadata(resource, body, version)
        if metadata.get("name") not in (None, "", name):
            raise errors.bad_request(
                f"the name of the object ({metadata['name']}) does not match the name on "
                f"the URL ({name})"
            )
        if metadata.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        resource_version = metadata.get("resourceVersion")
        uid = metadata.get("uid")
        return cls(
            client_metadata=clean_client_metadata(resource, metadata, version),
            spec=clean_spec(resource, body.get("spec"), version),
            resource_version=str(resource_version) if resource_version else None,
            uid=str(uid) if uid else None,
        )


def _request_metadata(resource: ResourceType, body: Any, version: str) -> Mapping[str, Any]:
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
