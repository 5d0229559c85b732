"""Holder spans: each holder's unbroken tenure of a leader-election or control-plane Lease.

The ingestor follows these leases (and only these: node heartbeats are the hot path) event
by event, because coalescing keeps only a lease's newest object per flush and a span's edges
lie in the objects in between: a takeover ends the old holder's span at its last expiry, a
late renewal is late against the renewal just before it. Each event that moves a span
becomes a `SpanMove`, waiting with the lease's other history for the flush, which applies
the moves to the open spans in the same transaction as the lease rows:

- a new holder (first sight, takeover, acquisition after a release): the other open span
  closes at min(its holder's last expiry, the new holder's start), the new one opens at the
  holder's acquireTime (else its renewTime, else when it was seen);
- a release (holderIdentity emptied) or a deletion: the open span closes at min(last
  expiry, the release's renewTime or the moment the deletion was seen);
- the same holder renewing after its previous expiry: its span closes at that expiry and a
  new one opens at the renewal.

Restart safety: a span row and the lease row it follows commit together, so the database's
open span always belongs to the lease's stored holder, and a new ingestor starts from the
stored holder and expiry (`load_tenures`). A move applied twice changes nothing (the open
span of the holder is kept), and a failed flush puts its moves back with the rest of its
batch. A lease's class is decided when the ingestor first sees or loads it: a lease whose
labels move it into these classes gets its span from `open_missing_spans` at the next start.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef

from leases.models import Lease, LeaseClass, LeaseHolderSpan
from leases.parse import parse_time, renewal_times

Key = tuple[str, str]
# The classes whose leases have one holder at a time, taken over on loss.
FOLLOWED_CLASSES = frozenset({LeaseClass.LEADER_ELECTION, LeaseClass.CONTROL_PLANE})


@dataclass(slots=True)
class SpanMove:
    """One change to a lease's spans, found as its event arrived and written at the flush.

    Every open span that the move ends closes at `close_at` (never before its own start);
    then `holder` ("" for nobody) has an open span from `started_at`, unless it has one.
    A late renewal (`late`) ends the holder's own span too, when it began before the move.
    """

    key: Key
    close_at: datetime
    holder: str
    identity: str
    started_at: datetime | None
    late: bool = False


@dataclass(slots=True)
class Tenure:
    """What the ingestor keeps of a followed lease between its events."""

    holder: str
    expires_at: datetime | None
    # The renewTime of the last write seen (a renewal, a takeover or a release).
    written_at: datetime | None = None

    def renewed(self, key: Key, spec: dict[str, Any], identity: str) -> SpanMove | None:
        """A renewal (the holder unchanged); a move when it came after the last expiry."""
        renew_time, expires_at = _times(spec)
        previous, self.expires_at = self.expires_at, expires_at
        if renew_time is not None:
            self.written_at = renew_time
        if not self.holder or previous is None or renew_time is None or renew_time <= previous:
            return None
        return SpanMove(key, previous, self.holder, identity, renew_time, late=True)

    def taken(
        self, key: Key, holder: str, identity: str, spec: dict[str, Any], seen: datetime
    ) -> SpanMove:
        """A new holder, or nobody (a release): the move that ends the old span."""
        renew_time, expires_at = _times(spec)
        started_at: datetime | None = None
        if holder:
            acquired = parse_time(spec.get("acquireTime"))
            if acquired is not None and self.written_at is not None and acquired < self.written_at:
                # An acquireTime older than the lease's last write is not this tenure's
                # start: leader-k8s keeps the old one when it takes a released lease, and a
                # stale holder writes back the acquireTime of its old view. The write's
                # renewTime is when this tenure began; otherwise a gap would vanish, or the
                # tenure would begin before the one it ends.
                acquired = None
            started_at = close_at = acquired or renew_time or seen
        else:
            # leader-k8s and client-go stamp a release with renewTime = now.
            close_at = renew_time or seen
        if self.expires_at is not None:
            close_at = min(close_at, self.expires_at)
        if renew_time is not None:
            self.written_at = renew_time
        self.holder, self.expires_at = holder, expires_at
        return SpanMove(key, close_at, holder, identity, started_at)

    def deleted(self, key: Key, seen: datetime) -> SpanMove | None:
        if not self.holder:
            return None
        close_at = seen if self.expires_at is None else min(seen, self.expires_at)
        return SpanMove(key, close_at, "", "", None)


def _times(spec: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    """renewTime and the expiry it sets, as the lease row stores them."""
    renew = spec.get("renewTime")
    return renewal_times(spec, renew if type(renew) is str else "")


def first_sight(
    key: Key, holder: str, identity: str, spec: dict[str, Any], seen: datetime
) -> tuple[Tenure, SpanMove | None]:
    """A followed lease seen for the first time (created, or not in the database yet)."""
    tenure = Tenure("", None)
    move = tenure.taken(key, holder, identity, spec, seen)
    return tenure, move if holder else None


def load_tenures(cluster_id: int) -> dict[Key, Tenure]:
    """The followed leases of a cluster as stored: a new ingestor continues from them."""
    rows = Lease.objects.filter(
        cluster_id=cluster_id, deleted_at__isnull=True, lease_class__in=FOLLOWED_CLASSES
    ).values_list("namespace", "name", "holder", "expires_at", "renew_time")
    return {
        (namespace, name): Tenure(holder, expires_at, renew_time)
        for namespace, name, holder, expires_at, renew_time in rows.iterator(chunk_size=2000)
    }


def open_missing_spans(cluster_id: int) -> int:
    """Open a span for each held, followed lease that has none: leases stored before spans
    were kept, or whose labels moved them into a followed class. Returns how many."""
    open_span = LeaseHolderSpan.objects.filter(lease_id=OuterRef("pk"), ended_at__isnull=True)
    rows = (
        Lease.objects.filter(
            cluster_id=cluster_id, deleted_at__isnull=True, lease_class__in=FOLLOWED_CLASSES
        )
        .exclude(holder="")
        .exclude(Exists(open_span))
        .values_list("id", "holder", "identity", "acquire_time", "renew_time", "observed_at")
    )
    spans = [
        LeaseHolderSpan(
            lease_id=lease_id,
            holder=holder,
            identity=identity,
            started_at=acquire_time or renew_time or observed_at,
        )
        for lease_id, holder, identity, acquire_time, renew_time, observed_at in rows
    ]
    LeaseHolderSpan.objects.bulk_create(spans)
    return len(spans)


@dataclass(slots=True)
class SpansWritten:
    opened: int = 0
    closed: int = 0


def write_moves(moves: Iterable[tuple[int, SpanMove]]) -> SpansWritten:
    """Apply (lease id, move) pairs, in order, to the leases' open spans: one read of the
    open spans, one insert and one update, inside the caller's transaction."""
    by_lease: dict[int, list[SpanMove]] = defaultdict(list)
    for lease_id, move in moves:
        by_lease[lease_id].append(move)
    written = SpansWritten()
    if not by_lease:
        return written
    open_spans: dict[int, list[LeaseHolderSpan]] = defaultdict(list)
    for span in LeaseHolderSpan.objects.filter(
        lease_id__in=list(by_lease), ended_at__isnull=True
    ).order_by("started_at", "id"):
        open_spans[span.lease_id].append(span)
    created: list[LeaseHolderSpan] = []
    closed: list[LeaseHolderSpan] = []
    for lease_id, lease_moves in by_lease.items():
        spans = open_spans[lease_id]
        for move in lease_moves:
            spans = _apply(lease_id, move, spans, created, closed)
    LeaseHolderSpan.objects.bulk_create(created)
    # Spans opened and closed within this write are inserted closed: only older rows update.
    stored = [span for span in closed if span.pk is not None]
    LeaseHolderSpan.objects.bulk_update(stored, ["ended_at"])
    written.opened, written.closed = len(created), len(closed)
    return written


def _apply(
    lease_id: int,
    move: SpanMove,
    spans: list[LeaseHolderSpan],
    created: list[LeaseHolderSpan],
    closed: list[LeaseHolderSpan],
) -> list[LeaseHolderSpan]:
    """One move on one lease's open spans; the spans open after it."""
    still_open: list[LeaseHolderSpan] = []
    for span in spans:
        if move.late:
            ends = move.started_at is not None and span.started_at < move.started_at
        else:
            ends = span.holder != move.holder
        if ends:
            span.ended_at = max(span.started_at, move.close_at)
            closed.append(span)
        else:
            still_open.append(span)
    held = any(span.holder == move.holder for span in still_open)
    if move.holder and move.started_at is not None and not held:
        span = LeaseHolderSpan(
            lease_id=lease_id,
            holder=move.holder,
            identity=move.identity,
            started_at=move.started_at,
        )
        created.append(span)
        still_open.append(span)
    return still_open
