"""The reader loop of one watched resource of one cluster: list (paged), watch from the
list's resourceVersion, resume after a dropped stream, list again on 410, back off on errors,
skip malformed lines.

It runs once per resource (Leases, Nodes), each in its own thread, around a
`WatchedResource`: how to list and watch the resource, the ingestor its objects go to, and
where its status lands on the KubeCluster row. The cluster's watcher (leases.watcher) owns
the lock, the connection and the housekeeping thread that flushes every ingestor.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from django.db import DatabaseError, close_old_connections
from django.utils import timezone

from leases import kube
from leases.freshness import ResourceFreshness, revision
from leases.parse import resource_version_of
from leases.watch_status import ResourceStatus

logger = logging.getLogger(__name__)


# A watch stream open this long shows the server works, even if it delivered nothing.
STREAM_PROVED_SECONDS = 10.0
# How often a list waiting for a flush looks again (flushes come every half second).
PENDING_POLL_SECONDS = 0.02


class WatchExpired(Exception):
    """The resourceVersion we resume from is gone: list again."""


# A source that worked this recently is retried as one that is coming back.
RECENTLY_HEALTHY_SECONDS = 60.0


@dataclass
class Backoff:
    """Exponential backoff with jitter, for failures that are not passing.

    A failure is first taken as transient: the first `quick_tries` come back within
    `quick_delay` seconds (with jitter), whatever their kind, while the source worked a
    moment ago: a restarting API server refuses connections, answers 5xx or 429, and even
    403 before its RBAC cache is loaded, for a few seconds. Only then does the delay grow;
    credentials problems grow longer. A source that was healthy within
    RECENTLY_HEALTHY_SECONDS never waits more than `recent_maximum` between tries.
    """

    base: float = 1.0
    maximum: float = 30.0
    auth_base: float = 5.0
    auth_maximum: float = 120.0
    failures: int = 0
    quick_tries: int = 3
    quick_delay: float = 2.0
    recent_maximum: float = 10.0
    # When the source last worked (time.monotonic()), None: never, for this backoff.
    healthy_at: float | None = None

    def next_delay(self, kind: str) -> float:
        self.failures += 1
        recently = (
            self.healthy_at is not None
            and time.monotonic() - self.healthy_at < RECENTLY_HEALTHY_SECONDS
        )
        if recently and self.failures <= self.quick_tries:
            # Within `quick_delay` (no longer than two base delays, where those are short).
            quick = min(self.quick_delay, 2 * self.base)
            return quick * random.uniform(0.25, 1.0)  # noqa: S311 - jitter, not security
        if kind in {"auth", "forbidden", "config"}:
            base, maximum = self.auth_base, self.auth_maximum
        else:
            base, maximum = self.base, self.maximum
        if recently:
            maximum = min(maximum, self.recent_maximum)
        growth = self.failures - 1 - (self.quick_tries if recently else 0)
        delay = min(maximum, base * 2 ** max(0, growth))
        return delay * random.uniform(0.8, 1.0)  # noqa: S311 - jitter, not security

    def reset(self) -> None:
        """The source works: the next failure starts from the quick retries."""
        self.failures = 0
        self.healthy_at = time.monotonic()

    def fresh(self) -> Backoff:
        """The same delays, counted from zero (one per resource)."""
        return Backoff(
            self.base,
            self.maximum,
            self.auth_base,
            self.auth_maximum,
            quick_tries=self.quick_tries,
            quick_delay=self.quick_delay,
            recent_maximum=self.recent_maximum,
        )


# A 403 is taken for missing RBAC only when it persists: this many in a row, over at least
# this long. Before that it reads as what it usually is after a reconnect, a restarting
# API server whose authorizer has not loaded the cluster's roles yet.
FORBIDDEN_PERSISTS_COUNT = 3
FORBIDDEN_PERSISTS_SECONDS = 10.0


class Ingestor(Protocol):
    """What LeaseIngestor and NodeIngestor share: observations in, batches out by flush()."""

    def observe(self, obj: dict[str, Any], received: float | None = None) -> bool: ...

    def observe_deleted(self, key: Any, received: float | None = None) -> None: ...

    def reconcile(self, listed: set[Any]) -> int: ...

    def count_event(self) -> None: ...

    def flush(self) -> Any: ...

    # Raw objects waiting for a flush, and how many a list lets wait before it reads on.
    max_pending: int

    def pending_objects(self) -> int: ...


@dataclass(frozen=True)
class WatchedResource:
    """One resource the cluster's watcher reads: the calls, the ingestor, the status."""

    plural: str  # "leases", "nodes": for logs and error messages
    list_pages: Callable[[Any], Iterator[kube.PageStream]]
    open_watch: Callable[[Any, str, int], kube.WatchStream]
    # The key of an object (None: not usable), as its ingestor's reconcile and deletes take it.
    key_of: Callable[[Any], Hashable | None]
    ingestor: Ingestor
    status: ResourceStatus
    # Failures after which the cluster's connection is built again from its row: someone
    # may have fixed the kubeconfig. Not a 403 on Nodes alone: RBAC is checked per request,
    # and dropping the shared client would pause the LeaseCandidates refresh for nothing.
    reconnect_on: frozenset[str] = frozenset({"auth", "forbidden", "tls", "config"})
    # What the watcher knows of this resource's currency (leases.freshness).
    freshness: ResourceFreshness = field(default_factory=ResourceFreshness)


class ResourceReader:
    """List, watch, resume, relist on 410, back off: for one resource, until stopped."""

    def __init__(
        self,
        cluster_id: int,
        resource: WatchedResource,
        *,
        connect: Callable[[], Any],
        forget_connection: Callable[[], None],
        stop: threading.Event,
        stopping: Callable[[], bool],
        backoff: Backoff,
        watch_timeout_seconds: int,
        stream_proved_seconds: float = STREAM_PROVED_SECONDS,
        server_answered_at: Callable[[], float | None] | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        # When the cluster's API server last answered anything (the probe's moment on the
        # monotonic clock): a server that worked a moment ago is one coming back, whatever
        # this resource's own reads did meanwhile.
        self._server_answered_at = server_answered_at
        self.resource = resource
        self._connect = connect
        self._forget_connection = forget_connection
        self._stop = stop
        self._stopping = stopping
        self.backoff = backoff
        self.watch_timeout_seconds = watch_timeout_seconds
        self.stream_proved_seconds = stream_proved_seconds
        # The newest resourceVersion read: what the status may claim once a flush drains.
        self.resource_version = ""
        self.malformed_lines = 0
        self.unknown_events = 0
        self.watches_opened = 0
        self._stream: kube.WatchStream | None = None
        self._stream_lock = threading.Lock()
        # Set to end a backoff early (the probe saw the server answer again).
        self._retry = threading.Event()
        # The open stream was closed from another thread (a stop, the probe): whatever its
        # read raises then is that close, not a failure of the server.
        self._closed_here = False
        # 403s in a row and when the first of them came (time.monotonic()).
        self._forbidden_count = 0
        self._forbidden_since = 0.0

    @property
    def watching(self) -> bool:
        """A watch stream is open: what a flush writes is as current as the stream."""
        return self._stream is not None

    def close_stream(self) -> None:
        """End a blocked read from another thread (a stop, or a stream the probe found
        dead or stuck: the reader then resumes from its last resourceVersion)."""
        with self._stream_lock:
            stream = self._stream
            self._closed_here = stream is not None
        if stream is not None:
            stream.close()

    def retry_now(self) -> None:
        """End the current backoff wait (from another thread)."""
        self._retry.set()

    def _wait(self, delay: float) -> None:
        """Back off for `delay` seconds, or until stopped or told to retry now."""
        self._retry.clear()
        deadline = time.monotonic() + delay
        while not self._stop.is_set() and not self._retry.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Two events cannot be waited on at once: the stop is checked every 0.2 s.
            self._retry.wait(min(left, 0.2))

    def _note_server_health(self) -> None:
        """Count the server's answers to the probe as this resource's source working."""
        answered = self._server_answered_at() if self._server_answered_at else None
        if answered is not None and (
            self.backoff.healthy_at is None or answered > self.backoff.healthy_at
        ):
            self.backoff.healthy_at = answered

    def _persistent_forbidden(self, error: kube.KubeError) -> kube.KubeError:
        """A 403 as RBAC advice only once it persists; before that, as a passing refusal."""
        if self.backoff.healthy_at is None:
            # Never read here: nothing suggests a server coming back, so say what is missing.
            return error
        now = time.monotonic()
        if self._forbidden_count == 0:
            self._forbidden_since = now
        self._forbidden_count += 1
        if (
            self._forbidden_count >= FORBIDDEN_PERSISTS_COUNT
            and now - self._forbidden_since >= FORBIDDEN_PERSISTS_SECONDS
        ):
            return error
        return kube.KubeError(
            f"The API server refused to read {self.resource.plural} (403 Forbidden): "
            "an API server that is starting refuses this until it has loaded its roles, so "
            "the watcher retries at once. If it persists, RBAC is missing.",
            kind="forbidden_passing",
            status=403,
        )

    def run(self) -> None:
        """Read until stopped; never raises for cluster-side problems."""
        resource_version = ""
        status = self.resource.status
        while not self._stopping():
            try:
                api = self._connect()
                if not resource_version:
                    resource_version = self._relist(api)
                resource_version = self._stream_once(api, resource_version)
            except WatchExpired:
                logger.info(
                    "cluster %s: %s resourceVersion expired, listing again",
                    self.cluster_id,
                    self.resource.plural,
                )
                resource_version = ""
            except kube.KubeError as error:
                if self._stopping():
                    break  # we closed the stream ourselves
                if error.kind == "gone":
                    resource_version = ""
                    continue
                self._note_server_health()
                if error.kind == "forbidden":
                    error = self._persistent_forbidden(error)
                else:
                    self._forbidden_count = 0
                if error.kind in self.resource.reconnect_on:
                    self._forget_connection()
                delay = self.backoff.next_delay(error.kind)
                status.failed(error.message, kind=error.kind)
                logger.warning("cluster %s: %s (retrying in %.1f s)", self.cluster_id, error, delay)
                self._wait(delay)
            except Exception as exc:
                # A failure nobody foresaw (a value the HTTP client refuses, the database
                # going away): a reader that ended here would leave the resource unwatched
                # with nothing on the status page. Say so, back off, start over.
                if self._stopping():
                    break
                self._forget_connection()
                close_old_connections()  # a broken connection is replaced, not reused
                delay = self.backoff.next_delay("unexpected")
                message = unexpected_error_text(exc)
                status.failed(f"{message} Retrying in {delay:.0f} s.", kind="unexpected")
                # The traceback's frames, not the exception's text: http.client quotes the
                # header value it refuses, which is the token.
                logger.error(
                    "cluster %s: %s: %s (retrying in %.0f s)\n%s",
                    self.cluster_id,
                    self.resource.plural,
                    message,
                    delay,
                    "".join(traceback.format_tb(exc.__traceback__)),
                )
                self._wait(delay)

    def _relist(self, api: object) -> str:
        ingestor, key_of = self.resource.ingestor, self.resource.key_of
        listed: set[Any] = set()
        resource_version = ""
        # A list shows the server as it was when asked (its first page, consistently).
        asked_at = timezone.now()
        for page in self.resource.list_pages(api):
            # Items are parsed one by one as they are taken (leases.kube.client), and a
            # list reads its next page only once the flushes have room for it: what the
            # list makes the worker hold is a page and a flush's worth of objects, however
            # long the list is.
            for item in page.items:
                key = key_of(item)
                if key is not None and ingestor.observe(item):
                    listed.add(key)
            if page.cut:
                # Not ingested, but not gone either: its row stays as last read, and the
                # status says which object was cut.
                listed.update(self._cut(page.cut))
            resource_version = page.resource_version
            del page  # not held while the next one is read
            self._wait_for_flush(ingestor)
        gone = ingestor.reconcile(listed)
        # The server answers again: the next break starts from the shortest delay, not from
        # where an outage left the backoff.
        self.backoff.reset()
        self._forbidden_count = 0
        self.resource.status.listed()
        self.resource.freshness.listed(asked_at, resource_version)
        logger.info(
            "cluster %s: listed %d %s (%d gone) at resourceVersion %s",
            self.cluster_id,
            len(listed),
            self.resource.plural,
            gone,
            resource_version,
        )
        self.resource_version = resource_version
        return resource_version

    def _wait_for_flush(self, ingestor: Ingestor) -> None:
        """Wait while the ingestor holds max_pending objects or more (a flush takes them),
        or until stopped. A database that does not take them keeps the list waiting, and
        its total deadline (leases.kube.client) then ends it, rather than the worker
        holding the whole list in memory."""
        while ingestor.pending_objects() >= ingestor.max_pending and not self._stopping():
            self._stop.wait(PENDING_POLL_SECONDS)

    def _stream_once(self, api: object, resource_version: str) -> str:
        stream = self.resource.open_watch(api, resource_version, self.watch_timeout_seconds)
        with self._stream_lock:
            self._stream = stream
            self._closed_here = False
        if self._stop.is_set():
            # The stop came while the watch was opening, when there was no stream to close:
            # close it now, or the read would wait for the server's next event.
            with self._stream_lock:
                self._stream = None
            stream.close()
            return resource_version
        self.watches_opened += 1
        # Every watch after the first is a reconnect: after the server's timeout, a dropped
        # connection or an outage alike. A working watch clears the last error (the log
        # keeps it): an old error would read as a current one.
        self.resource.status.watching(reconnected=self.watches_opened > 1)
        delivered = False
        opened = time.monotonic()
        try:
            # One batch per read of the stream: at a cluster's real rate a read holds a few
            # events, and the cost per read (not per event) is what the reader spends most.
            for lines in stream.batches():
                if not delivered:
                    # A stream that delivers is a server that works: a break after it waits
                    # the shortest delay.
                    delivered = True
                    self.backoff.reset()
                resource_version = self._read_lines(lines, stream, api, resource_version)
                if stream.cut:
                    resource_version = self._cut_from_stream(stream, resource_version)
                self.resource.freshness.delivered_to(resource_version)
                if self._stop.is_set():
                    break
        except (WatchExpired, kube.KubeError):
            if not self._closed_here:
                raise
        except Exception:
            # http.client is not made to be closed under a read in another thread: the read
            # then fails in its own ways. Ours to close, so the reader resumes at once.
            if not self._closed_here:
                raise
            logger.info(
                "cluster %s: the %s watch was closed to reconnect it; resuming from %s",
                self.cluster_id,
                self.resource.plural,
                resource_version,
            )
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
            if stream.cut:  # a line that never ended: the stream closed inside it
                self._cut(stream.cut)
                stream.cut.clear()
            if time.monotonic() - opened >= self.stream_proved_seconds:
                # A quiet resource (no Node changes, bookmarks a minute apart) delivers
                # nothing, yet a stream that stayed open this long proves the server works:
                # the break that ended it, however it ended, waits the shortest delay.
                self.backoff.reset()
        return resource_version

    def _cut(self, cuts: list[kube.Cut]) -> set[Hashable]:
        """Record objects left out for their size; their keys (those that have one)."""
        self.resource.status.cut(cuts)
        logger.warning(
            "cluster %s: left out %d %s over their size cap (the last: %s/%s, %d bytes)",
            self.cluster_id,
            len(cuts),
            self.resource.plural,
            cuts[-1].namespace,
            cuts[-1].name,
            cuts[-1].size,
        )
        keys = (
            self.resource.key_of({"metadata": {"namespace": cut.namespace, "name": cut.name}})
            for cut in cuts
        )
        return {key for key in keys if key is not None}

    def _cut_from_stream(self, stream: kube.WatchStream, resource_version: str) -> str:
        """Take the stream's cut events: recorded, and passed (their resourceVersion, when
        newer, is where a resumed watch starts: the same object is not cut again)."""
        cuts = list(stream.cut)
        stream.cut.clear()
        self._cut(cuts)
        newest = revision(resource_version)
        for cut in cuts:
            number = revision(cut.resource_version)
            if number is not None and (newest is None or number > newest):
                newest, resource_version = number, cut.resource_version
        self.resource_version = resource_version
        return resource_version

    def _read_lines(
        self, lines: list[bytes], stream: kube.WatchStream, api: object, resource_version: str
    ) -> str:
        """Hand one read's events to the ingestor; the newest resourceVersion read."""
        ingestor, stop = self.resource.ingestor, self._stop
        for line in lines:
            if stop.is_set():  # SHUTDOWN reaches here as a stop (housekeeping)
                break
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                self._malformed(line)
                continue
            if not isinstance(event, dict):
                self._malformed(line)
                continue
            kind, obj = event.get("type"), event.get("object")
            if kind == "MODIFIED" or kind == "ADDED":
                if not ingestor.observe(obj):  # type: ignore[arg-type]
                    self._malformed(line)
            elif kind == "DELETED":
                key = self.resource.key_of(obj)
                if key is not None:
                    ingestor.observe_deleted(key)
            elif kind == "BOOKMARK":
                ingestor.count_event()
            elif kind == "ERROR":
                status = obj if isinstance(obj, dict) else {}
                if status.get("code") == 410:
                    raise WatchExpired
                raise kube.status_error(status, stream.action, kube.server_address(api))  # type: ignore[arg-type]
            else:
                self.unknown_events += 1
                if self.unknown_events <= 3:
                    logger.warning(
                        "cluster %s: ignoring %s watch event of unknown type %r",
                        self.cluster_id,
                        self.resource.plural,
                        str(kind)[:40],
                    )
                continue
            resource_version = resource_version_of(obj) or resource_version
            self.resource_version = resource_version
        return resource_version

    def _malformed(self, line: bytes) -> None:
        self.malformed_lines += 1
        if self.malformed_lines <= 3:
            logger.warning(
                "cluster %s: skipping a malformed %s watch line (%d bytes)",
                self.cluster_id,
                self.resource.plural,
                len(line),
            )


def unexpected_error_text(exc: BaseException) -> str:
    """An unforeseen failure in words, without the exception's own text (it may quote a
    credential), but with where it happened so the log's traceback is easy to find."""
    if isinstance(exc, DatabaseError):
        # Database messages carry no credentials; the first line says what went wrong.
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"A database call of the watcher failed ({type(exc).__name__}: {detail})."
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" in {'/'.join(Path(last.filename).parts[-2:])}, {last.name}()"
    return (
        f"The watcher failed unexpectedly ({type(exc).__name__}{where}); the worker log has "
        "the traceback."
    )
