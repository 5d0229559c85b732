"""What an ingestor has observed and not yet written: the newest object per key, in
first-seen order, with the history rows (holder transitions, Ready changes) found on the way.

Shared by LeaseIngestor (leases/ingest.py) and NodeIngestor (leases/node_ingest.py), which
differ in what they write, not in how observations wait for a flush. The callers hold their
own lock around every method here; nothing in this module locks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # what identifies one object: (namespace, name), a name
O = TypeVar("O")  # noqa: E741  the object as it waits: a raw Lease, a parsed Node
H = TypeVar("H")  # one history row, written with its object's row


@dataclass(slots=True)
class PendingBatch(Generic[K, O, H]):
    # The newest object per key (a Lease raw, parsed once per flush, not once per event; a
    # Node as its bounded parse, see leases/node_ingest.py). Insertion
    # order is first-seen order, which is what makes "oldest first" a slice.
    objects: dict[K, O] = field(default_factory=dict)
    # When each key's first waiting event arrived (time.monotonic()), for the flush lag.
    received: dict[K, float] = field(default_factory=dict)
    deleted: dict[K, float] = field(default_factory=dict)
    history: list[H] = field(default_factory=list)
    events: int = 0

    def is_empty(self) -> bool:
        return not (self.objects or self.deleted or self.history)

    def record_deletion(self, key: K, received: float) -> None:
        """A deletion replaces whatever was waiting for the key; it keeps the arrival time
        of the first deletion, should the key be deleted again before a flush."""
        self.events += 1
        self.objects.pop(key, None)
        self.received.pop(key, None)
        self.deleted.setdefault(key, received)

    def split_oldest(
        self, limit: int, history_key: Callable[[H], K]
    ) -> tuple[PendingBatch[K, O, H], PendingBatch[K, O, H]]:
        """(the longest-waiting objects, at most `limit`, with their history; what stays).

        Under full load every object is pending all the time; writing the oldest first, in
        bounded flushes, keeps the wait of any one object near the time it takes to write
        the whole set once, instead of a whole flush plus the next one. The usual case, a
        batch within the limit, hands itself over whole and costs one allocation.
        """
        if len(self.objects) <= limit:
            return self, PendingBatch()
        # Every deletion goes with the first part, and the history of a deleted key with it:
        # a deletion is one UPDATE and no parse, so the limit counts objects only. The event
        # count goes too, so that each event is counted once, by the flush that takes it.
        taken: PendingBatch[K, O, H] = PendingBatch(events=self.events, deleted=self.deleted)
        for key in list(itertools.islice(self.objects, limit)):
            taken.objects[key] = self.objects.pop(key)
            taken.received[key] = self.received.pop(key)
        keep: list[H] = []
        for row in self.history:
            key = history_key(row)
            if key in taken.objects or key in taken.deleted:
                taken.history.append(row)
            else:
                keep.append(row)
        self.history, self.deleted, self.events = keep, {}, 0
        return taken, self

    def history_by_key(self, history_key: Callable[[H], K]) -> dict[K, list[H]]:
        """The history rows grouped by their object's key, each group in observed order:
        a flush writes each group with its object's chunk, and what is left after the
        last chunk (rows of objects deleted since) on its own."""
        grouped: dict[K, list[H]] = {}
        for row in self.history:
            grouped.setdefault(history_key(row), []).append(row)
        return grouped

    def remainder(self, written: int, unwritten_history: dict[K, list[H]]) -> PendingBatch[K, O, H]:
        """What of this batch was not committed when a chunk failed: the objects after the
        first `written`, every deletion, and the history rows still pending, as grouped by
        `history_by_key` and not yet written."""
        rest: PendingBatch[K, O, H] = PendingBatch(events=self.events)
        for key, obj in list(self.objects.items())[written:]:
            rest.objects[key] = obj
            rest.received[key] = self.received[key]
        rest.deleted = dict(self.deleted)
        rest.history = [row for group in unwritten_history.values() for row in group]
        return rest

    def requeue(self, failed: PendingBatch[K, O, H]) -> None:
        """Put a batch that could not be written back in front of these newer observations.

        A newer object or deletion of the same key wins over the failed one, but the key
        keeps its earlier arrival time, so the lag it reports stays honest; the failed
        history goes first, as it happened first.
        """
        for key, obj in failed.objects.items():
            if key not in self.objects and key not in self.deleted:
                self.objects[key] = obj
                self.received[key] = failed.received[key]
            elif key in self.received:
                self.received[key] = min(self.received[key], failed.received[key])
        for key, received in failed.deleted.items():
            if key not in self.objects:
                self.deleted.setdefault(key, received)
        self.history[:0] = failed.history
        self.events += failed.events
