"""History retention: old history rows deleted in small batches, hourly (beat), within a budget.

What is deleted, and after how long (settings `HISTORY_RETENTION_DAYS`, 30 days by default;
`INCIDENT_RETENTION_DAYS`, 90; `NKS_HEALTH_HISTORY_DAYS`, 7):

- Lease holder changes seen before the cutoff; each lease's latest change is kept (the lease
  page's current holder and "since").
- Holder spans ended before the cutoff; open spans are kept, and so is each lease's last span
  begun before the cutoff: availability's span before its window (the first takeover's wait,
  a gap reaching into the window).
- Watch coverage last seen before the cutoff; each cluster's newest row is kept (a live
  watcher moves it), and a row another row overlaps and outlasts is joined into that one
  (the merged stretch a gap may lie in stays whole).
- Node Ready changes seen before the cutoff; each node's latest change is kept.
- NKS events created (by NKS's clock) and first seen before the cutoff; kept are each
  cluster's newest `EVENTS_SHOWN` (its page's list) and events a resize request names (what
  the dashboard did is kept). One NKS still lists is stored again by the next poll, seen
  anew: NKS's own history is NKS's to bound, and the page never shows the difference.
- NKS health samples taken before `NKS_HEALTH_HISTORY_DAYS` (the cluster page's strip reads
  24 hours).
- Incidents resolved before the cutoff, with their timeline and the notifications that told
  of nothing else. Open and pending incidents are kept, and so is a resolved one while a
  message about it waits to be sent or is being sent: delivery is never cut short (it gives
  up within ALERT_RETRY_HOURS, far inside the retention). A message about no incident (a
  channel's test) goes after the same time once it is done.

The rules keep availability's figures exact over every window it reads (7 days, inside the
minimum retention): a span or coverage row that could change a figure is never old.

Each batch is one short transaction: pick at most `HISTORY_PRUNE_BATCH` ids (on PostgreSQL
`FOR UPDATE SKIP LOCKED`, so two runs never wait on each other's rows or pick the same ones),
delete them by id. A run takes one batch of each table in turn until none has more or
`HISTORY_PRUNE_BUDGET_SECONDS` have passed; the next run continues. Within a run each table
is read in its index order from where the last batch stopped, so kept rows are passed once.
An expiring lock lets one run at a time work; a second one (two beat ticks, a manual run)
returns at once, and even without the lock the deletes by id are harmless twice.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db import models, transaction
from django.db.models import Exists, OuterRef, Q

from alerts.models import DeliveryState, Incident, IncidentEvent, IncidentState, Notification
from dashboard.locks import ExpiringLock
from leases.models import LeaseHolderSpan, LeaseTransition, NodeReadyChange, WatchCoverage
from nks.models import HealthSample, NksEvent, ResizeRequest
from nks.presenters.cluster_detail import EVENTS_SHOWN

logger = logging.getLogger(__name__)

# A message in these states may still be sent: neither it nor its incidents are deleted.
UNDELIVERED = (DeliveryState.PENDING, DeliveryState.SENDING)
LOCK_NAME = "history-retention"
# The lock outlives a run killed at its hard time limit (dashboard.celery adds 60 s to the
# budget and a kill grace on top), so a second run never overlaps a stalled first one.
LOCK_SLACK_SECONDS = 120
# What /metrics reports of the runs (dashboard.metrics), kept in the shared cache: a counter
# that restarts from 0 when the cache is emptied is still a Prometheus counter.
DELETED_KEY = "retention:deleted:"
LAST_RUN_KEY = "retention:last-run"


def _later(key: str, moment: str) -> Q:
    """A row of the same `key` (lease, node, cluster) after the outer row, by (moment, id)."""
    return Q(**{key: OuterRef(key)}) & (
        Q(**{f"{moment}__gt": OuterRef(moment)})
        | Q(**{moment: OuterRef(moment), "pk__gt": OuterRef("pk")})
    )


def _old_transitions(cutoff: datetime) -> Q:
    later = LeaseTransition.objects.filter(_later("lease_id", "observed_at"))
    return Q(observed_at__lt=cutoff) & Q(Exists(later))


def _old_ready_changes(cutoff: datetime) -> Q:
    later = NodeReadyChange.objects.filter(_later("node_id", "observed_at"))
    return Q(observed_at__lt=cutoff) & Q(Exists(later))


def _old_spans(cutoff: datetime) -> Q:
    # A later span begun before the cutoff makes this one irrelevant to every window after
    # the cutoff: that span (or one after it) is the one availability reads before a window.
    later = LeaseHolderSpan.objects.filter(_later("lease_id", "started_at"), started_at__lt=cutoff)
    return Q(ended_at__lt=cutoff) & Q(Exists(later))


def _old_coverage(cutoff: datetime) -> Q:
    newer = WatchCoverage.objects.filter(_later("cluster_id", "started_at"))
    return Q(last_seen_at__lt=cutoff) & Q(Exists(newer))


def _remove_coverage(ids: list[int], batch: int) -> dict[str, int]:
    """Old stretches go; one that another row overlaps and outlasts (a takeover's two
    watchers, a restart that touched) is first joined into that row, which then starts
    where it started: availability merges them so, and a gap inside the merged stretch
    stays watched. A chain of such rows ends as one row."""
    deleted = 0
    for row_id in ids:
        row = (
            WatchCoverage.objects.filter(pk=row_id)
            .values("cluster_id", "started_at", "last_seen_at")
            .first()
        )
        if row is None:
            continue
        joined = (
            WatchCoverage.objects.filter(
                cluster_id=row["cluster_id"],
                started_at__lte=row["last_seen_at"],
                last_seen_at__gte=row["last_seen_at"],
            )
            .exclude(pk=row_id)
            .order_by("-last_seen_at", "pk")
            .values_list("pk", flat=True)
            .first()
        )
        if joined is not None:
            WatchCoverage.objects.filter(pk=joined, started_at__gt=row["started_at"]).update(
                started_at=row["started_at"]
            )
        deleted += _delete(WatchCoverage, [row_id])
    return {WatchCoverage._meta.db_table: deleted}


def _old_nks_events(cutoff: datetime) -> Q:
    named = ResizeRequest.objects.filter(event_id=OuterRef("pk"))
    # At least EVENTS_SHOWN newer events of its cluster: never one the cluster page shows.
    shown_after = NksEvent.objects.filter(_later("cluster_id", "nks_created_at"))[
        EVENTS_SHOWN - 1 : EVENTS_SHOWN
    ]
    aged = Q(nks_created_at__lt=cutoff, first_seen_at__lt=cutoff) & Q(Exists(shown_after))
    undated = Q(nks_created_at__isnull=True, first_seen_at__lt=cutoff)
    return (aged | undated) & ~Q(Exists(named))


def _old_health_samples(cutoff: datetime) -> Q:
    return Q(taken_at__lt=cutoff)


def _undelivered_of(incident: Any) -> Q:
    through = Notification.incidents.through
    return Q(
        Exists(through.objects.filter(incident_id=incident, notification__state__in=UNDELIVERED))
    )


def _old_incidents(cutoff: datetime) -> Q:
    return Q(state=IncidentState.RESOLVED, resolved_at__lt=cutoff) & ~_undelivered_of(
        OuterRef("pk")
    )


def _lone_notifications(cutoff: datetime) -> Q:
    """Messages about no incident (a channel's test message, or left when their incidents
    went), done and older than the incidents' retention."""
    through = Notification.incidents.through
    about = through.objects.filter(notification_id=OuterRef("pk"))
    return Q(created_at__lt=cutoff) & ~Q(state__in=UNDELIVERED) & ~Q(Exists(about))


def _history_days() -> int:
    return int(settings.HISTORY_RETENTION_DAYS)


def _incident_days() -> int:
    return int(settings.INCIDENT_RETENTION_DAYS)


def _health_days() -> int:
    return int(settings.NKS_HEALTH_HISTORY_DAYS)


@dataclass(frozen=True, slots=True)
class Plan:
    """One table's retention: which rows are old at a cutoff, read in which index order."""

    model: type[models.Model]
    days: Callable[[], int]
    old: Callable[[datetime], Q]
    # The keyset order, ending with the primary key; the first field is indexed.
    order: tuple[str, ...]
    # How picked rows are removed, with what goes with them, by table; None: deleted by id.
    remove: Callable[[list[int], int], dict[str, int]] | None = None

    @property
    def table(self) -> str:
        return str(self.model._meta.db_table)


def _remove_incidents(ids: list[int], batch: int) -> dict[str, int]:
    """Inside the batch's transaction: the incidents' timeline and links in statements of at
    most `batch` rows, the notifications that told of nothing else, then the incidents."""
    through = Notification.incidents.through
    told = set(
        through.objects.filter(incident_id__in=ids).values_list("notification_id", flat=True)
    )
    counts = {
        IncidentEvent._meta.db_table: _delete_by_chunks(
            IncidentEvent.objects.filter(incident_id__in=ids), batch
        ),
        through._meta.db_table: _delete_by_chunks(
            through.objects.filter(incident_id__in=ids), batch
        ),
    }
    notifications = 0
    told_ids = sorted(told)
    for start in range(0, len(told_ids), batch):
        chunk = told_ids[start : start + batch]
        # An undelivered message keeps its incidents (_old_incidents), so every one left
        # here is done; a message that also told of a kept incident stays with it.
        alone = Notification.objects.filter(pk__in=chunk).exclude(
            Exists(through.objects.filter(notification_id=OuterRef("pk")))
        )
        notifications += _delete(Notification, list(alone.values_list("pk", flat=True)))
    counts[Notification._meta.db_table] = notifications
    counts[Incident._meta.db_table] = _delete(Incident, ids)
    return counts


def _delete_by_chunks(rows: models.QuerySet[Any], batch: int) -> int:
    deleted = 0
    while ids := list(rows.order_by("pk").values_list("pk", flat=True)[:batch]):
        deleted += _delete(rows.model, ids)
    return deleted


def _delete(model: type[models.Model], ids: list[int]) -> int:
    """Delete these rows by id; only this model's own rows are counted."""
    if not ids:
        return 0
    _total, per_model = model.objects.filter(pk__in=ids).delete()
    return int(per_model.get(model._meta.label, 0))


PLANS: tuple[Plan, ...] = (
    Plan(LeaseTransition, _history_days, _old_transitions, ("observed_at", "id")),
    Plan(LeaseHolderSpan, _history_days, _old_spans, ("ended_at", "id")),
    Plan(WatchCoverage, _history_days, _old_coverage, ("id",), remove=_remove_coverage),
    Plan(NodeReadyChange, _history_days, _old_ready_changes, ("observed_at", "id")),
    Plan(NksEvent, _history_days, _old_nks_events, ("id",)),
    Plan(HealthSample, _health_days, _old_health_samples, ("taken_at", "id")),
    Plan(
        Incident,
        _incident_days,
        _old_incidents,
        ("resolved_at", "id"),
        remove=_remove_incidents,
    ),
    Plan(Notification, _incident_days, _lone_notifications, ("id",)),
)


# Every table a run deletes from: the plans' own and what goes with an incident.
_TABLES = (
    *(plan.table for plan in PLANS),
    IncidentEvent._meta.db_table,
    Notification.incidents.through._meta.db_table,
)


def _after(order: tuple[str, ...], last: tuple[Any, ...]) -> Q:
    """Rows after `last` in the keyset order (lexicographic over the fields)."""
    condition = Q()
    for index in range(len(order) - 1, -1, -1):
        beyond = Q(**{f"{order[index]}__gt": last[index]})
        equal = Q(**{order[position]: last[position] for position in range(index)})
        condition = (equal & beyond) if index == len(order) - 1 else (equal & beyond) | condition
    return condition


@dataclass(slots=True)
class _Cursor:
    plan: Plan
    cutoff: datetime
    last: tuple[Any, ...] | None = None
    done: bool = False


@dataclass(slots=True)
class PruneResult:
    """What one run deleted, by table; `complete` when nothing old was left."""

    deleted: dict[str, int] = field(default_factory=dict)
    complete: bool = False
    skipped: bool = False  # another run held the lock

    def add(self, table: str, count: int) -> None:
        if count:
            self.deleted[table] = self.deleted.get(table, 0) + count

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


def _prune_batch(cursor: _Cursor, batch: int, result: PruneResult) -> None:
    plan = cursor.plan
    fields = plan.order
    with transaction.atomic():
        rows = plan.model.objects.filter(plan.old(cursor.cutoff))
        if cursor.last is not None:
            rows = rows.filter(_after(fields, cursor.last))
        picked = list(
            rows.order_by(*fields).select_for_update(skip_locked=True).values_list(*fields)[:batch]
        )
        if not picked:
            cursor.done = True
            return
        ids = [row[-1] for row in picked]
        if plan.remove is None:
            removed = {plan.table: _delete(plan.model, ids)}
        else:
            removed = plan.remove(ids, batch)
        for table, count in removed.items():
            result.add(table, count)
    cursor.last = picked[-1]
    if len(picked) < batch:
        cursor.done = True


def prune(
    now: datetime,
    *,
    budget_seconds: float | None = None,
    batch: int | None = None,
    plans: Iterable[Plan] = PLANS,
) -> PruneResult:
    """Delete what is old at `now`, one batch of each table in turn, until nothing is left
    or the budget is spent. No lock: `prune_history` is the entry that takes one."""
    budget = settings.HISTORY_PRUNE_BUDGET_SECONDS if budget_seconds is None else budget_seconds
    size = int(settings.HISTORY_PRUNE_BATCH if batch is None else batch)
    deadline = time.monotonic() + budget
    cursors = [_Cursor(plan, now - timedelta(days=plan.days())) for plan in plans]
    result = PruneResult()
    while any(not cursor.done for cursor in cursors):
        for cursor in cursors:
            if cursor.done:
                continue
            if time.monotonic() >= deadline:
                return result
            _prune_batch(cursor, size, result)
    result.complete = True
    return result


def retention_lock() -> ExpiringLock:
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    ttl = int(settings.HISTORY_PRUNE_BUDGET_SECONDS) + LOCK_SLACK_SECONDS
    return ExpiringLock(LOCK_NAME, owner, ttl)


def prune_history(now: datetime) -> PruneResult:
    """The beat task's run: one at a time (a second returns at once), bounded by the budget."""
    lock = retention_lock()
    if not lock.acquire():
        logger.info("History retention skipped: another run holds the lock")
        return PruneResult(skipped=True)
    try:
        result = prune(now)
        _record(result, now)
    finally:
        lock.release()
    if result.total or not result.complete:
        logger.info(
            "History retention deleted %d rows (%s)%s",
            result.total,
            ", ".join(f"{table} {count}" for table, count in sorted(result.deleted.items())),
            "" if result.complete else "; more next run",
        )
    return result


def _record(result: PruneResult, now: datetime) -> None:
    """Add the run's counts to the totals /metrics reports (one run at a time: the lock)."""
    cache = caches["default"]
    for table in set(_TABLES) | set(result.deleted):
        key = DELETED_KEY + table
        cache.set(key, int(cache.get(key, 0)) + result.deleted.get(table, 0), timeout=None)
    cache.set(LAST_RUN_KEY, {"at": now.timestamp(), "complete": result.complete}, timeout=None)


@dataclass(frozen=True, slots=True)
class RetentionStats:
    deleted: dict[str, int]  # rows deleted by every run so far, by table
    last_run_at: float | None  # Unix time of the last run
    last_run_complete: bool | None  # whether it left nothing old behind


def retention_stats() -> RetentionStats:
    tables = sorted(_TABLES)
    found = caches["default"].get_many([DELETED_KEY + table for table in tables] + [LAST_RUN_KEY])
    last = found.get(LAST_RUN_KEY) or {}
    return RetentionStats(
        deleted={table: int(found.get(DELETED_KEY + table, 0)) for table in tables},
        last_run_at=last.get("at"),
        last_run_complete=last.get("complete"),
    )
