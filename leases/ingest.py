"""Turn a stream of Lease observations into database rows, in batches.

Renewals are the hot path (every node renews every ~10 s), so observations are coalesced
per lease in memory and written by `flush()` in one bulk upsert per batch. Holder changes
are detected as each event arrives, against the newest state seen, so coalescing never
hides a transition. The reader thread calls `observe*()`; another thread calls `flush()`;
a lock guards the hand-over, and the database work happens outside it.

Restart safety: the in-memory "known" state starts from the database, and the database's
holder is written in the same transaction as the transition rows. A watcher that dies
before a flush loses nothing that a relist cannot rebuild, and a new watcher never writes a
transition the old one already wrote.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.utils import timezone

from leases.models import Lease, LeaseCandidate, LeaseTransition
from leases.parse import (
    CandidateObservation,
    LeaseIdentity,
    LeaseObservation,
    lease_identity,
    parse_lease,
    parse_time,
)

logger = logging.getLogger(__name__)

Key = tuple[str, str]
UPSERT_BATCH_SIZE = 2000
# One flush writes at most this many leases (oldest first); the rest wait for the next one.
FLUSH_MAX_LEASES = 4000
# Failures caused by one lease's values, not by the database being unreachable: they are
# isolated to that lease. ValueError and OverflowError are values Python itself cannot
# convert, which would fail every retry just the same.
ROW_DATA_ERRORS = (DataError, IntegrityError, ValueError, OverflowError)
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
    "raw",
]


@dataclass(slots=True)
class KnownLease:
    holder: str
    lease_transitions: int | None


@dataclass(slots=True)
class PendingTransition:
    key: Key
    from_holder: str
    to_holder: str
    observed_at: datetime
    acquire_time: datetime | None
    lease_transitions: int | None
    missed: int


@dataclass(slots=True)
class FlushResult:
    leases_written: int = 0
    transitions_written: int = 0
    deletions_written: int = 0
    events: int = 0
    # Worst delay from an event's arrival to its row being committed, in seconds.
    lag_seconds: float = 0.0
    # Nothing observed before this flush is still waiting (the flush was not capped).
    drained: bool = True
    # Objects stored without their NUL characters, and leases the database refused (their
    # data, not the connection) and that were skipped so the rest of the batch is written.
    objects_cleaned: int = 0
    leases_skipped: int = 0


@dataclass(slots=True)
class _Batch:
    # The newest raw object per lease: parsed once per flush, not once per event.
    leases: dict[Key, dict[str, Any]] = field(default_factory=dict)
    received: dict[Key, float] = field(default_factory=dict)
    deleted: dict[Key, float] = field(default_factory=dict)
    transitions: list[PendingTransition] = field(default_factory=list)
    events: int = 0

    def is_empty(self) -> bool:
        return not (self.leases or self.deleted or self.transitions)


class LeaseIngestor:
    def __init__(self, cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self._lock = threading.Lock()
        self._batch = _Batch()
        self._known: dict[Key, KnownLease] = {}
        self._lease_ids: dict[Key, int] = {}
        self.load_known()

    def load_known(self) -> None:
        """Start from what the database holds, so a restarted watcher compares correctly."""
        rows = Lease.objects.filter(
            cluster_id=self.cluster_id, deleted_at__isnull=True
        ).values_list("id", "namespace", "name", "holder", "lease_transitions")
        with self._lock:
            self._known = {}
            for lease_id, namespace, name, holder, transitions in rows.iterator(chunk_size=5000):
                self._known[(namespace, name)] = KnownLease(holder, transitions)
                self._lease_ids[(namespace, name)] = lease_id

    @property
    def known_keys(self) -> set[Key]:
        with self._lock:
            return set(self._known)

    def observe(self, obj: dict[str, Any], received: float | None = None) -> bool:
        """An ADDED or MODIFIED object; False when it is not a usable Lease."""
        identity = lease_identity(obj)
        if identity is None:
            return False
        received = time.monotonic() if received is None else received
        key = identity.key
        with self._lock:
            batch = self._batch
            batch.events += 1
            previous = self._known.get(key)
            if previous is not None:
                transition = _transition_between(previous, identity)
                if transition is not None:
                    batch.transitions.append(transition)
            self._known[key] = KnownLease(identity.holder, identity.lease_transitions)
            batch.leases[key] = obj
            batch.received.setdefault(key, received)
            batch.deleted.pop(key, None)
        return True

    def observe_deleted(self, key: Key, received: float | None = None) -> None:
        received = time.monotonic() if received is None else received
        with self._lock:
            self._batch.events += 1
            self._known.pop(key, None)
            self._batch.leases.pop(key, None)
            self._batch.received.pop(key, None)
            self._batch.deleted.setdefault(key, received)

    def reconcile(self, listed: set[Key]) -> int:
        """After a (re)list: leases we know of that the list no longer has were deleted."""
        gone = self.known_keys - listed
        for key in gone:
            self.observe_deleted(key)
        return len(gone)

    def count_event(self) -> None:
        """An event that changed no row (a bookmark) still shows the stream is alive."""
        with self._lock:
            self._batch.events += 1

    def flush(self) -> FlushResult:
        """Write what was observed since the last flush, oldest first, in committed chunks.

        Leases are kept in first-seen order, so committing chunk by chunk gets the longest
        waiting rows into the database first: under full load the worst staleness is about
        one flush, not two. Each chunk commits its leases together with their transitions,
        which is what makes a restarted watcher agree with the database.
        """
        with self._lock:
            batch = self._take_oldest(FLUSH_MAX_LEASES)
            drained = self._batch.is_empty()
        result = FlushResult(events=batch.events, drained=drained)
        if batch.is_empty():
            return result
        pending_transitions: dict[Key, list[PendingTransition]] = {}
        for transition in batch.transitions:
            pending_transitions.setdefault(transition.key, []).append(transition)
        items = list(batch.leases.items())
        written = 0
        try:
            for start in range(0, len(items), UPSERT_BATCH_SIZE):
                chunk = items[start : start + UPSERT_BATCH_SIZE]
                try:
                    self._write_chunk(chunk, pending_transitions, result)
                except ROW_DATA_ERRORS:
                    # The database refused a value, not the connection: retrying the same
                    # batch would fail forever and keep every valid lease out. Write one
                    # by one instead and skip only the leases that fail alone.
                    for index, item in enumerate(chunk):
                        self._write_alone(item, pending_transitions, result)
                        written = start + index + 1
                written = start + len(chunk)
                oldest = min(batch.received[key] for key, _ in chunk)
                result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest)
            with transaction.atomic():
                # Transitions of leases deleted later in the same batch, then deletions.
                leftover = [item for group in pending_transitions.values() for item in group]
                result.transitions_written += self._write_transitions(leftover, {})
                result.deletions_written = self._mark_deleted(batch.deleted, timezone.now())
            pending_transitions.clear()
        except DatabaseError:
            self._requeue(_remainder(batch, written, pending_transitions))
            raise
        if batch.deleted:
            oldest_deletion = min(batch.deleted.values())
            result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest_deletion)
        return result

    def _write_chunk(
        self,
        chunk: list[tuple[Key, dict[str, Any]]],
        pending_transitions: dict[Key, list[PendingTransition]],
        result: FlushResult,
    ) -> None:
        """Commit leases with their transitions; nothing is counted unless it commits."""
        now = timezone.now()
        with transaction.atomic():
            observations = [
                observation
                for observation in (parse_lease(obj) for _, obj in chunk)
                if observation is not None
            ]
            ids = self._upsert(observations, now)
            transitions = [
                transition for key, _ in chunk for transition in pending_transitions.get(key, ())
            ]
            transitions_written = self._write_transitions(transitions, ids)
        with self._lock:
            self._lease_ids.update(ids)
        for key, _ in chunk:
            pending_transitions.pop(key, None)
        result.leases_written += len(observations)
        result.transitions_written += transitions_written
        result.objects_cleaned += sum(observation.cleaned for observation in observations)

    def _write_alone(
        self,
        item: tuple[Key, dict[str, Any]],
        pending_transitions: dict[Key, list[PendingTransition]],
        result: FlushResult,
    ) -> None:
        try:
            self._write_chunk([item], pending_transitions, result)
        except ROW_DATA_ERRORS as exc:
            pending_transitions.pop(item[0], None)
            result.leases_skipped += 1
            # The lease's name only: its values are the cluster's data, maybe large.
            logger.warning(
                "cluster %s: skipped lease %s/%s, which the database refused (%s)",
                self.cluster_id,
                *item[0],
                type(exc).__name__,
            )

    def _take_oldest(self, limit: int) -> _Batch:
        """Hand over the longest-waiting leases (at most `limit`), with their transitions.

        Under full load every lease is pending all the time; writing the oldest first, in
        bounded flushes, keeps the wait of any one lease near the time it takes to write
        the whole set once, instead of a whole flush plus the next one.
        """
        current = self._batch
        if len(current.leases) <= limit:
            self._batch = _Batch()
            return current
        taken = _Batch(events=current.events, deleted=current.deleted)
        for key in list(itertools.islice(current.leases, limit)):
            taken.leases[key] = current.leases.pop(key)
            taken.received[key] = current.received.pop(key)
        keep: list[PendingTransition] = []
        for transition in current.transitions:
            if transition.key in taken.leases or transition.key in taken.deleted:
                taken.transitions.append(transition)
            else:
                keep.append(transition)
        current.transitions, current.deleted, current.events = keep, {}, 0
        return taken

    def _upsert(self, observations: list[LeaseObservation], now: datetime) -> dict[Key, int]:
        # The ids are remembered by the caller once committed: a rolled-back insert's id
        # would point transitions at a row that does not exist.
        if not observations:
            return {}
        if connection.vendor == "postgresql":
            return self._upsert_postgresql(observations, now)
        return self._upsert_orm(observations, now)

    def _upsert_postgresql(
        self, observations: list[LeaseObservation], now: datetime
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
                            "raw": obs.raw,
                        }
                        for obs in chunk
                    ]
                )
                cursor.execute(_POSTGRESQL_UPSERT, [self.cluster_id, now, payload.decode()])
                ids.update({(namespace, name): pk for pk, namespace, name in cursor.fetchall()})
        return ids

    def _upsert_orm(self, observations: list[LeaseObservation], now: datetime) -> dict[Key, int]:
        rows = [
            Lease(
                cluster_id=self.cluster_id,
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
                raw=obs.raw,
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
        missing = [(row.namespace, row.name) for row in rows if row.pk is None]
        if missing:
            # Backends that cannot return ids from an upsert: look them up once.
            ids.update(self._lookup_ids(missing))
        return ids

    def _lookup_ids(self, keys: list[Key]) -> dict[Key, int]:
        found: dict[Key, int] = {}
        namespaces = {namespace for namespace, _ in keys}
        wanted = set(keys)
        for lease_id, namespace, name in Lease.objects.filter(
            cluster_id=self.cluster_id, namespace__in=namespaces
        ).values_list("id", "namespace", "name"):
            if (namespace, name) in wanted:
                found[(namespace, name)] = lease_id
        return found

    def _write_transitions(self, pending: list[PendingTransition], ids: dict[Key, int]) -> int:
        if not pending:
            return 0
        with self._lock:
            known_ids = dict(self._lease_ids)
        rows = []
        for transition in pending:
            lease_id = ids.get(transition.key) or known_ids.get(transition.key)
            if lease_id is None:
                # Created, changed and deleted within one batch: no row ever existed.
                continue
            rows.append(
                LeaseTransition(
                    lease_id=lease_id,
                    from_holder=transition.from_holder,
                    to_holder=transition.to_holder,
                    observed_at=transition.observed_at,
                    acquire_time=transition.acquire_time,
                    lease_transitions=transition.lease_transitions,
                    missed=transition.missed,
                )
            )
        LeaseTransition.objects.bulk_create(rows, batch_size=UPSERT_BATCH_SIZE)
        return len(rows)

    def _mark_deleted(self, deleted: dict[Key, float], now: datetime) -> int:
        count = 0
        by_namespace: dict[str, list[str]] = {}
        for namespace, name in deleted:
            by_namespace.setdefault(namespace, []).append(name)
        for namespace, names in by_namespace.items():
            count += Lease.objects.filter(
                cluster_id=self.cluster_id,
                namespace=namespace,
                name__in=names,
                deleted_at__isnull=True,
            ).update(deleted_at=now)
        return count

    def _requeue(self, failed: _Batch) -> None:
        """Put a batch that could not be written back in front of newer observations."""
        with self._lock:
            current = self._batch
            for key, observation in failed.leases.items():
                if key not in current.leases and key not in current.deleted:
                    current.leases[key] = observation
                    current.received[key] = failed.received[key]
                elif key in current.received:
                    current.received[key] = min(current.received[key], failed.received[key])
            for key, received in failed.deleted.items():
                if key not in current.leases:
                    current.deleted.setdefault(key, received)
            current.transitions[:0] = failed.transitions
            current.events += failed.events


def _remainder(
    batch: _Batch, written: int, pending_transitions: dict[Key, list[PendingTransition]]
) -> _Batch:
    """What of a batch was not committed when a chunk failed."""
    remainder = _Batch(events=batch.events)
    for key, obj in list(batch.leases.items())[written:]:
        remainder.leases[key] = obj
        remainder.received[key] = batch.received[key]
    remainder.deleted = dict(batch.deleted)
    remainder.transitions = [item for group in pending_transitions.values() for item in group]
    return remainder


def _transition_between(previous: KnownLease, identity: LeaseIdentity) -> PendingTransition | None:
    """The holder change (or the unseen changes) between what we knew and what we see now."""
    jump = None
    if previous.lease_transitions is not None and identity.lease_transitions is not None:
        jump = identity.lease_transitions - previous.lease_transitions
    if identity.holder != previous.holder:
        # One change is the one we see; leaseTransitions jumping further means others
        # happened while nobody watched. A release ("" holder) does not count up.
        missed = max(0, jump - 1) if jump is not None else 0
    elif jump is not None and jump > 0:
        missed = jump  # e.g. A -> B -> A while the dashboard was away
    else:
        return None
    return PendingTransition(
        key=identity.key,
        from_holder=previous.holder,
        to_holder=identity.holder,
        observed_at=timezone.now(),
        acquire_time=parse_time(identity.spec.get("acquireTime")),
        lease_transitions=identity.lease_transitions,
        missed=missed,
    )


_POSTGRESQL_UPSERT = """
INSERT INTO leases_lease (
    cluster_id, observed_at, deleted_at, namespace, name, uid, lease_class, holder,
    acquire_time, renew_time, lease_duration_seconds, expires_at, lease_transitions,
    strategy, preferred_holder, labels, resource_version, created_at, raw
)
SELECT
    %s, %s::timestamptz, NULL::timestamptz, r.namespace, r.name, r.uid, r.lease_class,
    r.holder, r.acquire_time, r.renew_time, r.lease_duration_seconds, r.expires_at,
    r.lease_transitions, r.strategy, r.preferred_holder, r.labels, r.resource_version,
    r.created_at, r.raw
FROM json_to_recordset(%s::json) AS r(
    namespace text, name text, uid text, lease_class text, holder text,
    acquire_time timestamptz, renew_time timestamptz, lease_duration_seconds int,
    expires_at timestamptz, lease_transitions int, strategy text, preferred_holder text,
    labels jsonb, resource_version text, created_at timestamptz, raw jsonb
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
    raw = EXCLUDED.raw
RETURNING id, namespace, name
"""


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
            raw=obs.raw,
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
                "raw",
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
