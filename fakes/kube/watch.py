"""Watch streams: events from the store's log as chunked JSON lines, bookmarks, and the
injected faults (a connection cut mid-line) that test a client's resumption.

Many queued events go out in one chunk and one `sendall`, which is what lets a single thread
push well over 100,000 events per second.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from fakes.kube import errors
from fakes.kube.errors import ApiError
from fakes.kube.faults import Faults, WatchStreamControl
from fakes.kube.resources import ResourceType, clean_spec, clean_status
from fakes.kube.routes import ResourcePath, is_true, parse_int, parse_resource_version
from fakes.kube.selectors import ObjectFilter, parse_filter
from fakes.kube.storage import WatchEvent, watch_line

if TYPE_CHECKING:
    from fakes.kube.handler import Handler

# How often an idle watch checks that its client is still connected.
_LIVENESS_CHECK_SECONDS = 1.0
_WATCH_BATCH = 2000


class DroppedMidLine(Exception):
    """Raised after a fault-injected watch has sent half a line and cut the connection."""


def chunk(data: bytes) -> bytes:
    """One chunk of a `Transfer-Encoding: chunked` body."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def serve_watch(handler: Handler, route: ResourcePath, query: dict[str, str]) -> None:
    """Stream a watch as chunked JSON lines until its timeout, the client leaving, or stop."""
    api = handler.server.api
    resource = route.resource
    object_filter = parse_filter(
        route.namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
    )
    bookmarks = is_true(query.get("allowWatchBookmarks"))
    timeout = parse_int(query.get("timeoutSeconds"), "timeoutSeconds")
    duration = float(timeout) if timeout and timeout > 0 else api.default_watch_timeout
    requested = query.get("resourceVersion", "")
    since = None if requested in ("", "0") else parse_resource_version(requested)
    initial_events_end = api.watch_list and is_true(query.get("sendInitialEvents"))
    if initial_events_end:
        if not bookmarks or query.get("resourceVersionMatch") != "NotOlderThan":
            raise errors.bad_request(
                "sendInitialEvents requires allowWatchBookmarks=true and "
                "resourceVersionMatch=NotOlderThan"
            )
        since = None
    deadline = time.monotonic() + duration
    convert = _line_converter(resource, route.version)
    faults = api._faults

    try:
        if since is not None and faults.take_gone_watch():
            # gone_storm: what the watch cache answers for a resourceVersion it no longer
            # holds, "too old resource version: <asked> (<oldest it can serve from>)".
            raise errors.expired(
                f"too old resource version: {since} ({api.store.resource_version})"
            )
        subscription = api.store.subscribe(resource, object_filter, since)
    except ApiError as error:
        # Past authentication and parameter parsing, the apiserver reports watch errors
        # inside a 200 stream (watch_410_expired.jsonl), not as the HTTP status.
        handler.start_stream()
        line = orjson.dumps({"type": "ERROR", "object": error.body}) + b"\n"
        handler.wfile.write(chunk(line) + b"0\r\n\r\n")
        return

    control = faults.open_stream(resource.plural)
    writer = _WatchWriter(handler, api._take_watch_drop(), faults, control)

    def send_bookmark(*, initial_events_end: bool = False) -> None:
        resource_version = subscription.bookmark_resource_version()
        writer.write_lines(
            [
                _bookmark_line(
                    resource,
                    route.version,
                    resource_version,
                    initial_events_end=initial_events_end,
                )
            ]
        )

    try:
        handler.start_stream()
        for start in range(0, len(subscription.initial_objects), _WATCH_BATCH):
            objects = subscription.initial_objects[start : start + _WATCH_BATCH]
            lines = [watch_line(resource, "ADDED", obj, route.version) for obj in objects]
            writer.write_lines(lines if convert is None else [convert(line) for line in lines])
        if initial_events_end:
            send_bookmark(initial_events_end=True)
        select_lines = _event_selector(resource, object_filter)
        next_bookmark = time.monotonic() + api.bookmark_interval
        while True:
            now = time.monotonic()
            if now >= deadline:
                if bookmarks:
                    # Newer apiservers send a last bookmark before a watch times out so
                    # the client resumes without replaying events.
                    send_bookmark()
                break
            wake = min(deadline, now + _LIVENESS_CHECK_SECONDS)
            if bookmarks:
                wake = min(wake, next_bookmark)
            batch = subscription.next_batch(max(0.0, wake - now), _WATCH_BATCH)
            if subscription.closed:
                break
            if batch:
                lines = select_lines(batch)
                if lines:
                    writer.write_lines(
                        lines if convert is None else [convert(line) for line in lines]
                    )
            elif handler.client_gone():
                handler.close_connection = True
                return
            if bookmarks and time.monotonic() >= next_bookmark:
                send_bookmark()
                next_bookmark = time.monotonic() + api.bookmark_interval
        writer.end()
    finally:
        faults.close_stream(control)
        subscription.close()


class _WatchWriter:
    """Writes lines as chunks; carries out an injected mid-line connection drop, and waits
    while the server is stalled or this stream is stuck (faults)."""

    def __init__(
        self,
        handler: Handler,
        drop_after_events: int | None,
        faults: Faults,
        control: WatchStreamControl,
    ) -> None:
        self._handler = handler
        self._lines_before_drop = drop_after_events
        self._faults = faults
        self._control = control

    def _hold(self) -> bool:
        """Wait until this stream may write; True if this write is to be cut mid-line."""
        return self._faults.hold_stream_write(self._control, self._handler.client_gone)

    def end(self) -> None:
        """The terminating chunk: a clean end the client may resume from."""
        if self._hold():
            # A cut was asked for and no line is left to halve: the connection just ends.
            self._cut()
        self._handler.wfile.write(b"0\r\n\r\n")

    def _cut(self) -> None:
        # Cut the TCP connection without the terminating chunk, as a crashing apiserver or
        # a load balancer reset does.
        with contextlib.suppress(OSError):
            self._handler.connection.shutdown(socket.SHUT_RDWR)
        raise DroppedMidLine

    def write_lines(self, lines: list[bytes]) -> None:
        if not lines:
            return
        remaining = self._lines_before_drop
        if self._hold():
            remaining = 0
        if remaining is not None and len(lines) > remaining:
            whole = b"".join(lines[:remaining])
            victim = lines[remaining]
            data = whole + victim[: max(1, len(victim) // 2)]
            self._handler.wfile.write(chunk(data))
            self._cut()
        if remaining is not None:
            self._lines_before_drop = remaining - len(lines)
        self._handler.wfile.write(chunk(b"".join(lines)))


def _event_selector(
    resource: ResourceType, object_filter: ObjectFilter
) -> Callable[[list[WatchEvent]], list[bytes]]:
    plural = resource.plural
    if object_filter.selects_everything:
        return lambda batch: [e.line for e in batch if e.resource == plural or not e.resource]
    if not object_filter.has_selectors:
        namespace = object_filter.namespace
        return lambda batch: [
            e.line
            for e in batch
            if not e.resource or (e.resource == plural and e.namespace == namespace)
        ]
    matches = object_filter.matches
    return lambda batch: [
        e.line
        for e in batch
        if not e.resource or (e.resource == plural and matches(e.namespace, e.name, e.labels))
    ]


def _line_converter(resource: ResourceType, version: str) -> Callable[[bytes], bytes] | None:
    """Re-encode stored event lines for a version other than storage's; None = as is."""
    if version == resource.storage_version:
        return None
    api_version = resource.api_version(version)

    def convert(line: bytes) -> bytes:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return line  # an injected garbage line stays garbage
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict) or obj.get("kind") != resource.kind:
            return line
        obj["apiVersion"] = api_version
        return orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)

    return convert


def _bookmark_line(
    resource: ResourceType, version: str, resource_version: int, *, initial_events_end: bool = False
) -> bytes:
    # A bookmark is an empty object of the watched kind with only a resourceVersion.
    metadata: dict[str, Any] = {"resourceVersion": str(resource_version), "creationTimestamp": None}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {
        "kind": resource.kind,
        "apiVersion": resource.api_version(version),
        "metadata": metadata,
        "spec": clean_spec(resource, {}, version),
    }
    if resource.has_status:
        # Go writes an empty Node's struct-typed status fields too (daemonEndpoints, nodeInfo).
        obj["status"] = clean_status(resource, {}, version)
    return orjson.dumps({"type": "BOOKMARK", "object": obj}, option=orjson.OPT_APPEND_NEWLINE)
