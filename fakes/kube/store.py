"""The apiserver's verbs (get, list, create, update, patch, delete, watch; for Nodes also
their status subresource) over the stored objects, and the direct operations tests and
scenarios use to set a cluster up."""

from __future__ import annotations

import base64
import binascii
import bisect
from collections.abc import Mapping
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.lease_store import LeaseOperations
from fakes.kube.node_schema import admit_new_node
from fakes.kube.node_store import NodeOperations
from fakes.kube.node_traffic import NodeTraffic
from fakes.kube.patches import Patcher
from fakes.kube.resources import (
    NODES,
    ResourceType,
    clean_client_metadata,
    clean_spec,
    clean_status,
    validate_name,
    validate_namespace,
    validate_spec,
)
from fakes.kube.routes import UpdateRequest, request_metadata
from fakes.kube.selectors import ObjectFilter
from fakes.kube.storage import (
    EMPTY_LABELS,
    ListPage,
    StoredObject,
    WatchEvent,
    WatchSubscription,
    with_kind,
)

_TOO_OLD_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)


class ObjectStore(NodeTraffic, NodeOperations, LeaseOperations):
    """Leases, LeaseCandidates and Nodes with etcd-like resourceVersions and a bounded watch
    history.

    Every public method is thread-safe. Objects handed out by the `*_lease` / `*_candidate` /
    `*_node` helpers are deep copies with `kind` and `apiVersion`, like a GET answer.
    Cluster-scoped objects (Nodes) are kept under the namespace "".
    """

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
                    key[0], key[1], obj["metadata"].get("labels") or EMPTY_LABELS
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
        metadata = request_metadata(resource, body, version)
        if resource.namespaced and metadata.get("namespace") not in (None, "", namespace):
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        client_metadata = clean_client_metadata(resource, metadata, version)
        spec = clean_spec(resource, body.get("spec"), version)
        if resource is NODES:
            spec = admit_new_node(spec)
        # A Node is created with the status its kubelet registers (unlike a Pod's).
        status = (
            clean_status(resource, body.get("status"), version) if resource.has_status else None
        )
        name = metadata.get("name") or ""
        if not isinstance(name, str):
            raise errors.bad_request("metadata.name must be a string")
        with self._lock:
            problems = [
                *validate_name(name),
                *(validate_namespace(namespace) if resource.namespaced else []),
                *validate_spec(resource, spec, None),
            ]
            if problems:
                raise errors.invalid(resource.kind, name, problems, resource.group)
            return self._new_object_locked(
                resource, namespace, name, client_metadata, spec, status=status
            )

    def update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        version: str,
        subresource: str | None = None,
    ) -> StoredObject:
        """PUT semantics; `metadata.resourceVersion` in the body is an optimistic lock."""
        request = UpdateRequest.from_body(resource, namespace, name, body, version)
        with self._lock:
            # Neither kind allows create-on-update: a PUT to a missing name is a 404.
            old = self._get_locked(resource, namespace, name)
            return self._update_locked(resource, old, request, subresource)

    def patch(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        patcher: Patcher,
        *,
        version: str,
        subresource: str | None = None,
    ) -> StoredObject:
        """PATCH: the patch is applied to the current object under the lock, so concurrent
        patches never conflict (the apiserver retries them internally to the same effect)."""
        with self._lock:
            old = self._get_locked(resource, namespace, name)
            patched = patcher(_deep_copy(with_kind(resource, old, version)))
            request = UpdateRequest.from_body(resource, namespace, name, patched, version)
            return self._update_locked(resource, old, request, subresource)

    def _update_locked(
        self,
        resource: ResourceType,
        old: StoredObject,
        request: UpdateRequest,
        subresource: str | None,
    ) -> StoredObject:
        old_metadata = old["metadata"]
        name = old_metadata["name"]
        if request.uid and request.uid != old_metadata["uid"]:
            raise errors.conflict(
                resource.plural,
                name,
                f"Precondition failed: UID in precondition: {request.uid}, "
                f"UID in object meta: {old_metadata['uid']}",
                resource.group,
            )
        if request.resource_version not in (None, old_metadata["resourceVersion"]):
            raise errors.conflict(resource.plural, name, group=resource.group)
        if subresource == "status":
            # A 1.24 status write keeps the spec but takes the metadata (labels, annotations)
            # as sent; later versions reset that too.
            return self._replace_object_locked(
                resource, old, request.client_metadata, old["spec"], request.status
            )
        problems = validate_spec(resource, request.spec, old["spec"])
        if problems:
            raise errors.invalid(resource.kind, name, problems, resource.group)
        # The main resource leaves the status alone (None keeps the old one).
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
                        key[0], key[1], obj["metadata"].get("labels") or EMPTY_LABELS
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

    # --- operations for tests, scenarios and benchmarks (Leases: lease_store) ----------

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

    def forget_watch_history(self) -> int:
        """What a restarted kube-apiserver's watch cache knows: nothing before now. Its cache
        starts from a list at the current revision, so a watch from an older
        resourceVersion gets `410 Expired` ("too old resource version: 201 (253)", seen on a
        real 1.24), while etcd keeps its history: continue tokens still work. Returns the
        revision watches may start from."""
        with self._lock:
            self._first_event_index += len(self._events)
            self._events.clear()
            self._watchable_since_rv = self._resource_version
            return self._resource_version

    def inject_watch_line(self, line: bytes) -> None:
        """Send raw bytes as one line to every open watch (garbage, unknown types, ...)."""
        if not line.endswith(b"\n"):
            line += b"\n"
        with self._lock:
            self._events.append(WatchEvent(self._resource_version, "", "", "", EMPTY_LABELS, line))
            self._after_append_locked()

    def end_watches(self) -> None:
        """End every open watch stream cleanly, as an apiserver restart or timeout does."""
        with self._lock:
            self._watch_epoch += 1
            self._events_added.notify_all()


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


def _deep_copy(value: dict[str, Any]) -> dict[str, Any]:
    return orjson.loads(orjson.dumps(value))
