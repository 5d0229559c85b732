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

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError, transaction
from django.utils import timezone

from leases.lease_rows import (
    UPSERT_BATCH_SIZE,
    Renewals,
    renew_leases,
    sync_candidates,
    upsert_leases,
)
from leases.models import Lease, LeaseTransition
from leases.parse import (
    lease_state,
    parse_lease,
    parse_time,
    renewal_shape,
    renewal_times,
)
from leases.pending_batch import PendingBatch

logger = logging.getLogger(__name__)

__all__ = ["FlushResult", "LeaseIngestor", "sync_candidates"]

Key = tuple[str, str]
# One flush writes at most this many leases (oldest first); the rest wait for the next one.
FLUSH_MAX_LEASES = 4000
# Failures caused by one lease's values, not by the database being unreachable: they are
# isolated to that lease. ValueError and OverflowError are values Python itself cannot
# convert, which would fail every retry just the same.
ROW_DATA_ERRORS = (DataError, IntegrityError, ValueError, OverflowError)


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
    # Of leases_written, those written as renewals (lease_rows.renew_leases), not in full.
    leases_renewed: int = 0
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


# Leases waiting for a flush: the newest object per lease, with its holder transitions.
_Batch = PendingBatch[Key, dict[str, Any], PendingTransition]


def _transition_key(transition: PendingTransition) -> Key:
    return transition.key


class LeaseIngestor:
    def __init__(self, cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self._lock = threading.Lock()
        self._batch: _Batch = PendingBatch()
        self._known: dict[Key, KnownLease] = {}
        self._lease_ids: dict[Key, int] = {}
        # The stable part (parse.renewal_shape) of what each row holds, as committed by
        # this ingestor: an object with the same stable part is written as a renewal,
        # without the full parse. Absent: the next write of that lease is a full upsert.
        self._renewable: dict[Key, bytes] = {}
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
        state = lease_state(obj)
        if state is None:
            return False
        key, holder, lease_transitions, spec = state
        with self._lock:
            batch = self._batch
            batch.events += 1
            previous = self._known.get(key)
            if previous is None:
                self._known[key] = KnownLease(holder, lease_transitions)
            elif previous.holder != holder or previous.lease_transitions != lease_transitions:
                transition = _transition_between(previous, key, holder, lease_transitions, spec)
                if transition is not None:
                    batch.history.append(transition)
                self._known[key] = KnownLease(holder, lease_transitions)
            # else a renewal: what is known stays as it is, nothing to allocate.
            batch.objects[key] = obj
            if key not in batch.received:  # the clock is read only for a lease's first event
                batch.received[key] = time.monotonic() if received is None else received
            if batch.deleted:
                batch.deleted.pop(key, None)
        return True

    def observe_deleted(self, key: Key, received: float | None = None) -> None:
        received = time.monotonic() if received is None else received
        with self._lock:
            self._known.pop(key, None)
            self._renewable.pop(key, None)
            self._batch.record_deletion(key, received)

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
            # The longest-waiting leases first: see PendingBatch.split_oldest.
            batch, self._batch = self._batch.split_oldest(FLUSH_MAX_LEASES, _transition_key)
            drained = self._batch.is_empty()
        result = FlushResult(events=batch.events, drained=drained)
        if batch.is_empty():
            return result
        pending_transitions = batch.history_by_key(_transition_key)
        items = list(batch.objects.items())
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
            failed = batch.remainder(written, pending_transitions)
            with self._lock:
                self._batch.requeue(failed)
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
        """Commit leases with their transitions; nothing is counted unless it commits.

        A lease whose object differs from its committed row only by a renewal is written by
        `renew_leases` (a few values, no parse); the others, and any renewal whose row has
        gone meanwhile, by the full upsert. Both leave the same row.
        """
        now = timezone.now()
        # Read without the lock: single dict reads are atomic, and a deletion observed
        # meanwhile is written by the next flush whichever way this one writes the lease.
        renewable, lease_ids = self._renewable.get, self._lease_ids.get
        renewals = Renewals()
        add_renewal = renewals.add
        renewed_items: list[tuple[int, Key, dict[str, Any], bytes]] = []
        full: list[tuple[Key, dict[str, Any]]] = []
        digests: dict[Key, bytes] = {}
        for key, obj in chunk:
            shape = renewal_shape(obj)
            if shape is not None:
                stable, renew_text, resource_version = shape
                lease_id = lease_ids(key)
                if lease_id is not None and renewable(key) == stable:
                    add_renewal(
                        lease_id,
                        renew_text,
                        *renewal_times(obj["spec"], renew_text),
                        resource_version,
                    )
                    renewed_items.append((lease_id, key, obj, stable))
                    continue
                digests[key] = stable
            full.append((key, obj))
        with transaction.atomic():
            renewed = renew_leases(self.cluster_id, renewals, now)
            # A renewal whose row is gone (removed by hand, say) is written in full.
            for lease_id, key, obj, stable in renewed_items:
                if lease_id not in renewed:
                    full.append((key, obj))
                    digests[key] = stable
            observations = [
                observation
                for observation in (parse_lease(obj) for _, obj in full)
                if observation is not None
            ]
            ids = upsert_leases(self.cluster_id, observations, now)
            transitions = [
                transition for key, _ in chunk for transition in pending_transitions.get(key, ())
            ]
            transitions_written = self._write_transitions(transitions, ids)
        with self._lock:
            self._lease_ids.update(ids)
            for key, _ in full:
                digest = digests.get(key)
                if digest is not None and key in ids and key in self._known:
                    self._renewable[key] = digest
                else:
                    self._renewable.pop(key, None)
        for key, _ in chunk:
            pending_transitions.pop(key, None)
        result.leases_written += len(observations) + len(renewed)
        result.leases_renewed += len(renewed)
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


def _transition_between(
    previous: KnownLease,
    key: Key,
    holder: str,
    lease_transitions: int | None,
    spec: dict[str, Any],
) -> PendingTransition | None:
    """The holder change (or the unseen changes) between what we knew and what we see now."""
    jump = None
    if previous.lease_transitions is not None and lease_transitions is not None:
        jump = lease_transitions - previous.lease_transitions
    if holder != previous.holder:
        # One change is the one we see; leaseTransitions jumping further means others
        # happened while nobody watched. A release ("" holder) does not count up.
        missed = max(0, jump - 1) if jump is not None else 0
    elif jump is not None and jump > 0:
        missed = jump  # e.g. A -> B -> A while the dashboard was away
    else:
        return None
    return PendingTransition(
        key=key,
        from_holder=previous.holder,
        to_holder=holder,
        observed_at=timezone.now(),
        acquire_time=parse_time(spec.get("acquireTime")),
        lease_transitions=lease_transitions,
        missed=missed,
    )
