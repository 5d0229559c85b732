"""One database connection per watched cluster: its readers hand their database work over.

A watcher runs several threads (leases.watcher): the Lease reader, the Node reader, the probe
and the housekeeping thread that flushes. Django gives every thread its own connection, so a
watcher whose threads each touched the database held three, and 50 clusters needed 151 of
PostgreSQL's 100. Here one thread, the housekeeping thread, owns the watcher's connection;
the readers' few database calls (a status when a list ends or a watch opens, a failure, the
cluster's row when they connect) are run by it, between its flushes, while the reader waits
for the answer. Their frequency is that of lists, reconnects and errors, not of events: the
events themselves go to the ingestors in memory, and the flushes that write them are the
owner's own work already.

A call is answered as if the reader had made it: its result is returned, its exception
(a database outage, say) is raised in the reader, which reports and retries as before.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from django.db import DatabaseError, close_old_connections

from leases.kube import Cut
from leases.watch_status import ResourceStatus

T = TypeVar("T")


class WatcherStopped(RuntimeError):
    """The owner of the watcher's connection has finished: no database work is taken."""


class _Job:
    __slots__ = ("call", "done", "error", "result")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as exc:  # handed back to the thread that asked, as it was
            self.error = exc
        finally:
            self.done.set()


class DatabaseOwner:
    """The thread that owns a watcher's connection, and the work other threads hand it.

    Before an owner is named, and in the owner itself, a call runs at once (the watcher sets
    itself up in its caller's thread). Once the owner has finished (`close`), other threads'
    calls raise WatcherStopped: they come from readers that are stopping.
    """

    def __init__(self) -> None:
        self._jobs: deque[_Job] = deque()
        self._lock = threading.Lock()
        self._owner: int | None = None
        self._closed = False
        # Set when work arrives (or the watcher stops): the owner's wait ends early.
        self.wake = threading.Event()
        self.calls = 0  # handed over, for tests and logs

    def own(self, thread: threading.Thread) -> None:
        """From now on `thread` (started) runs every database call of the watcher."""
        self._owner = thread.ident

    @property
    def in_owner(self) -> bool:
        return self._owner is None or threading.get_ident() == self._owner

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`function(*args, **kwargs)` in the owner's thread; its result or its exception."""
        if self.in_owner:
            return function(*args, **kwargs)
        job = _Job(lambda: function(*args, **kwargs))
        with self._lock:
            if self._closed:
                raise WatcherStopped
            self._jobs.append(job)
            self.calls += 1
        self.wake.set()
        job.done.wait()
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[no-any-return]

    def wait(self, seconds: float) -> None:
        """The owner waits up to `seconds`, less when work arrives."""
        if self.wake.wait(seconds):
            self.wake.clear()

    def run_pending(self) -> None:
        """In the owner: run what was handed over, oldest first."""
        while True:
            try:
                job = self._jobs.popleft()
            except IndexError:
                return
            job.run()
            if isinstance(job.error, DatabaseError):
                # The reader that asked reports it and retries; the connection it broke
                # (a session ended under it, say) is the owner's: replaced, not reused, so
                # the report itself can be written.
                close_old_connections()

    def close(self) -> None:
        """In the owner, as it finishes: what was handed over runs, later calls fail."""
        with self._lock:
            self._closed = True
        self.run_pending()


class OwnedStatus:
    """A resource's status (leases.watch_status) whose database writes run in the owner."""

    def __init__(self, status: ResourceStatus, database: DatabaseOwner) -> None:
        self.status = status
        self._database = database

    def listed(self) -> None:
        self._database.call(self.status.listed)

    def watching(self, *, reconnected: bool) -> None:
        self._database.call(self.status.watching, reconnected=reconnected)

    def failed(self, message: str, *, kind: str) -> None:
        # A reader that is stopping: its watcher has written its last status.
        with contextlib.suppress(WatcherStopped):
            self._database.call(self.status.failed, message, kind=kind)

    def cut(self, cuts: list[Cut]) -> None:
        self.status.cut(cuts)  # kept in memory until the next flush

    # What the owner calls as it flushes (in its own thread: run at once).
    def flushed(
        self, result: Any, committed_version: str, watching: bool, as_of: datetime | None
    ) -> dict[str, Any]:
        return self._database.call(self.status.flushed, result, committed_version, watching, as_of)

    def skipped(self, result: Any) -> int:
        return self.status.skipped(result)

    def observed(self, since: datetime | None) -> dict[str, Any]:
        return self.status.observed(since)

    def stopped(self) -> None:
        self._database.call(self.status.stopped)
