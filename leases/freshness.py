"""The as-of moment of a watched resource: the latest moment the watcher knows its view
matched the API server.

An open watch that delivers nothing proves nothing: a frozen API server keeps its TCP
connections open. So the moment is moved only by proofs:

- a completed list: the view matched the server when the list was asked for;
- a probe answered (leases.watch_probe): the server's revision at moment T is R, and once
  the stream has delivered an event or bookmark at R or later, every change before T is in
  (a watch delivers in resourceVersion order);
- a quiet check: a short watch from the stream's last resourceVersion, asked at T, that
  the server ends with no change in it: nothing changed since, up to T.

The reader thread reports what it delivered and listed; the probe thread what the server
answered; the housekeeping thread takes `as_of` before each flush and writes it with the
flush, so the row never claims more than what is committed. Pages, the API and the rules
judge by that column (`is_current`, models.lease_state).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from datetime import datetime, timedelta

from django.conf import settings

# Probes kept while the stream has not caught up with them: one a second is plenty, and a
# stream that is this far behind is stuck anyway (the probe closes it).
MAX_PENDING_PROBES = 16


def stale_after() -> timedelta:
    """Data older than this is stale (WATCH_STALE_SECONDS): shown as unknown, never as now."""
    return timedelta(seconds=settings.WATCH_STALE_SECONDS)


def is_current(as_of: datetime | None, now: datetime) -> bool:
    """The data is recent enough to judge `now` by (else every state is unknown)."""
    return as_of is not None and now - as_of <= stale_after()


def revision(resource_version: str) -> int | None:
    """A resourceVersion as a number: etcd's revision, which is what every kube-apiserver
    sends. Opaque by contract, so anything else is never compared (no proof from it)."""
    if not resource_version or len(resource_version) > 20 or not resource_version.isdigit():
        return None
    return int(resource_version)


class ResourceFreshness:
    """What the watcher knows of one resource's currency (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._as_of: datetime | None = None
        # Where the current stretch of proofs without a gap began (see `observed_since`).
        self._observed_since: datetime | None = None
        self._delivered = ""  # the newest resourceVersion handed to the ingestor
        self._delivered_revision: int | None = None
        # Probes the stream has not caught up with: (asked at, revision, answered at on the
        # monotonic clock), oldest first.
        self._pending: deque[tuple[datetime, int, float]] = deque(maxlen=MAX_PENDING_PROBES)

    @property
    def as_of(self) -> datetime | None:
        with self._lock:
            return self._as_of

    @property
    def observed_since(self) -> datetime | None:
        """Since when the data has been proved without a gap longer than WATCH_STALE_SECONDS:
        the time before it (a stall, an outage, a restart) was not observed."""
        with self._lock:
            return self._observed_since

    @property
    def delivered(self) -> str:
        with self._lock:
            return self._delivered

    @property
    def delivered_revision(self) -> int | None:
        with self._lock:
            return self._delivered_revision

    def unproved_for(self) -> float:
        """Seconds since the oldest probe the stream has not caught up with was answered."""
        with self._lock:
            return time.monotonic() - self._pending[0][2] if self._pending else 0.0

    def listed(self, asked_at: datetime, resource_version: str) -> None:
        """A full list asked for at `asked_at` completed at `resource_version`."""
        with self._lock:
            self._delivered = resource_version
            self._delivered_revision = revision(resource_version)
            self._prove(asked_at)
            self._catch_up()

    def delivered_to(self, resource_version: str) -> None:
        """The stream handed events up to this resourceVersion to the ingestor."""
        number = revision(resource_version)
        with self._lock:
            self._delivered = resource_version
            if number is not None and (
                self._delivered_revision is None or number > self._delivered_revision
            ):
                self._delivered_revision = number
            self._catch_up()

    def probed(self, asked_at: datetime, resource_version: str) -> None:
        """The server's revision was `resource_version` when asked at `asked_at`."""
        number = revision(resource_version)
        if number is None:
            return
        with self._lock:
            if self._delivered_revision is not None and self._delivered_revision >= number:
                self._prove(asked_at)
                return
            self._pending.append((asked_at, number, time.monotonic()))

    def proved_quiet(self, asked_at: datetime, since: str) -> bool:
        """A quiet check asked at `asked_at` found no change after `since`: if the stream is
        still there, nothing was missed up to that moment."""
        with self._lock:
            if self._delivered != since:
                return False
            self._prove(asked_at)
            self._pending.clear()
            return True

    def _catch_up(self) -> None:
        delivered = self._delivered_revision
        if delivered is None:
            return
        while self._pending and self._pending[0][1] <= delivered:
            self._prove(self._pending.popleft()[0])

    def _prove(self, moment: datetime) -> None:
        if self._as_of is None or moment - self._as_of > stale_after():
            self._observed_since = moment  # a gap: what came before it was not observed
        if self._as_of is None or moment > self._as_of:
            self._as_of = moment
