"""Lease rows as LeaseIngestor writes them: the full upsert, the renewal update (the hot
path), and the LeaseCandidate sync.

Every function here runs inside the caller's transaction and knows nothing of batching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import orjson
from django.db import connection, transaction
from django.utils import timezone

from leases.models import Lease, LeaseCandidate, LeaseDeadline, schedule_expiry, soon_at
from leases.parse import CandidateObservation, LeaseObservation

Key = tuple[str, str]
UPSERT_BATCH_SIZE = 2000
LEASE_UPDATE_FIELDS = [
    "uid",
    "lease_class",
    "holder",
    "acquire_time",
    "renew_time",
    "lease_duration_seconds",
    "expires_at",
    "lease_transitions",
    "strategy",
    "preferred_holder",
    "labels",
    "resource_version",
    "created_at",
    "observed_at",
    "deleted_at",
    "annotations",
    "annotations_cut",
    "library",
    "identity",
    "token",
    "foreign_writer",
    "group_name",
    "group_slot",
    "name_key",
]


@dataclass(slots=True)
class Renewals:
    """Leases whose stored rows differ from the new objects only in what a renewal moves:
    spec.renewTime (and the expiry it sets) and metadata.resourceVersion. Kept as columns,
    one entry per lease in each, so a batch is sent as five lists, not a dict per lease."""

    lease_ids: list[int] = field(default_factory=list)
    renew_texts: list[str] = field(default_factory=list)  # spec.renewTime as sent
    renew_times: list[datetime | None] = field(default_factory=list)
    expires_at: list[datetime | None] = field(default_factory=list)
    resource_versions: list[str] = field(default_factory=list)

    def add(
        self,
        lease_id: int,
        renew_text: str,
        renew_time: datetime | None,
        expires_at: datetime | None,
        resource_version: str,
    ) -> None:
        self.lease_ids.append(lease_id)
        self.renew_texts.append(renew_text)
        self.renew_times.append(renew_time)
        self.expires_at.append(expires_at)
        self.resource_versions.append(resource_version)

    def __len__(self) -> int:
        return len(self.lease_ids)


def upsert_leases(
    cluster_id: int, observations: list[LeaseObservation], now: datetime
) -> dict[Key, int]:
    """Insert or update the rows (clearing deleted_at); their ids by key.

    The ids are remembered by the caller once committed: a rolled-back insert's id would
    point transitions at a row that does not exist.
    """
    if not observations:
        return {}
    if connection.vendor == "postgresql":
        return _upsert_postgresql(cluster_id, observations, now)
    return _upsert_orm(cluster_id, observations, now)


def renew_leases(cluster_id: int, renewals: Renewals, now: datetime) -> set[int]:
    """Write renewals to rows that exist: the ids updated (a row gone since is not).

    One statement per batch that sends a few small values per lease instead of the whole
    object: the row ends exactly as the full upsert would leave it. On PostgreSQL the batch
    is one JSON document of lists, dumped by orjson in C and unnested by the server.
    """
    if not renewals:
        return set()
    if connection.vendor == "postgresql":
        payload = orjson.dumps(
            [
                renewals.lease_ids,
                renewals.renew_texts,
                renewals.renew_times,
                renewals.expires_at,
                renewals.resource_versions,
            ]
        )
        with connection.cursor() as cursor:
            cursor.execute(_POSTGRESQL_RENEW, [now, payload.decode(), cluster_id])
            return {row[0] for row in cursor.fetchall()}
    return _renew_other(cluster_id, renewals, now)


def _renew_other(cluster_id: int, renewals: Renewals, now: datetime) -> set[int]:
    """SQLite (the default database): one UPDATE per row."""
    adapt = connection.ops.adapt_datetimefield_value
    updated: set[int] = set()
    deadlines: list[tuple[int, str | None]] = []
    with connection.cursor() as cursor:
        for lease_id, renew_time, expires_at, resource_version in zip(
            renewals.lease_ids,
            renewals.renew_times,
            renewals.expires_at,
            renewals.resource_versions,
            strict=True,
        ):
            cursor.execute(
                _SQLITE_RENEW,
                [
                    adapt(renew_time),
                    adapt(expires_at),
                    resource_version,
                    adapt(now),
                    lease_id,
                    cluster_id,
                ],
            )
            row = cursor.fetchone()
            if row is not None:
                updated.add(lease_id)
                # The new expiry's schedule, from the holder and duration the row keeps.
                deadlines.append((lease_id, adapt(soon_at(row[0], expires_at, row[1]))))
        if deadlines:
            cursor.executemany(_SQLITE_SCHEDULE, deadlines)
    return updated


def _upsert_postgresql(
    cluster_id: int, observations: list[LeaseObservation], now: datetime
) -> dict[Key, int]:
    """One INSERT .. SELECT FROM json_to_recordset(..) ON CONFLICT per batch.

    The batch travels as one JSON document that PostgreSQL parses in C: several times
    cheaper than the ORM's bulk_create (model instances, one parameter per value) or
    psycopg adapting Python lists element by element.
    """
    ids: dict[Key, int] = {}
    with connection.cursor() as cursor:
        for start in range(0, len(observations), UPSERT_BATCH_SIZE):
            chunk = observations[start : start + UPSERT_BATCH_SIZE]
            payload = orjson.dumps(
                [
                    {
                        "namespace": obs.namespace,
                        "name": obs.name,
                        "uid": obs.uid,
                        "lease_class": obs.lease_class.value,
                        "holder": obs.holder,
                        "acquire_time": obs.acquire_time,
                        "renew_time": obs.renew_time,
                        "lease_duration_seconds": obs.lease_duration_seconds,
                        "expires_at": obs.expires_at,
                        "lease_transitions": obs.lease_transitions,
                        "strategy": obs.strategy,
                        "preferred_holder": obs.preferred_holder,
                        "labels": obs.labels,
                        "resource_version": obs.resource_version,
                        "created_at": obs.created_at,
                        "annotations": obs.annotations,
                        "annotations_cut": obs.annotations_cut,
                        "library": obs.library.value,
                        "identity": obs.identity,
                        "token": obs.token,
                        "foreign_writer": obs.foreign_writer,
                        "group_name": obs.group_name,
                        "group_slot": obs.group_slot,
                        "name_key": obs.name_key,
                    }
                    for obs in chunk
                ]
            )
            cursor.execute(_POSTGRESQL_UPSERT, [cluster_id, now, payload.decode()])
            ids.update({(namespace, name): pk for pk, namespace, name in cursor.fetchall()})
    return ids


def _upsert_orm(
    cluster_id: int, observations: list[LeaseObservation], now: datetime
) -> dict[Key, int]:
    rows = [
        Lease(
            cluster_id=cluster_id,
            namespace=obs.namespace,
            name=obs.name,
            uid=obs.uid,
            lease_class=obs.lease_class,
            holder=obs.holder,
            acquire_time=obs.acquire_time,
            renew_time=obs.renew_time,
            lease_duration_seconds=obs.lease_duration_seconds,
            expires_at=obs.expires_at,
            lease_transitions=obs.lease_transitions,
            strategy=obs.strategy,
            preferred_holder=obs.preferred_holder,
            labels=obs.labels,
            resource_version=obs.resource_version,
            created_at=obs.created_at,
            observed_at=now,
            deleted_at=None,
            annotations=obs.annotations,
            annotations_cut=obs.annotations_cut,
            library=obs.library,
            identity=obs.identity,
            token=obs.token,
            foreign_writer=obs.foreign_writer,
            group_name=obs.group_name,
            group_slot=obs.group_slot,
            name_key=obs.name_key,
        )
        for obs in observations
    ]
    Lease.objects.bulk_create(
        rows,
        batch_size=UPSERT_BATCH_SIZE,
        update_conflicts=True,
        unique_fields=["cluster", "namespace", "name"],
        update_fields=LEASE_UPDATE_FIELDS,
    )
    ids = {(row.namespace, row.name): row.pk for row in rows if row.pk is not None}
    missing = [row for row in rows if row.pk is None]
    if missing:
        # Backends that cannot return ids from an upsert: look them up once.
        found = _lookup_ids(cluster_id, [(row.namespace, row.name) for row in missing])
        ids.update(found)
        for row in missing:
            row.pk = found.get((row.namespace, row.name))
    schedule_expiry(rows)
    return ids


def _lookup_ids(cluster_id: int, keys: list[Key]) -> dict[Key, int]:
    found: dict[Key, int] = {}
    namespaces = {namespace for namespace, _ in keys}
    wanted = set(keys)
    for lease_id, namespace, name in Lease.objects.filter(
        cluster_id=cluster_id, namespace__in=namespaces
    ).values_list("id", "namespace", "name"):
        if (namespace, name) in wanted:
            found[(namespace, name)] = lease_id
    return found


# The expiry schedule (LeaseDeadline) of the rows a statement wrote, in the same statement:
# models.soon_at in SQL. GREATEST skips a NULL duration; an interval times the integer, as
# leases.queries does, so a day-long duration cannot overflow.
_POSTGRESQL_SCHEDULE = """
INSERT INTO leases_leasedeadline (lease_id, soon_at)
SELECT id, CASE WHEN holder <> '' THEN expires_at - GREATEST(
    INTERVAL '10 seconds', lease_duration_seconds * INTERVAL '250000 microseconds'
) END
FROM written
ON CONFLICT (lease_id) DO UPDATE SET soon_at = EXCLUDED.soon_at
"""

_POSTGRESQL_UPSERT = f"""
WITH written AS (
INSERT INTO leases_lease (
    cluster_id, observed_at, deleted_at, namespace, name, uid, lease_class, holder,
    acquire_time, renew_time, lease_duration_seconds, expires_at, lease_transitions,
    strategy, preferred_holder, labels, resource_version, created_at,
    annotations, annotations_cut, library, identity, token, foreign_writer, group_name,
    group_slot, name_key
)
SELECT
    %s, %s::timestamptz, NULL::timestamptz, r.namespace, r.name, r.uid, r.lease_class,
    r.holder, r.acquire_time, r.renew_time, r.lease_duration_seconds, r.expires_at,
    r.lease_transitions, r.strategy, r.preferred_holder, r.labels, r.resource_version,
    r.created_at, r.annotations, r.annotations_cut, r.library, r.identity, r.token,
    r.foreign_writer, r.group_name, r.group_slot, r.name_key
FROM json_to_recordset(%s::json) AS r(
    namespace text, name text, uid text, lease_class text, holder text,
    acquire_time timestamptz, renew_time timestamptz, lease_duration_seconds int,
    expires_at timestamptz, lease_transitions int, strategy text, preferred_holder text,
    labels jsonb, resource_version text, created_at timestamptz,
    annotations jsonb, annotations_cut int, library text, identity text, token text,
    foreign_writer boolean, group_name text, group_slot int, name_key text
)
ON CONFLICT ON CONSTRAINT lease_unique_per_cluster DO UPDATE SET
    observed_at = EXCLUDED.observed_at,
    deleted_at = NULL,
    uid = EXCLUDED.uid,
    lease_class = EXCLUDED.lease_class,
    holder = EXCLUDED.holder,
    acquire_time = EXCLUDED.acquire_time,
    renew_time = EXCLUDED.renew_time,
    lease_duration_seconds = EXCLUDED.lease_duration_seconds,
    expires_at = EXCLUDED.expires_at,
    lease_transitions = EXCLUDED.lease_transitions,
    strategy = EXCLUDED.strategy,
    preferred_holder = EXCLUDED.preferred_holder,
    labels = EXCLUDED.labels,
    resource_version = EXCLUDED.resource_version,
    created_at = EXCLUDED.created_at,
    annotations = EXCLUDED.annotations,
    annotations_cut = EXCLUDED.annotations_cut,
    library = EXCLUDED.library,
    identity = EXCLUDED.identity,
    token = EXCLUDED.token,
    foreign_writer = EXCLUDED.foreign_writer,
    group_name = EXCLUDED.group_name,
    group_slot = EXCLUDED.group_slot,
    name_key = EXCLUDED.name_key
RETURNING id, namespace, name, holder, expires_at, lease_duration_seconds
), scheduled AS (
{_POSTGRESQL_SCHEDULE}
)
SELECT id, namespace, name FROM written
"""  # noqa: S608 (the schedule's SQL, no value)

_POSTGRESQL_RENEW = f"""
WITH written AS (
UPDATE leases_lease AS l SET
    observed_at = %s::timestamptz,
    deleted_at = NULL,
    renew_time = r.renew_time,
    expires_at = r.expires_at,
    resource_version = r.resource_version
FROM (SELECT %s::jsonb AS j) AS p
CROSS JOIN LATERAL unnest(
    ARRAY(SELECT e FROM jsonb_array_elements_text(p.j -> 0) WITH ORDINALITY AS a(e, n)
          ORDER BY n)::bigint[],
    ARRAY(SELECT e FROM jsonb_array_elements_text(p.j -> 1) WITH ORDINALITY AS a(e, n)
          ORDER BY n),
    ARRAY(SELECT e FROM jsonb_array_elements_text(p.j -> 2) WITH ORDINALITY AS a(e, n)
          ORDER BY n)::timestamptz[],
    ARRAY(SELECT e FROM jsonb_array_elements_text(p.j -> 3) WITH ORDINALITY AS a(e, n)
          ORDER BY n)::timestamptz[],
    ARRAY(SELECT e FROM jsonb_array_elements_text(p.j -> 4) WITH ORDINALITY AS a(e, n)
          ORDER BY n)
) AS r(id, renew_text, renew_time, expires_at, resource_version)
WHERE l.id = r.id AND l.cluster_id = %s
RETURNING l.id, l.holder, l.expires_at, l.lease_duration_seconds
), scheduled AS (
{_POSTGRESQL_SCHEDULE}
)
SELECT id FROM written
"""  # noqa: S608 (the schedule's SQL, no value)

_SQLITE_RENEW = """
UPDATE leases_lease SET
    renew_time = %s, expires_at = %s, resource_version = %s, observed_at = %s,
    deleted_at = NULL
WHERE id = %s AND cluster_id = %s
RETURNING holder, lease_duration_seconds
"""

_SQLITE_SCHEDULE = f"""
INSERT INTO {LeaseDeadline._meta.db_table} (lease_id, soon_at) VALUES (%s, %s)
ON CONFLICT (lease_id) DO UPDATE SET soon_at = excluded.soon_at
"""  # noqa: S608 (a table name, no value)


@transaction.atomic
def sync_candidates(cluster_id: int, observations: list[CandidateObservation]) -> int:
    """Make the cluster's LeaseCandidate rows match a full list; gone ones are marked deleted."""
    now = timezone.now()
    rows = [
        LeaseCandidate(
            cluster_id=cluster_id,
            namespace=obs.namespace,
            name=obs.name,
            lease_name=obs.lease_name,
            binary_version=obs.binary_version,
            emulation_version=obs.emulation_version,
            strategy=obs.strategy,
            ping_time=obs.ping_time,
            renew_time=obs.renew_time,
            observed_at=now,
            deleted_at=None,
        )
        for obs in observations
    ]
    if rows:
        LeaseCandidate.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["cluster", "namespace", "name"],
            update_fields=[
                "lease_name",
                "binary_version",
                "emulation_version",
                "strategy",
                "ping_time",
                "renew_time",
                "observed_at",
                "deleted_at",
            ],
        )
    listed = {(obs.namespace, obs.name) for obs in observations}
    gone = [
        pk
        for pk, namespace, name in LeaseCandidate.objects.filter(
            cluster_id=cluster_id, deleted_at__isnull=True
        ).values_list("id", "namespace", "name")
        if (namespace, name) not in listed
    ]
    LeaseCandidate.objects.filter(pk__in=gone).update(deleted_at=now)
    return len(rows)
