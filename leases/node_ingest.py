"""Turn a stream of Node objects into Node rows and Ready history, in batches.

The guarantees are LeaseIngestor's (leases/ingest.py): events are coalesced per node in
memory and written by `flush()` in bulk upserts, oldest first, in committed chunks; Ready
changes are detected as each event arrives, against the newest state seen, so coalescing
never hides one; a failed flush puts what was not committed back, so nothing is lost; and
the in-memory state starts from the database, so a restarted watcher writes no duplicate
history. The reader thread calls `observe*()`, another thread `flush()`.

What differs is the cost model. A kubelet re-posts its status with only lastHeartbeatTime
changed; none of that is stored. So each node's stored fields are kept as a digest of what
the database holds, and a flush writes only the nodes whose digest changed: a heartbeat
costs one parse and no database write.

And what waits for a flush is the parse (NodeObservation: the bounded stored fields, about
2 KB), not the raw Node: a real Node is 5-60 KiB of JSON (status.images, managedFields) and
several times that as Python objects, and a list of 20,000 Nodes, or a burst of status
posts, would otherwise hold that many raw Nodes until their flush. A Node is parsed as it
arrives (its events rarely come more than one per node per flush: a kubelet posts its status
every minute or so), so nothing is parsed twice.
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

from leases.models import ConditionStatus
from leases.node_parse import (
    NodeObservation,
    ReadyCondition,
    node_key,
    parse_node,
)
from leases.node_rows import (
    PendingReadyChange,
    mark_nodes_deleted,
    observation_digest,
    stored_nodes,
    upsert_nodes,
    write_ready_changes,
)
from leases.pending_batch import PendingBatch

logger = logging.getLogger(__name__)

UPSERT_BATCH_SIZE = 1000
FLUSH_MAX_NODES = 4000
# A list waits (leases.watch_loop) while this many parsed Nodes wait for a flush: a list of
# 20,000 holds about one flush's worth of them, not the whole list.
MAX_PENDING_NODES = FLUSH_MAX_NODES
ROW_DATA_ERRORS = (DataError, IntegrityError, ValueError, OverflowError)


@dataclass(slots=True)
class NodeFlushResult:
    events: int = 0
    nodes_written: int = 0
    deletions_written: int = 0
    ready_changes_written: int = 0
    # Worst delay from an event's arrival to its effect being committed, in seconds.
    lag_seconds: float = 0.0
    drained: bool = True  # nothing observed before this flush is still waiting
    # Nodes whose stored fields had not changed (heartbeats): no row was written.
    unchanged: int = 0
    # Nodes stored without NULs or with values cut to fit, and nodes the database refused
    # (their data, not the connection) that were skipped so the rest could be written.
    objects_cleaned: int = 0
    nodes_skipped: int = 0

    @property
    def skipped(self) -> int:
        """Objects not stored as sent: KubeCluster.skipped_objects_total counts these."""
        return self.objects_cleaned + self.nodes_skipped


# Nodes waiting for a flush: the newest parse per node, with its Ready changes.
_Batch = PendingBatch[str, NodeObservation, PendingReadyChange]


def _change_key(change: PendingReadyChange) -> str:
    return change.name


class NodeIngestor:
    # What a list lets wait for a flush before it reads on (leases.watch_loop).
    max_pending = MAX_PENDING_NODES

    def __init__(self, cluster_id: int, *, chunk_size: int = UPSERT_BATCH_SIZE) -> None:
        self.cluster_id = cluster_id
        self.chunk_size = chunk_size
        self._lock = threading.Lock()
        self._batch: _Batch = PendingBatch()
        # Ready's status and lastTransitionTime as last seen, per present node.
        self._known: dict[str, tuple[ConditionStatus, datetime | None]] = {}
        self._stored: dict[str, bytes] = {}  # digest of each live row, as committed
        self._node_ids: dict[str, int] = {}
        self.load_known()

    def load_known(self) -> None:
        """Start from what the database holds, so a restarted watcher compares correctly."""
        stored = list(stored_nodes(self.cluster_id))
        with self._lock:
            self._known = {node.name: (node.ready, node.ready_since) for node in stored}
            self._stored = {node.name: node.digest for node in stored}
            self._node_ids = {node.name: node.node_id for node in stored}

    @property
    def known_names(self) -> set[str]:
        with self._lock:
            return set(self._known)

    def pending_objects(self) -> int:
        """Parsed Nodes waiting for a flush (a list waits while there are max_pending)."""
        return len(self._batch.objects)  # one len() of a dict: atomic without the lock

    def observe(self, obj: dict[str, Any], received: float | None = None) -> bool:
        """An ADDED or MODIFIED Node; False when it is not a usable Node (no name)."""
        observation = parse_node(obj)
        if observation is None:
            return False
        received = time.monotonic() if received is None else received
        name, ready = observation.name, observation.ready
        with self._lock:
            batch = self._batch
            batch.events += 1
            # A node seen for the first time (or again after its deletion) appears: "" -> X.
            previous, since = self._known.get(name, _UNSEEN)
            if ready.status != previous or _moved(since, ready.last_transition_time):
                batch.history.append(_change(name, previous, ready))
            self._known[name] = (ready.status, ready.last_transition_time)
            batch.objects[name] = observation
            batch.received.setdefault(name, received)
            batch.deleted.pop(name, None)
        return True

    def observe_deleted(self, name: str, received: float | None = None) -> None:
        """A DELETED Node, by its name (node_name_of(obj)); a raw name is keyed the same."""
        name = node_key(name)
        received = time.monotonic() if received is None else received
        with self._lock:
            self._known.pop(name, None)
            self._batch.record_deletion(name, received)

    def reconcile(self, listed_names: set[str]) -> int:
        """After a (re)list: nodes we know of that the list no longer has were deleted."""
        gone = self.known_names - listed_names
        for name in gone:
            self.observe_deleted(name)
        return len(gone)

    def count_event(self) -> None:
        """An event that changed no row (a bookmark) still shows the stream is alive."""
        with self._lock:
            self._batch.events += 1

    def flush(self) -> NodeFlushResult:
        """Write what was observed since the last flush, oldest first, in committed chunks;
        each chunk commits its nodes with their Ready history."""
        with self._lock:
            # The longest-waiting nodes first: see PendingBatch.split_oldest.
            batch, self._batch = self._batch.split_oldest(FLUSH_MAX_NODES, _change_key)
            drained = self._batch.is_empty()
        result = NodeFlushResult(events=batch.events, drained=drained)
        if batch.is_empty():
            return result
        pending = batch.history_by_key(_change_key)
        items = list(batch.objects.items())
        written = 0
        try:
            for start in range(0, len(items), self.chunk_size):
                chunk = items[start : start + self.chunk_size]
                try:
                    self._write_chunk(chunk, pending, result)
                except ROW_DATA_ERRORS:
                    # The database refused a value, not the connection: write one by one
                    # and skip only the nodes that fail alone.
                    for index, item in enumerate(chunk):
                        self._write_alone(item, pending, result)
                        written = start + index + 1
                written = start + len(chunk)
                oldest = min(batch.received[name] for name, _ in chunk)
                result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest)
            with transaction.atomic():
                # History of nodes deleted later in the same batch, then the deletions.
                leftover = [change for group in pending.values() for change in group]
                result.ready_changes_written += self._write_changes(leftover, {})
                result.deletions_written = mark_nodes_deleted(
                    self.cluster_id, batch.deleted, timezone.now()
                )
            with self._lock:
                for name in batch.deleted:
                    self._stored.pop(name, None)
            pending.clear()
        except DatabaseError:
            failed = batch.remainder(written, pending)
            with self._lock:
                self._batch.requeue(failed)
            raise
        if batch.deleted:
            oldest_deletion = min(batch.deleted.values())
            result.lag_seconds = max(result.lag_seconds, time.monotonic() - oldest_deletion)
        return result

    def _write_chunk(
        self,
        chunk: list[tuple[str, NodeObservation]],
        pending: dict[str, list[PendingReadyChange]],
        result: NodeFlushResult,
    ) -> None:
        """Commit the changed nodes of a chunk with their Ready history; nothing is counted
        or remembered unless it commits."""
        now = timezone.now()
        with self._lock:
            stored = {name: self._stored.get(name) for name, _ in chunk}
        changed: list[NodeObservation] = []
        digests: dict[str, bytes] = {}
        unchanged = cleaned = 0
        for name, observation in chunk:
            fingerprint = observation_digest(observation)
            if fingerprint == stored[name]:
                unchanged += 1  # a heartbeat: nothing the dashboard keeps has changed
                continue
            changed.append(observation)
            digests[name] = fingerprint  # the chunk's name: the string `_known` holds
            cleaned += observation.cleaned or observation.cut > 0
        with transaction.atomic():
            ids = upsert_nodes(self.cluster_id, changed, now)
            changes = [change for name, _ in chunk for change in pending.get(name, ())]
            changes_written = self._write_changes(changes, ids)
        with self._lock:
            node_ids = self._node_ids
            for name, _ in chunk:  # the names `_known` holds, not the parse's copies
                node_id = ids.get(name)
                if node_id is not None:
                    node_ids[name] = node_id
            self._stored.update(digests)
        for name, _ in chunk:
            pending.pop(name, None)
        result.nodes_written += len(changed)
        result.unchanged += unchanged
        result.ready_changes_written += changes_written
        result.objects_cleaned += cleaned

    def _write_alone(
        self,
        item: tuple[str, NodeObservation],
        pending: dict[str, list[PendingReadyChange]],
        result: NodeFlushResult,
    ) -> None:
        try:
            self._write_chunk([item], pending, result)
        except ROW_DATA_ERRORS as exc:
            pending.pop(item[0], None)
            result.nodes_skipped += 1
            # The node's name only: its values are the cluster's data, maybe large.
            logger.warning(
                "cluster %s: skipped node %s, which the database refused (%s)",
                self.cluster_id,
                item[0],
                type(exc).__name__,
            )

    def _write_changes(self, changes: list[PendingReadyChange], ids: dict[str, int]) -> int:
        if not changes:
            return 0
        # The ids of these changes' nodes only: not a copy of every node's id per flush.
        with self._lock:
            node_ids = self._node_ids
            known_ids = {
                change.name: node_id
                for change in changes
                if (node_id := ids.get(change.name) or node_ids.get(change.name)) is not None
            }
        return write_ready_changes(changes, known_ids)


_UNSEEN: tuple[ConditionStatus, datetime | None] = (ConditionStatus.MISSING, None)


def _moved(since: datetime | None, transitioned: datetime | None) -> bool:
    """Ready's lastTransitionTime moved on without its status changing: it changed and
    changed back while nobody watched (the kubelet and node controller move it only with
    the status). Only forward counts: an older or missing time proves nothing."""
    return since is not None and transitioned is not None and transitioned > since


def _change(name: str, previous: ConditionStatus, ready: ReadyCondition) -> PendingReadyChange:
    return PendingReadyChange(
        name=name,
        from_status=previous.value,
        to_status=ready.status.value,
        reason=ready.reason,
        message=ready.message,
        transitioned_at=ready.last_transition_time,
        observed_at=timezone.now(),
    )
