"""Where the watch of each resource reports on the KubeCluster row.

Leases use the row's original fields (connected, last_error, …); Nodes their `nodes_*`
fields and a state in words (`ResourceWatchState`). The reader thread of a resource writes
its moments (listed, watching, failed) at once; what a flush adds (events, lag, the
resourceVersion now committed) is returned as updates, so the housekeeping thread writes
both resources' counters in one UPDATE per flush (`write_flush_status`, its SQL compiled
once per shape of updates rather than by the ORM at every flush).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any, Protocol

from django.db import DatabaseError, close_old_connections, connection
from django.db.models import Case, DateTimeField, F, Value, When
from django.utils import timezone

from leases.egress_status import shown_failure
from leases.kube import Cut
from leases.models import KubeCluster, ResourceWatchState
from leases.watch_coverage import Coverage

logger = logging.getLogger(__name__)

# How each failure of the Node watch reads on the watchers page.
_NODE_STATE_BY_KIND = {
    "forbidden": ResourceWatchState.FORBIDDEN,
    "not_found": ResourceWatchState.NOT_SERVED,
    # Passing: the reader is trying again and will likely get through.
    "connection": ResourceWatchState.RECONNECTING,
    "timeout": ResourceWatchState.RECONNECTING,
    "server": ResourceWatchState.RECONNECTING,
    "gone": ResourceWatchState.RECONNECTING,
    # A 403 that has not persisted yet (leases.watch_loop): a restarting server, likely.
    "forbidden_passing": ResourceWatchState.RECONNECTING,
}


class ResourceStatus(Protocol):
    def listed(self) -> None: ...

    def cut(self, cuts: list[Cut]) -> None: ...

    def watching(self, *, reconnected: bool) -> None: ...

    def failed(self, message: str, *, kind: str) -> None: ...

    def flushed(
        self, result: Any, committed_version: str, watching: bool, as_of: datetime | None
    ) -> dict[str, Any]: ...

    def skipped(self, result: Any) -> int: ...

    def observed(self, since: datetime | None) -> dict[str, Any]: ...

    def stopped(self) -> None: ...


def update_cluster(cluster_id: int, updates: dict[str, Any], *, swallow: bool = True) -> None:
    """Write status fields; a status write that fails must not end the watch."""
    if not updates:
        return
    try:
        KubeCluster.objects.filter(pk=cluster_id).update(**updates)
    except DatabaseError:
        close_old_connections()
        if not swallow:
            raise


class Added(int):
    """A flush's update that adds to the column instead of setting it (a counter)."""


# UPDATE statements of the flush status, by database vendor and the shape of their updates
# (which columns, which added to): a handful of shapes, each compiled once, where the ORM
# compiles one per flush.
_FLUSH_STATEMENTS: dict[tuple[str, tuple[tuple[str, bool], ...]], tuple[str, list[Any]]] = {}


def write_flush_status(cluster_id: int, updates: dict[str, Any]) -> None:
    """What flushes report (see `flushed`), written in one UPDATE whose SQL is reused.

    Values are adapted by their model fields, as the ORM's UPDATE adapts them; a failure
    is swallowed as by `update_cluster`, so a status write never ends the watch.
    """
    if not updates:
        return
    shape = tuple((name, type(value) is Added) for name, value in updates.items())
    statement = (connection.vendor, shape)
    compiled = _FLUSH_STATEMENTS.get(statement)
    if compiled is None:
        compiled = _FLUSH_STATEMENTS[statement] = _compile_flush_status(shape)
    sql, fields = compiled
    params: list[Any] = [
        int(value) if type(value) is Added else field.get_db_prep_save(value, connection)
        for field, value in zip(fields, updates.values(), strict=True)
    ]
    params.append(cluster_id)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    except DatabaseError:
        close_old_connections()


def _compile_flush_status(shape: tuple[tuple[str, bool], ...]) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    meta = KubeCluster._meta
    fields = [meta.get_field(name) for name, _ in shape]
    assignments = []
    for field, (_, added) in zip(fields, shape, strict=True):
        column = quote(field.column)
        assignments.append(f"{column} = {column} + %s" if added else f"{column} = %s")
    # Only the model's own table and column names, quoted, go into the text; values are
    # parameters.
    table, pk = quote(meta.db_table), quote(meta.pk.column)
    sql = f"UPDATE {table} SET {', '.join(assignments)} WHERE {pk} = %s"  # noqa: S608
    return sql, fields


class CutObjects:
    """Objects left out for their size (leases.kube.bounded), from the reader thread, until
    the next flush writes them with the rest of its status (one UPDATE, however many)."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix  # "leases" or "nodes": the row's `<prefix>_cut_*` fields
        self._lock = threading.Lock()
        self._count = 0
        self._last: Cut | None = None
        self.total = 0  # this watcher's, for tests and logs

    def add(self, cuts: list[Cut]) -> None:
        if not cuts:
            return
        with self._lock:
            self._count += len(cuts)
            self.total += len(cuts)
            self._last = cuts[-1]

    def updates(self) -> dict[str, Any]:
        with self._lock:
            count, last = self._count, self._last
            self._count, self._last = 0, None
        if not count or last is None:
            return {}
        name = f"{last.namespace}/{last.name}" if last.namespace else last.name
        return {
            f"{self._prefix}_cut_total": Added(count),
            f"{self._prefix}_last_cut": name[:510],
            f"{self._prefix}_last_cut_bytes": last.size,
            f"{self._prefix}_last_cut_at": timezone.now(),
        }


class LeaseStatus:
    """The Lease watch on the row's original fields, and the stretches it was live
    (WatchCoverage rows, leases/watch_coverage.py)."""

    def __init__(self, cluster_id: int, owner: str) -> None:
        self.cluster_id = cluster_id
        self.owner = owner[:200]
        self.cuts = CutObjects("leases")
        self._events_since_rate = 0
        self._rate_at = time.monotonic()
        # Worst event-to-commit delay seen by this watcher (the row keeps the last flush's).
        self.max_lag_seconds = 0.0
        self.coverage = Coverage(cluster_id)
        self._as_of_written: datetime | None = None
        self._since_written: datetime | None = None

    def listed(self) -> None:
        # Not swallowed: a database gone away here is the reader's to report and retry.
        update_cluster(
            self.cluster_id,
            {"relists_total": F("relists_total") + 1, "last_list_at": timezone.now()},
            swallow=False,
        )
        self.coverage.connected()

    def cut(self, cuts: list[Cut]) -> None:
        self.cuts.add(cuts)

    def watching(self, *, reconnected: bool) -> None:
        update_cluster(
            self.cluster_id,
            {
                "connected": True,
                "connected_since": timezone.now(),
                "reconnects_total": F("reconnects_total") + int(reconnected),
                "last_error": "",
                "last_error_at": None,
            },
            swallow=False,
        )
        self.coverage.connected()

    def failed(self, message: str, *, kind: str, disconnected: bool = True) -> None:
        message, kind = shown_failure(self.cluster_id, message, kind)
        updates: dict[str, Any] = {"last_error": message[:2000], "last_error_at": timezone.now()}
        if disconnected:
            updates["connected"] = False
            self.coverage.lost()
        update_cluster(self.cluster_id, updates)

    def flushed(
        self, result: Any, committed_version: str, watching: bool, as_of: datetime | None
    ) -> dict[str, Any]:
        now = time.monotonic()
        # The one write of its own a flush makes: the live stretch reaches the data's as-of
        # moment (not the clock: a stalled server's silence is not watched time).
        self.coverage.seen(as_of)
        self._events_since_rate += result.events
        updates: dict[str, Any] = {"events_total": Added(result.events), **self.cuts.updates()}
        if as_of is not None and as_of != self._as_of_written:
            updates["leases_as_of"] = self._as_of_written = as_of
        wrote = result.leases_written or result.deletions_written or result.transitions_written
        if watching or wrote:
            # A flush vouches for the data only while a watch is open (or when it wrote what
            # a list found): stamped while disconnected, or before any data, the page would
            # call old data, or none, "0 s old".
            updates["last_flush_at"] = timezone.now()
        if result.drained:
            updates["resource_version"] = committed_version[:64]
        if result.events:
            updates["last_event_at"] = timezone.now()
        if result.leases_written or result.deletions_written:
            updates["lag_seconds"] = round(result.lag_seconds, 3)
            self.max_lag_seconds = max(self.max_lag_seconds, result.lag_seconds)
        elapsed = now - self._rate_at
        if elapsed >= 2.0:
            updates["events_per_second"] = round(self._events_since_rate / elapsed, 1)
            self._events_since_rate, self._rate_at = 0, now
        return updates

    def skipped(self, result: Any) -> int:
        """Objects cleaned of NUL characters or refused by the database (one shared total)."""
        return int(result.objects_cleaned + result.leases_skipped)

    def observed(self, since: datetime | None) -> dict[str, Any]:
        """The start of the current observed stretch, when it moved (leases.freshness)."""
        if since is None or since == self._since_written:
            return {}
        self._since_written = since
        return {"leases_observed_since": since}

    def stopped(self) -> None:
        self.coverage.stopped()
        # Only while the row is still ours: a successor may have taken the cluster over.
        try:
            KubeCluster.objects.filter(pk=self.cluster_id, watcher_id=self.owner).update(
                connected=False, events_per_second=0.0
            )
        except DatabaseError:
            close_old_connections()


class NodeStatus:
    """The Node watch on the row's `nodes_*` fields, with its state in words."""

    def __init__(self, cluster_id: int, owner: str) -> None:
        self.cluster_id = cluster_id
        self.owner = owner[:200]
        self.max_lag_seconds = 0.0
        self._as_of_written: datetime | None = None
        self._since_written: datetime | None = None
        self.cuts = CutObjects("nodes")

    def cut(self, cuts: list[Cut]) -> None:
        self.cuts.add(cuts)

    def listed(self) -> None:
        update_cluster(
            self.cluster_id,
            {
                "nodes_relists_total": F("nodes_relists_total") + 1,
                "nodes_last_list_at": timezone.now(),
            },
            swallow=False,
        )

    def watching(self, *, reconnected: bool) -> None:
        update_cluster(
            self.cluster_id,
            {
                "nodes_watch": ResourceWatchState.WATCHING,
                "nodes_connected_since": timezone.now(),
                "nodes_reconnects_total": F("nodes_reconnects_total") + int(reconnected),
                "nodes_last_error": "",
                "nodes_last_error_at": None,
            },
            swallow=False,
        )

    def failed(self, message: str, *, kind: str) -> None:
        message, kind = shown_failure(self.cluster_id, message, kind)
        state = _NODE_STATE_BY_KIND.get(kind, ResourceWatchState.ERROR)
        update_cluster(
            self.cluster_id,
            {
                "nodes_watch": state,
                "nodes_last_error": message[:2000],
                # When the trouble began, not the latest retry: it is when the Node data
                # stopped being current, so the page can say how old it is.
                "nodes_last_error_at": Case(
                    When(nodes_last_error="", then=Value(timezone.now())),
                    default=F("nodes_last_error_at"),
                    output_field=DateTimeField(),
                ),
            },
        )

    def flushed(
        self, result: Any, committed_version: str, watching: bool, as_of: datetime | None
    ) -> dict[str, Any]:
        updates: dict[str, Any] = self.cuts.updates()
        if as_of is not None and as_of != self._as_of_written:
            updates["nodes_as_of"] = self._as_of_written = as_of
        if result.events:
            updates["nodes_events_total"] = Added(result.events)
            updates["nodes_last_event_at"] = timezone.now()
        if result.drained and committed_version:
            updates["nodes_resource_version"] = committed_version[:64]
        if result.nodes_written or result.deletions_written:
            updates["nodes_lag_seconds"] = round(result.lag_seconds, 3)
            self.max_lag_seconds = max(self.max_lag_seconds, result.lag_seconds)
        return updates

    def skipped(self, result: Any) -> int:
        return int(result.objects_cleaned + result.nodes_skipped)

    def observed(self, since: datetime | None) -> dict[str, Any]:
        if since is None or since == self._since_written:
            return {}
        self._since_written = since
        return {"nodes_observed_since": since}

    def stopped(self) -> None:
        # A watch that was running is no longer; a refusal (forbidden, not served) stays
        # on the row, as the last thing known of the cluster's Nodes.
        try:
            KubeCluster.objects.filter(
                pk=self.cluster_id,
                watcher_id=self.owner,
                nodes_watch__in=[ResourceWatchState.WATCHING, ResourceWatchState.RECONNECTING],
            ).update(nodes_watch=ResourceWatchState.NOT_STARTED)
        except DatabaseError:
            close_old_connections()
