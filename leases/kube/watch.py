"""Watch streams: open a watch of Leases or Nodes and read it as batches of raw lines.

A watch delivers newline-separated JSON events inside chunked HTTP. At a real cluster's
rate (a few events every few milliseconds) the cost is per read, not per byte: urllib3's
`stream()` runs its chunk parser and a generator per chunk, and a line generator runs per
event. So a read here is one `read1()` (whatever the socket has, at most one chunk),
split into whole lines handed over as one list: measured at 1,500 events/s, about half
the reader CPU of the stream() reader (5 against 9-10 us per event).
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import urllib3
from kubernetes import client as k8s

from leases.kube.bounded import (
    IDENTITY,
    MAX_LEASE_BYTES,
    MAX_OBJECT_BYTES,
    MAX_SKIPPED_LINE_BYTES,
    PREFIX_BYTES,
    Cut,
    name_prefix,
    raw_read1,
    refuse_encoded,
    response_socket,
    wait_until,
)
from leases.kube.client import (
    CONNECT_TIMEOUT_SECONDS,
    LEASE_GRANT,
    NODE_GRANT,
    KubeError,
    _translated_errors,
    server_address,
    status_error,
)
from leases.kube.deadline import call_deadline

logger = logging.getLogger(__name__)

# The most one read takes; a busy stream fills it, a quiet one returns what it has.
READ_SIZE = 256 * 1024
# After a read that emptied the socket, wait this long before the next: the events that
# arrive meanwhile are read together. A cluster's renewals arrive one by one, spread over
# time, and each read (wake-up, GIL, chunk parsing) costs as much as parsing a few events;
# 50 ms is nothing beside the 500 ms between flushes, and the stream stays fully read.
READ_PAUSE_SECONDS = 0.05
# A real kube-apiserver sends a watch's headers as soon as the watch starts; a server that
# has not sent them within this is not answering (a frozen process still accepts
# connections: the kernel does). The stream itself then reads with the long timeout.
WATCH_HEADERS_TIMEOUT_SECONDS = 10.0


class WatchStream:
    """An open watch: yields raw lines; `close()` from another thread ends it at once.

    A line over `max_line` bytes (leases.kube.bounded: the object's cap) is not kept: it is
    read past to its end, named from its first bytes and listed in `cut` (the reader takes
    them after each batch; an empty batch is yielded for a cut alone). A line that goes on
    past MAX_SKIPPED_LINE_BYTES ends the stream with a KubeError of kind "too_large".
    `deadline` (a time.monotonic() moment) bounds the whole stream (the quiet check's).
    """

    def __init__(
        self,
        api: k8s.ApiClient,
        response: urllib3.BaseHTTPResponse,
        action: str = "watch leases",
        grant: str = "",
        read_pause: float = READ_PAUSE_SECONDS,
        *,
        max_line: int = MAX_LEASE_BYTES,
        deadline: float | None = None,
    ) -> None:
        self._api = api
        self._response = response
        self.action = action
        self._grant = grant
        self.read_pause = read_pause
        self.max_line = max_line
        self.deadline = deadline
        self.cut: list[Cut] = []

    def batches(self) -> Iterator[list[bytes]]:
        """The complete, non-blank lines of each read, in order; a line cut by a dropped
        connection is never yielded."""
        read = _read1(self._response)
        sock = response_socket(self._response)
        pause = self.read_pause if sock is not None else 0.0
        max_line, deadline = self.max_line, self.deadline
        # The start of a line not yet ended; its length is kept alongside, as the parts are
        # joined only when the line ends (joining at every read is quadratic in a trickle).
        parts: list[bytes] = []
        pending = 0
        # Inside an over-size line: its first bytes and how long it is so far.
        skipping: bytearray | None = None
        skipped = 0
        with _translated_errors(self._api, self.action, self._grant):
            while True:
                if deadline is not None:
                    wait_until(sock, deadline, self.action)
                data = read(READ_SIZE)
                if not data:
                    break
                cut_here = False
                if skipping is not None:
                    end = data.find(b"\n")
                    if end < 0:
                        skipped += len(data)
                        if skipped > MAX_SKIPPED_LINE_BYTES:
                            raise self._endless(skipping, skipped)
                        continue
                    self.cut.append(name_prefix(bytes(skipping), skipped + end))
                    skipping, skipped, cut_here = None, 0, True
                    data = data[end + 1 :]
                if b"\n" not in data:
                    if data:
                        parts.append(data)
                        pending += len(data)
                    if pending > max_line:
                        skipping = bytearray(b"".join(parts)[:PREFIX_BYTES])
                        skipped, parts, pending = pending, [], 0
                    if cut_here:
                        yield []
                    continue
                if parts:
                    parts.append(data)
                    data, parts = b"".join(parts), []
                    pending = 0
                *complete, rest = data.split(b"\n")
                if len(data) > max_line:  # else no line in it can be over the cap
                    count = len(complete)
                    complete = self._within_cap(complete)
                    cut_here = cut_here or len(complete) < count
                if rest:
                    if len(rest) > max_line:
                        skipping, skipped = bytearray(rest[:PREFIX_BYTES]), len(rest)
                    else:
                        parts, pending = [rest], len(rest)
                # A blank line (a keep-alive, say) is not an event: leave it out here, so
                # the reader sees only candidates for parsing.
                lines = [line for line in complete if line and not line.isspace()]
                if lines or cut_here:
                    yield lines
                if pause and not _more_waiting(sock):
                    # Caught up: let the next events gather. With more waiting (a backlog),
                    # read on at once. A close() from another thread ends the next read.
                    time.sleep(pause)
        if pending or skipping is not None:
            logger.info("watch stream ended inside a line; it will resume from the last event")

    def _within_cap(self, lines: list[bytes]) -> list[bytes]:
        kept = []
        for line in lines:
            if len(line) > self.max_line:
                self.cut.append(name_prefix(line[:PREFIX_BYTES], len(line)))
            else:
                kept.append(line)
        return kept

    def _endless(self, prefix: bytearray, size: int) -> KubeError:
        self.cut.append(name_prefix(bytes(prefix), size))
        return KubeError(
            f"The API server sent a line of over {size // (1024 * 1024)} MiB while trying to "
            f"{self.action} (an object is at most {self.max_line // 1024} KiB): the stream was "
            "closed and is reopened from its last event.",
            kind="too_large",
        )

    def lines(self) -> Iterator[bytes]:
        """One line at a time (tests and the benchmark's raw read)."""
        for batch in self.batches():
            yield from batch

    def close(self) -> None:
        try:
            self._response.shutdown()
        except Exception:
            logger.debug("closing the watch response failed", exc_info=True)
        self._response.release_conn()


def _more_waiting(sock: socket.socket) -> bool:
    """Bytes are waiting to be read: in the socket, or decrypted inside TLS (which select
    cannot see). A read's own buffer may hold a chunk's start too; it is read after the
    pause, so a pause only ever delays, never drops, and a backlog never builds up."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True  # closed meanwhile: the next read says how
    return bool(readable)


def _read1(response: urllib3.BaseHTTPResponse) -> Callable[[int], bytes]:
    """The cheapest read of the body: http.client's own read1 (it undoes the chunking),
    measured at 1,500 events/s at about half the CPU of urllib3's read1 around it, which
    adds a decoded-content buffer and an error-catching context per read. A compressed
    body was refused when the stream opened (leases.kube.bounded), so nothing is decoded;
    the errors http.client raises itself are translated like urllib3's (client.py)."""
    return raw_read1(response)  # type: ignore[return-value]


def open_lease_watch(
    api: k8s.ApiClient, resource_version: str, timeout_seconds: int
) -> WatchStream:
    """A watch of all Leases from `resource_version`, with bookmarks."""
    call = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces
    return _open_watch(api, call, "leases", LEASE_GRANT, resource_version, timeout_seconds)


def open_node_watch(api: k8s.ApiClient, resource_version: str, timeout_seconds: int) -> WatchStream:
    """A watch of all Nodes from `resource_version`, with bookmarks."""
    call = k8s.CoreV1Api(api).list_node
    return _open_watch(api, call, "nodes", NODE_GRANT, resource_version, timeout_seconds)


def _open_watch(
    api: k8s.ApiClient,
    call: Callable[..., Any],
    plural: str,
    grant: str,
    resource_version: str,
    timeout_seconds: int,
) -> WatchStream:
    """The read timeout is longer than the server's own `timeoutSeconds`, so a healthy but
    quiet stream ends by the server, and only a dead connection ends by our timeout."""
    action = f"watch {plural}"
    headers_by = time.monotonic() + WATCH_HEADERS_TIMEOUT_SECONDS
    with (
        call_deadline(api, headers_by, WATCH_HEADERS_TIMEOUT_SECONDS),
        _translated_errors(api, action, grant),
    ):
        response = call(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(
                CONNECT_TIMEOUT_SECONDS,
                min(WATCH_HEADERS_TIMEOUT_SECONDS, timeout_seconds + 30),
            ),
            _headers=IDENTITY,
        )
    refuse_encoded(response, f"{plural} watch")
    sock = response_socket(response)
    if sock is not None:
        # The headers came: from here on a read waits as long as a quiet stream may be
        # silent (the probe, not this timeout, notices a server that stops answering).
        sock.settimeout(timeout_seconds + 30)
    return WatchStream(api, response, action, grant, max_line=MAX_OBJECT_BYTES[plural])


_WATCH_CALLS: dict[str, tuple[Callable[[k8s.ApiClient], Callable[..., Any]], str]] = {
    "leases": (lambda api: k8s.CoordinationV1Api(api).list_lease_for_all_namespaces, LEASE_GRANT),
    "nodes": (lambda api: k8s.CoreV1Api(api).list_node, NODE_GRANT),
}


def changes_since(
    api: k8s.ApiClient, plural: str, resource_version: str, *, seconds: int = 1, deadline: float
) -> list[tuple[str, str]]:
    """(type, resourceVersion) of every event after `resource_version`, from a watch the
    server ends after `seconds`: a check that a quiet stream has missed nothing.

    The server replays every change after that version at once, so an empty answer means
    nothing changed since; `deadline` (a time.monotonic() moment) bounds the whole call.
    A 410 (the version is no longer kept) raises a KubeError of kind "gone"; the deadline
    passing, one of kind "timeout" (a trickle ends by it too, not only a silence).
    """
    call, grant = _WATCH_CALLS[plural]
    action = f"check the {plural} watch"
    timeout = max(0.5, deadline - time.monotonic())
    with call_deadline(api, deadline), _translated_errors(api, action, grant):
        response = call(api)(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=seconds,
            _preload_content=False,
            _request_timeout=(timeout, timeout),
            _headers=IDENTITY,
        )
    refuse_encoded(response, f"{plural} watch")
    stream = WatchStream(
        api,
        response,
        action,
        grant,
        read_pause=0.0,
        max_line=MAX_OBJECT_BYTES[plural],
        deadline=deadline,
    )
    events: list[tuple[str, str]] = []
    try:
        for batch in stream.batches():
            for line in batch:
                events.append(_event_version(line, stream, api))
    finally:
        stream.close()
    # An object over its cap is a change all the same: the stream cuts it too, and moves on.
    events.extend(("MODIFIED", cut.resource_version) for cut in stream.cut)
    return events


def _event_version(line: bytes, stream: WatchStream, api: k8s.ApiClient) -> tuple[str, str]:
    """An event's type and its object's resourceVersion ("" where unreadable)."""
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return "MALFORMED", ""
    if not isinstance(event, dict):
        return "MALFORMED", ""
    kind, obj = str(event.get("type") or ""), event.get("object")
    if kind == "ERROR":
        status = obj if isinstance(obj, dict) else {}
        raise status_error(status, stream.action, server_address(api))
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return kind, str(version or "")[:64]
