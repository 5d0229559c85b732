"""The stretches of time a cluster's Lease watch was live (WatchCoverage rows).

Availability never counts time nobody watched, so the watcher says when it watched: a row
opens when the Lease watch (re)connects and its `last_seen_at` moves forward at each status
flush while the watch is live. A killed worker's row simply stops growing; a clean stop
ends it at the stop.

The row follows the data's as-of moment (leases.freshness), not the clock: a frozen API
server keeps the watch open, yet nothing is observed. A gap between two proofs longer than
WATCH_STALE_SECONDS (an outage, a restart, a stall; on a real kube-apiserver even a 9 s
restart was relisted, not replayed) ends the row at the last proof, and a new one starts
at the next: the time between stays unobserved. A short drop (the API server ends every
watch after a few minutes; a resumed watch replays what happened meanwhile) continues the
same row. A new watcher always starts a new row.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from leases.freshness import stale_after
from leases.models import WatchCoverage


class Coverage:
    """The open WatchCoverage row of one watcher's Lease watch.

    The reader thread says when the watch is live (`connected`) or lost (`lost`); the
    housekeeping thread moves the row at each flush (`seen`) and ends it (`stopped`).
    """

    def __init__(self, cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self._lock = threading.Lock()
        self._row_id: int | None = None
        self._last_seen: datetime | None = None
        self._live = False

    @property
    def row_id(self) -> int | None:
        return self._row_id

    def connected(self) -> None:
        """A list or a watch succeeded: continue the row if it is fresh, else open one.

        Not swallowed: a database gone away here is the reader's to report and retry,
        as for the status it writes at the same moment.
        """
        now = timezone.now()
        with self._lock:
            last_seen = self._last_seen
            if self._row_id is None or last_seen is None or now - last_seen > stale_after():
                row = WatchCoverage.objects.create(
                    cluster_id=self.cluster_id, started_at=now, last_seen_at=now
                )
                self._row_id, self._last_seen = row.pk, now
            self._live = True

    def lost(self) -> None:
        """The watch failed: the row stops here until the watch is live again."""
        with self._lock:
            self._live = False

    def seen(self, as_of: datetime | None = None) -> None:
        """A status flush while the watch is live: the row reaches the data's as-of moment
        (now, when none is given)."""
        with self._lock:
            if self._live:
                self._extend(as_of)

    def stopped(self) -> None:
        """A clean stop: a live row ends now, and no later call moves it."""
        with self._lock:
            if self._live:
                self._extend()
            self._live = False

    def _extend(self, as_of: datetime | None = None) -> None:
        if self._row_id is None:
            return
        now = timezone.now() if as_of is None else as_of
        if self._last_seen is not None and now <= self._last_seen:
            return  # nothing newer is known: the row already reaches that far
        if self._last_seen is not None and now - self._last_seen > stale_after():
            # Proved again after a gap: the row ends at its last proof, and this stretch
            # starts here (the time between was not observed).
            try:
                row = WatchCoverage.objects.create(
                    cluster_id=self.cluster_id, started_at=now, last_seen_at=now
                )
            except DatabaseError:
                close_old_connections()
                return
            self._row_id, self._last_seen = row.pk, now
            return
        try:
            with connection.cursor() as cursor:
                cursor.execute(_statement(), [_db_time(now), self._row_id])
        except DatabaseError:
            # Like the status write it rides with: a failure must not end the watch, and
            # the row keeps its last committed moment.
            close_old_connections()
            return
        self._last_seen = now


_FIELD = WatchCoverage._meta.get_field("last_seen_at")
_STATEMENTS: dict[str, str] = {}


def _statement() -> str:
    """The row's UPDATE, built once per database vendor: it runs at every flush."""
    sql = _STATEMENTS.get(connection.vendor)
    if sql is None:
        quote = connection.ops.quote_name
        meta = WatchCoverage._meta
        table, pk = quote(meta.db_table), quote(meta.pk.column)
        # Only the model's own table and column names, quoted, go into the text.
        sql = f"UPDATE {table} SET {quote(_FIELD.column)} = %s WHERE {pk} = %s"  # noqa: S608
        _STATEMENTS[connection.vendor] = sql
    return sql


def _db_time(moment: datetime) -> Any:
    return _FIELD.get_db_prep_save(moment, connection)
