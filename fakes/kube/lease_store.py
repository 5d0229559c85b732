"""Leases and LeaseCandidates set directly (thread-safe), as tests, scenarios and benchmarks
set a cluster up; a client sees ADDED / MODIFIED / DELETED events as for any write."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.resources import (
    LEASE_CANDIDATES,
    LEASES,
    ResourceType,
    clean_spec,
    validate_name,
    validate_namespace,
    validate_spec,
)
from fakes.kube.storage import StoreBase, with_kind


class LeaseOperations(StoreBase):
    """Objects handed out are deep copies with `kind` and `apiVersion`, like a GET answer."""

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
                raise errors.invalid(resource.kind, name, problems, resource.group)
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


def _deep_copy(value: dict[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = orjson.loads(orjson.dumps(value))
    return copied
