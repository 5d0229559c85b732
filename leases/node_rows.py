"""Node rows as NodeIngestor writes them: bulk upserts, Ready history rows, soft deletions,
and the digest that tells a heartbeat (nothing stored changed) from a change.

Every function here runs inside the caller's transaction and knows nothing of batching.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from django.db import connection

from leases.models import ConditionStatus, Node, NodeReadyChange
from leases.node_parse import NodeObservation

INSERT_BATCH_SIZE = 1000
# The stored fields a digest covers, in the order of observation_digest's values. Not
# resource_version or observed_at: they change with every heartbeat and say nothing.
DIGEST_COLUMNS = (
    "uid",
    "labels",
    "created_at",
    "provider_id",
    "unschedulable",
    "taints",
    "conditions",
    "ready",
    "ready_since",
    "nodegroup_label",
    "kubelet_version",
    "internal_address",
)
NODE_UPDATE_FIELDS = [*DIGEST_COLUMNS, "resource_version", "observed_at", "deleted_at"]


@dataclass(slots=True)
class PendingReadyChange:
    """A NodeReadyChange row to be. `from_status == to_status` is a missed change: Ready's
    lastTransitionTime moved while its status stayed, so it changed and changed back while
    the dashboard was not watching (`transitioned_at` is the change back). The reason and
    message stay the node's own, as it reported them."""

    name: str
    from_status: str
    to_status: str
    reason: str
    message: str
    transitioned_at: datetime | None
    observed_at: datetime


@dataclass(frozen=True, slots=True)
class StoredNode:
    """What a restarted ingestor needs of a live row."""

    node_id: int
    name: str
    ready: ConditionStatus
    ready_since: datetime | None  # Ready's lastTransitionTime
    digest: bytes


def _digest(values: tuple[Any, ...]) -> bytes:
    # Sorted keys: PostgreSQL's jsonb gives maps back in its own order.
    data = orjson.dumps(values, option=orjson.OPT_SORT_KEYS | orjson.OPT_UTC_Z)
    return hashlib.blake2b(data, digest_size=16).digest()


def observation_digest(obs: NodeObservation) -> bytes:
    """A fingerprint of the fields a row stores; equal to its row's once written."""
    return _digest(
        (
            obs.uid,
            obs.labels,
            obs.created_at,
            obs.provider_id,
            obs.unschedulable,
            obs.taints,
            obs.conditions,
            obs.ready.status.value,
            obs.ready.last_transition_time,
            obs.nodegroup_label,
            obs.kubelet_version,
            obs.internal_address,
        )
    )


def stored_nodes(cluster_id: int) -> Iterator[StoredNode]:
    """The cluster's live rows, with the digest of what each stores."""
    rows = Node.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    for node_id, name, *values in rows.values_list("id", "name", *DIGEST_COLUMNS).iterator(
        chunk_size=2000
    ):
        yield StoredNode(
            node_id, name, ConditionStatus(values[7]), values[8], _digest(tuple(values))
        )


def upsert_nodes(
    cluster_id: int, observations: list[NodeObservation], now: datetime
) -> dict[str, int]:
    """Insert or update the rows (clearing deleted_at); their ids by name."""
    if not observations:
        return {}
    if connection.vendor == "postgresql":
        return _upsert_postgresql(cluster_id, observations, now)
    return _upsert_orm(cluster_id, observations, now)


def _upsert_postgresql(
    cluster_id: int, observations: list[NodeObservation], now: datetime
) -> dict[str, int]:
    """One INSERT .. SELECT FROM json_to_recordset(..) ON CONFLICT: the batch travels as one
    JSON document that PostgreSQL parses in C (as the Lease ingest does)."""
    payload = orjson.dumps(
        [
            {
                "name": obs.name,
                "uid": obs.uid,
                "labels": obs.labels,
                "created_at": obs.created_at,
                "provider_id": obs.provider_id,
                "unschedulable": obs.unschedulable,
                "taints": obs.taints,
                "conditions": obs.conditions,
                "ready": obs.ready.status.value,
                "ready_since": obs.ready.last_transition_time,
                "nodegroup_label": obs.nodegroup_label,
                "kubelet_version": obs.kubelet_version,
                "internal_address": obs.internal_address,
                "resource_version": obs.resource_version,
            }
            for obs in observations
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(_POSTGRESQL_UPSERT, [cluster_id, now, payload.decode()])
        return {name: pk for pk, name in cursor.fetchall()}


def _upsert_orm(
    cluster_id: int, observations: list[NodeObservation], now: datetime
) -> dict[str, int]:
    rows = [
        Node(
            cluster_id=cluster_id,
            name=obs.name,
            uid=obs.uid,
            labels=obs.labels,
            created_at=obs.created_at,
            provider_id=obs.provider_id,
            unschedulable=obs.unschedulable,
            taints=obs.taints,
            conditions=obs.conditions,
            ready=obs.ready.status,
            ready_since=obs.ready.last_transition_time,
            nodegroup_label=obs.nodegroup_label,
            kubelet_version=obs.kubelet_version,
            internal_address=obs.internal_address,
            resource_version=obs.resource_version,
            observed_at=now,
            deleted_at=None,
        )
        for obs in observations
    ]
    Node.objects.bulk_create(
        rows,
        batch_size=INSERT_BATCH_SIZE,
        update_conflicts=True,
        unique_fields=["cluster", "name"],
        update_fields=NODE_UPDATE_FIELDS,
    )
    ids = {row.name: row.pk for row in rows if row.pk is not None}
    missing = [row.name for row in rows if row.pk is None]
    if missing:
        # Backends that cannot return ids from an upsert: look them up once.
        found = Node.objects.filter(cluster_id=cluster_id, name__in=missing)
        ids.update(found.values_list("name", "id"))
    return ids


def write_ready_changes(changes: Iterable[PendingReadyChange], ids: dict[str, int]) -> int:
    """History rows for the changes whose node has a row; how many were written."""
    rows = [
        NodeReadyChange(
            node_id=ids[change.name],
            from_status=change.from_status,
            to_status=change.to_status,
            reason=change.reason,
            message=change.message,
            transitioned_at=change.transitioned_at,
            observed_at=change.observed_at,
        )
        for change in changes
        # Created, changed and deleted within one batch: no row ever existed.
        if change.name in ids
    ]
    NodeReadyChange.objects.bulk_create(rows, batch_size=INSERT_BATCH_SIZE)
    return len(rows)


def mark_nodes_deleted(cluster_id: int, names: Iterable[str], now: datetime) -> int:
    """Soft-delete: the row and its Ready history stay, with deleted_at set."""
    names = list(names)
    if not names:
        return 0
    return Node.objects.filter(
        cluster_id=cluster_id, name__in=names, deleted_at__isnull=True
    ).update(deleted_at=now)


_POSTGRESQL_UPSERT = """
INSERT INTO leases_node (
    cluster_id, observed_at, deleted_at, name, uid, labels, created_at, provider_id,
    unschedulable, taints, conditions, ready, ready_since, nodegroup_label, kubelet_version,
    internal_address, resource_version
)
SELECT
    %s, %s::timestamptz, NULL::timestamptz, r.name, r.uid, r.labels, r.created_at,
    r.provider_id, r.unschedulable, r.taints, r.conditions, r.ready, r.ready_since,
    r.nodegroup_label, r.kubelet_version, r.internal_address, r.resource_version
FROM json_to_recordset(%s::json) AS r(
    name text, uid text, labels jsonb, created_at timestamptz, provider_id text,
    unschedulable boolean, taints jsonb, conditions jsonb, ready text,
    ready_since timestamptz, nodegroup_label text, kubelet_version text,
    internal_address text, resource_version text
)
ON CONFLICT ON CONSTRAINT node_unique_per_cluster DO UPDATE SET
    observed_at = EXCLUDED.observed_at,
    deleted_at = NULL,
    uid = EXCLUDED.uid,
    labels = EXCLUDED.labels,
    created_at = EXCLUDED.created_at,
    provider_id = EXCLUDED.provider_id,
    unschedulable = EXCLUDED.unschedulable,
    taints = EXCLUDED.taints,
    conditions = EXCLUDED.conditions,
    ready = EXCLUDED.ready,
    ready_since = EXCLUDED.ready_since,
    nodegroup_label = EXCLUDED.nodegroup_label,
    kubelet_version = EXCLUDED.kubelet_version,
    internal_address = EXCLUDED.internal_address,
    resource_version = EXCLUDED.resource_version
RETURNING id, name
"""
