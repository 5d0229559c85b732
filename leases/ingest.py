"""Turn a stream of Lease observations into database rows, in batches.

Renewals are the hot path (every node renews every ~10 s), so observations are coalesced
per lease in memory and written by `flush()` in one bulk upsert per batch. Holder changes
are detected as each event arrives, against the newest state seen, so coalescing never
hides a transition. The reader thread calls `observe*()`; another thread calls `flush()`;
a lock guards the hand-over, and the database work happens outside it.

Leader-election and control-plane leases are also followed event by event for their
holder spans (leases/holder_spans.py); node heartbeats cost one dict lookup more per event.
A transition carries the holders' identities (computed at the change, which is rare) and,
for a leader-k8s token, whether the token came back (leases/fencing.py, at the flush).

A change is judged in the API server's own order: each known state keeps the uid and
resourceVersion of the object that brought it, and an object older than that (same uid, a
smaller integer resourceVersion: a replay, or old events delivered after newer ones in the
burst that follows an API server stall) changes nothing, so it makes no transition, no span
and no fencing mark, and never overwrites the newer row. A token is only judged as coming
back when the order is proven (same uid, a larger integer resourceVersion).

Restart safety: the in-memory "known" state starts from the database, and the database's
holder is written in the same transaction as the transition rows and the spans. A watcher
that dies before a flush loses nothing that a relist cannot rebuild, and a new watcher never
writes a transition the old one already wrote.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import orjson
from django.db import DatabaseError, DataError, IntegrityError, transaction
from django.utils import timezone

from leases.classify import NODE_LEASE_NAMESPACE
from leases.fencing import token_came_back
from leases.holder_spans import (
    FOLLOWED_CLASSES,
    SpanMove,
    Tenure,
    first_sight,
    load_tenures,
    open_missing_spans,
    write_moves,
)
from leases.leader_k8s import MANAGED_BY_ANNOTATION, MAX_IDENTITY
from leases.lease_rows import (
    UPSERT_BATCH_SIZE,
    Renewals,
    renew_leases,
    sync_candidates,
    upsert_leases,
)
from leases.models import Lease, LeaseLibrary, LeaseTransition
from leases.parse import (
    LeaseObservation,
    lease_class_of,
    lease_leadership,
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
# Leases per committed chunk of a flush. What a chunk holds at once (the decoded objects,
# their parse, the statement's JSON and its copies) is most of a flush's peak memory: at
# 2,000 a flush of 2,000 new leases peaked at 9.9 MB traced, at 500 at 5.8 MB, in the same
# time; and each chunk's commit brings its leases in sooner (the oldest go first).
CHUNK_LEASES = 500
# A flush goes on writing while there is a backlog, until it has taken this long (the
# watcher's flush interval, leases.watcher): then the housekeeping thread has its turn.
FLUSH_BUDGET_SECONDS = 0.5
# A list waits (leases.watch_loop) while this many raw objects wait for a flush: a list of
# 100,000 leases holds one flush's worth of objects, not the whole list.
MAX_PENDING_LEASES = FLUSH_MAX_LEASES
# Failures caused by one lease's values, not by the database being unreachable: they are
# isolated to that lease. ValueError and OverflowError are values Python itself cannot
# convert, which would fail every retry just the same.
ROW_DATA_ERRORS = (DataError, IntegrityError, ValueError, OverflowError)


@dataclass(slots=True)
class KnownLease:
    holder: str
    lease_transitions: int | None
    # metadata.uid and resourceVersion (as an integer; None if it is not one) of the object
    # that brought this holder and leaseTransitions: where the state sits in the API
    # server's order. Renewals do not move them: a different state is older than the
    # renewals of this one only if it is older than this object (the history is linear).
    uid: str = ""
    version: int | None = None

    def order_of(self, uid: str, version: int | None) -> int | None:
        """-1, 0 or 1: an object of `uid` at `version` comes before, at or after this state
        in the API server's order; None when that cannot be told (another life of the
        lease, or a resourceVersion that is no integer: by contract it is opaque)."""
        if not uid or uid != self.uid or version is None or self.version is None:
            return None
        return (version > self.version) - (version < self.version)


@dataclass(slots=True)
class PendingTransition:
    key: Key
    from_holder: str
    to_holder: str
    observed_at: datetime
    acquire_time: datetime | None
    lease_transitions: int | None
    missed: int
    from_identity: str = ""
    to_identity: str = ""
    # `to_holder` is a leader-k8s fencing token, and the API server's order puts this change
    # after the state it changes: the flush checks whether the token came back.
    token: bool = False
    # The lease's life (metadata.uid) and its start (creationTimestamp): a token counts as
    # back only after another holder within the same life.
    life: str = ""
    life_started: datetime | None = None


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
    # Holder spans opened and closed, and transitions that brought a fencing token back.
    spans_opened: int = 0
    spans_closed: int = 0
    fencing_reused: int = 0


@dataclass(slots=True)
class _Written:
    """What one transaction wrote besides lease rows: counted once it commits."""

    transitions: int = 0
    fencing_reused: int = 0
    spans_opened: int = 0
    spans_closed: int = 0

    def add_to(self, result: FlushResult) -> None:
        result.transitions_written += self.transitions
        result.fencing_reused += self.fencing_reused
        result.spans_opened += self.spans_opened
        result.spans_closed += self.spans_closed


# What a flush writes besides the lease rows, in the order it was observed.
History = PendingTransition | SpanMove
# Leases waiting for a flush: the newest object per lease, with its holder transitions
# and span moves.
# A waiting Lease is kept as its JSON (orjson, in C: ~0.5 us), a third of the memory of
# the parsed dict (a node lease: ~450 bytes against ~1.7 KB), and decoded once per write.
# An object orjson cannot write back (never one read from JSON) waits as it came.
Pending = bytes | dict[str, Any]
_Batch = PendingBatch[Key, Pending, History]


def _transition_key(item: History) -> Key:
    return item.key


class LeaseIngestor:
    # What a list lets wait for a flush before it reads on (leases.watch_loop).
    max_pending = MAX_PENDING_LEASES

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
        # The identity of each lease whose identity is not its holder (leader-k8s): the
        # `from_identity` of its next transition. Others' identity is the holder, cut.
        self._identities: dict[Key, str] = {}
        # The leases followed for holder spans (leases/holder_spans.py): leader-election and
        # control-plane ones, never node heartbeats.
        self._tenures: dict[Key, Tenure] = {}
        self.load_known()

    def load_known(self) -> None:
        """Start from what the database holds, so a restarted watcher compares correctly
        and continues the open holder spans."""
        rows = Lease.objects.filter(
            cluster_id=self.cluster_id, deleted_at__isnull=True
        ).values_list(
            "id", "namespace", "name", "holder", "lease_transitions", "uid", "resource_version"
        )
        identities = Lease.objects.filter(
            cluster_id=self.cluster_id, deleted_at__isnull=True, library=LeaseLibrary.LEADER_K8S
        ).values_list("namespace", "name", "holder", "identity")
        open_missing_spans(self.cluster_id)
        tenures = load_tenures(self.cluster_id)
        with self._lock:
            self._known = {}
            for lease_id, namespace, name, holder, transitions, uid, version in rows.iterator(
                chunk_size=5000
            ):
                # The stored row's resourceVersion is at or after the one that brought its
                # holder: an object older than it is older than that state too.
                key = compact_key(namespace, name)
                self._known[key] = KnownLease(
                    _shared(holder, name), transitions, uid, _version_number(version)
                )
                self._lease_ids[key] = lease_id
            self._identities = {
                (namespace, name): identity
                for namespace, name, holder, identity in identities
                if identity != holder[:MAX_IDENTITY]
            }
            self._tenures = tenures

    @property
    def known_keys(self) -> set[Key]:
        with self._lock:
            return set(self._known)

    def pending_objects(self) -> int:
        """Raw objects waiting for a flush (a list waits while there are max_pending)."""
        return len(self._batch.objects)  # one len() of a dict: atomic without the lock

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
                # Kept for the lease's life: its key and holder as few strings as can be.
                key = compact_key(*key)
                holder = _shared(holder, key[1])
                self._known[key] = KnownLease(holder, lease_transitions, *_order(obj))
                self._first_sight(key, obj, holder, spec, batch)
            elif previous.holder != holder or previous.lease_transitions != lease_transitions:
                uid, version = _order(obj)
                order = previous.order_of(uid, version)
                if order is not None and order < 0:
                    # Older than the state it would change: by the API server's order it
                    # changes nothing. Dropped whole, so it cannot overwrite the newer row.
                    return True
                self._changed(
                    previous, key, obj, holder, lease_transitions, spec, batch, order == 1
                )
                self._known[key] = KnownLease(holder, lease_transitions, uid, version)
            else:
                # A renewal: what is known stays as it is. Only a followed lease (never a
                # node heartbeat) has more to check: whether it came after its expiry.
                tenure = self._tenures.get(key)
                if tenure is not None:
                    move = tenure.renewed(key, spec, self._identity(key, holder))
                    if move is not None:
                        batch.history.append(move)
            batch.objects[key] = _packed(obj)
            if key not in batch.received:  # the clock is read only for a lease's first event
                batch.received[key] = time.monotonic() if received is None else received
            if batch.deleted:
                batch.deleted.pop(key, None)
        return True

    def _identity(self, key: Key, holder: str) -> str:
        return self._identities.get(key) or holder[:MAX_IDENTITY]

    def _first_sight(
        self, key: Key, obj: dict[str, Any], holder: str, spec: dict[str, Any], batch: _Batch
    ) -> None:
        """A lease new to this ingestor: remember an identity that is not its holder, and
        follow its holder spans when its class has them. Once per lease, not per event."""
        metadata = obj["metadata"]  # lease_state checked it
        annotations = metadata.get("annotations")
        # Only leader-k8s names its holder apart from holderIdentity (leases/leader_k8s.py).
        if type(annotations) is dict and MANAGED_BY_ANNOTATION in annotations:
            leads = lease_leadership(obj)
            if leads is not None and leads.identity != holder[:MAX_IDENTITY]:
                self._identities[key] = leads.identity
        # Node heartbeats first and cheaply: thousands of them, never followed.
        if key[0] == NODE_LEASE_NAMESPACE:
            return
        if lease_class_of(key[0], key[1], metadata) in FOLLOWED_CLASSES:
            identity = self._identity(key, holder)
            tenure, move = first_sight(key, holder, identity, spec, timezone.now())
            self._tenures[key] = tenure
            if move is not None:
                batch.history.append(move)

    def _changed(
        self,
        previous: KnownLease,
        key: Key,
        obj: dict[str, Any],
        holder: str,
        lease_transitions: int | None,
        spec: dict[str, Any],
        batch: _Batch,
        ordered: bool,
    ) -> None:
        """A holder change or a jump in leaseTransitions: the transition, with identities
        (read from the object now: the flush sees only the newest one), and the spans.
        `ordered`: the API server's order puts the object after the state it changes (the
        same uid, a larger resourceVersion), the one case where a token may be judged."""
        from_identity = self._identity(key, previous.holder)
        token = False
        if holder == previous.holder:
            to_identity = from_identity
        else:
            leads = lease_leadership(obj)
            to_identity = leads.identity if leads is not None else holder[:MAX_IDENTITY]
            token = ordered and leads is not None and bool(leads.token)
            if to_identity != holder[:MAX_IDENTITY]:
                self._identities[key] = to_identity
            else:
                self._identities.pop(key, None)
        transition = _transition_between(previous, key, holder, lease_transitions, spec)
        if transition is not None:
            transition.from_identity, transition.to_identity = from_identity, to_identity
            transition.token = token
            if token:
                metadata = obj["metadata"]  # lease_state checked it
                transition.life = previous.uid
                transition.life_started = parse_time(metadata.get("creationTimestamp"))
            batch.history.append(transition)
        tenure = self._tenures.get(key)
        if tenure is None:
            return
        if holder == previous.holder:
            move = tenure.renewed(key, spec, to_identity)
        else:
            move = tenure.taken(key, holder, to_identity, spec, timezone.now())
        if move is not None:
            batch.history.append(move)

    def observe_deleted(self, key: Key, received: float | None = None) -> None:
        received = time.monotonic() if received is None else received
        with self._lock:
            self._known.pop(key, None)
            self._renewable.pop(key, None)
            self._identities.pop(key, None)
            tenure = self._tenures.pop(key, None)
            self._batch.record_deletion(key, received)
            if tenure is not None:
                move = tenure.deleted(key, timezone.now())
                if move is not None:
                    # After record_deletion: the move waits with the lease's history, and
                    # the flush writes it before the deletion.
                    self._batch.history.append(move)

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
        """Write what waits, oldest first, FLUSH_MAX_LEASES at a time, for as long as
        FLUSH_BUDGET_SECONDS allows: a backlog (a burst, the renewals after a list) is
        written at the database's speed instead of FLUSH_MAX_LEASES per flush interval.

        At full speed 15,000 leases wait at once; at 4,000 a flush, 0.5 s apart, the last
        of them waited 2 s while each flush took under 0.2 s of its 0.5. A failure after a
        first part was written ends the flush with what it wrote (the failed part is back
        in the queue, and the next flush meets the failure and says so).
        """
        started = time.monotonic()
        result = self._flush_part()
        while not result.drained and time.monotonic() - started < FLUSH_BUDGET_SECONDS:
            try:
                more = self._flush_part()
            except DatabaseError:
                break
            _add(result, more)
        return result

    def _flush_part(self) -> FlushResult:
        """Write what was observed since the last flush, oldest first, in committed chunks.

        Leases are kept in first-seen order, so committing chunk by chunk gets the longest
        waiting rows into the database first: under full load the worst staleness is about
        one flush, not two. Each chunk commits its leases together with their transitions
        and span moves, which is what makes a restarted watcher agree with the database.
        """
        with self._lock:
            # The longest-waiting leases first: see PendingBatch.split_oldest.
            batch, self._batch = self._batch.split_oldest(FLUSH_MAX_LEASES, _transition_key)
            drained = self._batch.is_empty()
        result = FlushResult(events=batch.events, drained=drained)
        if batch.is_empty():
            return result
        pending_history = batch.history_by_key(_transition_key)
        items = list(batch.objects.items())
        written = 0
        try:
            for start in range(0, len(items), CHUNK_LEASES):
                chunk = items[start : start + CHUNK_LEASES]
                try:
                    self._write_chunk(chunk, pending_history, result)
                except ROW_DATA_ERRORS:
                    # The database refused a value, not the connection: retrying the same
                    # batch would fail forever and keep every valid lease out. Write one
                    # by one instead and skip only the leases that fail alone.
                    for index, item in enumerate(chunk):
                        self._write_alone(item, pending_history, result)
                        written = start + index + 1
                written = start + len(chunk)
                oldest = min(batch.received[key] for key, _ in chunk)
                result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest)
            with transaction.atomic():
                # History of leases deleted later in the same batch (their transitions, the
                # spans their deletion closes), then deletions.
                leftover = [item for group in pending_history.values() for item in group]
                history = self._write_history(leftover, {})
                deletions = self._mark_deleted(batch.deleted, timezone.now())
            history.add_to(result)
            result.deletions_written = deletions
            pending_history.clear()
        except DatabaseError:
            failed = batch.remainder(written, pending_history)
            with self._lock:
                self._batch.requeue(failed)
            raise
        if batch.deleted:
            oldest_deletion = min(batch.deleted.values())
            result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest_deletion)
        return result

    def _write_chunk(
        self,
        chunk: list[tuple[Key, Pending]],
        pending_history: dict[Key, list[History]],
        result: FlushResult,
    ) -> None:
        """Commit leases with their history; nothing is counted unless it commits.

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
        for key, pending in chunk:
            obj = _unpacked(pending)
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
            history = self._write_history(
                [item for key, _ in chunk for item in pending_history.get(key, ())], ids
            )
        with self._lock:
            # Under the chunk's keys, which are those `_known` holds (one tuple per lease).
            lease_ids = self._lease_ids
            for key, _ in chunk:
                lease_id = ids.get(key)
                if lease_id is not None:
                    lease_ids[key] = lease_id
            for key, _ in full:
                digest = digests.get(key)
                if digest is not None and key in ids and key in self._known:
                    self._renewable[key] = digest
                else:
                    self._renewable.pop(key, None)
            self._follow_identities(observations)
        for key, _ in chunk:
            pending_history.pop(key, None)
        result.leases_written += len(observations) + len(renewed)
        result.leases_renewed += len(renewed)
        history.add_to(result)
        result.objects_cleaned += sum(observation.cleaned for observation in observations)

    def _write_alone(
        self,
        item: tuple[Key, Pending],
        pending_history: dict[Key, list[History]],
        result: FlushResult,
    ) -> None:
        try:
            self._write_chunk([item], pending_history, result)
        except ROW_DATA_ERRORS as exc:
            pending_history.pop(item[0], None)
            result.leases_skipped += 1
            # The lease's name only: its values are the cluster's data, maybe large.
            logger.warning(
                "cluster %s: skipped lease %s/%s, which the database refused (%s)",
                self.cluster_id,
                *item[0],
                type(exc).__name__,
            )

    def _follow_identities(self, observations: list[LeaseObservation]) -> None:
        """Identities as the flush parsed them: annotations may change without a holder
        change. Called under the lock; a lease whose holder has changed since its object
        was taken keeps what its change set."""
        identities, known = self._identities, self._known
        for observation in observations:
            key = observation.key
            if observation.library is not LeaseLibrary.LEADER_K8S and key not in identities:
                continue  # the identity is the holder, as assumed
            current = known.get(key)
            if current is None or current.holder != observation.holder:
                continue
            if observation.identity != observation.holder[:MAX_IDENTITY]:
                identities[key] = observation.identity
            else:
                identities.pop(key, None)

    def _write_history(self, pending: list[History], ids: dict[Key, int]) -> _Written:
        """Transitions (with their fencing check) and span moves, in observed order."""
        written = _Written()
        if not pending:
            return written
        with self._lock:
            known_ids = {item.key: self._lease_ids.get(item.key) for item in pending}
        rows = []
        moves: list[tuple[int, SpanMove]] = []
        # This flush's changes by lease and life (uid): only those of the same life count.
        earlier: dict[tuple[int, str], list[tuple[str, str]]] = {}
        reused_at: dict[int, datetime] = {}
        for item in pending:
            lease_id = ids.get(item.key) or known_ids.get(item.key)
            if lease_id is None:
                # Created, changed and deleted within one batch: no row ever existed.
                continue
            if isinstance(item, SpanMove):
                moves.append((lease_id, item))
                continue
            change = (item.from_holder, item.to_holder)
            before = earlier.setdefault((lease_id, item.life), [])
            reused = item.token and token_came_back(lease_id, change, before, item.life_started)
            before.append(change)
            if reused:
                reused_at[lease_id] = item.observed_at
            rows.append(
                LeaseTransition(
                    lease_id=lease_id,
                    from_holder=item.from_holder,
                    to_holder=item.to_holder,
                    from_identity=item.from_identity,
                    to_identity=item.to_identity,
                    observed_at=item.observed_at,
                    acquire_time=item.acquire_time,
                    lease_transitions=item.lease_transitions,
                    missed=item.missed,
                    fencing_reused=reused,
                )
            )
        LeaseTransition.objects.bulk_create(rows, batch_size=UPSERT_BATCH_SIZE)
        for lease_id, observed_at in reused_at.items():
            Lease.objects.filter(pk=lease_id).update(fencing_reused_at=observed_at)
        spans = write_moves(moves)
        written.transitions = len(rows)
        written.fencing_reused = sum(row.fencing_reused for row in rows)
        written.spans_opened, written.spans_closed = spans.opened, spans.closed
        return written

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


def _add(result: FlushResult, more: FlushResult) -> None:
    """`more` counted into `result`: the counts add up, the worst lag is the worse one, and
    what waits is what the later part left."""
    for name in (item.name for item in fields(FlushResult)):
        if name == "lag_seconds":
            result.lag_seconds = max(result.lag_seconds, more.lag_seconds)
        elif name == "drained":
            result.drained = more.drained
        else:
            setattr(result, name, getattr(result, name) + getattr(more, name))


def _packed(obj: dict[str, Any]) -> Pending:
    try:
        # Copied: orjson's own bytes keep the 4 KiB it wrote into, whatever their length.
        return memoryview(orjson.dumps(obj)).tobytes()
    except (orjson.JSONEncodeError, TypeError):
        return obj


def _unpacked(pending: Pending) -> dict[str, Any]:
    if isinstance(pending, bytes):
        return orjson.loads(pending)  # type: ignore[no-any-return]
    return pending


def compact_key(namespace: str, name: str) -> Key:
    """A lease's key as the ingestor keeps it: the namespace interned (a cluster has a few,
    and every node lease's is the same), so each lease costs a tuple and its name only."""
    return (sys.intern(namespace), name)


def _shared(holder: str, name: str) -> str:
    """The holder, as the name's own string when they are equal (a node lease's holder is
    its node, which is its name): one string kept instead of two."""
    return name if holder == name else holder


def _version_number(value: object) -> int | None:
    """A resourceVersion as the API server orders it (etcd's revision: a decimal integer),
    or None for anything else, which cannot be ordered."""
    if type(value) is not str or not value.isascii() or not value.isdigit() or len(value) > 20:
        return None
    return int(value)


def _order(obj: dict[str, Any]) -> tuple[str, int | None]:
    """The object's uid and resourceVersion number: where it sits in the server's order."""
    metadata = obj["metadata"]  # lease_state checked it
    uid = metadata.get("uid")
    return (uid if type(uid) is str else "", _version_number(metadata.get("resourceVersion")))


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
