"""Bounds on what an API server can make the watcher hold or wait for.

The API server is outside the dashboard's trust: a compromised or buggy one (or whatever
answers at its address) can send a watch line that never ends, a compressed body that
unpacks to gigabytes, objects of megabytes, or a body one byte at a time so that no read
ever times out. So every body is read here in pieces, under a size cap and a total
deadline, and never decoded: the client asks for `identity` and refuses anything else.

The caps, per object (a watch line is one event: one object and a few bytes around it):
- Lease: 256 KiB. Election libraries write well under 4 KiB (a node heartbeat lease is
  about 500 bytes with managedFields); 256 KiB is the API server's own limit on all of an
  object's annotations together, so only a lease stuffed to that limit or beyond is cut.
- Node: 1 MiB. A real Node is 5-60 KiB (50 images in status.images, addresses, capacity,
  managedFields, CNI annotations); 1 MiB is more than ten times the largest seen and still
  under etcd's default request limit of 1.5 MiB, which bounds what a real server can store.
A list page is never held whole: `ListReader` takes its items one at a time as the bytes
arrive, so what a list makes the worker hold is one read (READ_SIZE) and one object under
its cap; an object over its cap is read past and named, as an over-size watch line is. A
page may hold no more objects than were asked for. Unpaged lists (LeaseCandidates) and the
probe are still read whole, under MAX_PAGE_BYTES.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3

from leases.kube.errors import KubeError

KIB = 1024
MIB = 1024 * KIB
MAX_LEASE_BYTES = 256 * KIB
MAX_NODE_BYTES = 1 * MIB
MAX_OBJECT_BYTES = {"leases": MAX_LEASE_BYTES, "nodes": MAX_NODE_BYTES}
# A body read whole (the LeaseCandidates list): 500 real leases are about 1 MiB and 500
# real Nodes about 25 MiB. List pages are streamed instead (ListReader).
MAX_PAGE_BYTES = {"leases": 16 * MIB, "nodes": 32 * MIB}
# An over-size watch line is read past (not kept: it costs no memory) up to this long, so
# one large object costs the stream nothing; a line longer than that is no event at all (a
# line that never ends): the stream is closed and reopened from its last resourceVersion.
MAX_SKIPPED_LINE_BYTES = 64 * MIB
# What is kept of an over-size object: enough to name it (metadata comes first).
PREFIX_BYTES = 4 * KIB
READ_SIZE = 256 * KIB
# The only Content-Encoding accepted: none. Sent as Accept-Encoding on every request.
IDENTITY = {"Accept-Encoding": "identity"}


@dataclass(frozen=True, slots=True)
class Cut:
    """An object that was not ingested because it was over its cap: for the status page."""

    namespace: str
    name: str
    size: int  # bytes; at least this many when the stream was closed inside it
    resource_version: str = ""


def refuse_encoded(response: urllib3.BaseHTTPResponse, what: str) -> None:
    """Refuse a body compressed against our Accept-Encoding, unread: urllib3 would inflate
    it (a 1 MB gzip is a 1 GiB list) before any cap could look at it."""
    encoding = str(response.headers.get("content-encoding") or "").strip().lower()
    if encoding and encoding != "identity":
        discard(response)
        raise KubeError(
            f"The API server sent a {what} compressed ({encoding[:40]}) although the dashboard "
            "asked for an uncompressed answer; it was refused unread.",
            kind="bad_response",
        )


def discard(response: urllib3.BaseHTTPResponse) -> None:
    """Close the connection of a body not read to its end: it can never be reused."""
    with contextlib.suppress(Exception):
        response.shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        response.close()
    with contextlib.suppress(Exception):
        response.release_conn()


def response_socket(response: urllib3.BaseHTTPResponse) -> socket.socket | None:
    sock = getattr(getattr(response, "connection", None), "sock", None)
    return sock if isinstance(sock, socket.socket) else None


def raw_read1(response: urllib3.BaseHTTPResponse) -> object:
    """The body's cheapest read, never decoding (see leases.kube.watch._read1)."""
    raw = getattr(response, "_fp", None)
    if isinstance(raw, http.client.HTTPResponse):
        return raw.read1
    return lambda size: response.read1(size, decode_content=False)  # type: ignore[attr-defined]


def wait_until(sock: socket.socket | None, deadline: float, what: str) -> None:
    """Let the next read wait no longer than the deadline leaves (a trickle of one byte a
    second never lets a per-read timeout expire)."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise KubeError(
            f"The API server took too long to send the {what} (its deadline passed).",
            kind="timeout",
        )
    if sock is not None:
        sock.settimeout(left)


@dataclass(frozen=True, slots=True)
class Body:
    data: bytes
    # Over the cap: `data` is only its first PREFIX_BYTES and the connection was closed.
    over: bool = False
    size: int = 0  # bytes read before stopping (over) or the whole body


def read_body(
    response: urllib3.BaseHTTPResponse, what: str, max_bytes: int, deadline: float
) -> Body:
    """The whole body, read in pieces under `max_bytes` and a total `deadline` (a
    time.monotonic() moment); never decoded, never more than a read past the cap."""
    refuse_encoded(response, what)
    sock = response_socket(response)
    timeout = sock.gettimeout() if sock is not None else None
    read = raw_read1(response)
    data = bytearray()
    complete = False
    try:
        while True:
            wait_until(sock, deadline, what)
            piece = read(READ_SIZE)  # type: ignore[operator]
            if not piece:
                complete = True
                break
            data += piece
            if len(data) > max_bytes:
                return Body(bytes(data[:PREFIX_BYTES]), over=True, size=len(data))
    finally:
        if complete:
            if sock is not None:
                sock.settimeout(timeout)  # back to the pool as it came out of it
            response.release_conn()
        else:
            discard(response)
    return Body(bytes(data), size=len(data))


# The first `"name"`, `"namespace"` and `"resourceVersion"` of an object's JSON: the
# API server writes metadata first and, inside it, these three before labels and
# annotations, so an object cut after PREFIX_BYTES is still named. Untrusted text, cut.
_STRING = rb'"((?:[^"\\]|\\.){0,253})"'
_FIELDS = {
    field: re.compile(rb'"' + field.encode() + rb'"\s*:\s*' + _STRING)
    for field in ("name", "namespace", "resourceVersion")
}


def name_prefix(prefix: bytes, size: int) -> Cut:
    """The object whose JSON begins with `prefix` (an event's or a list item's), as a Cut."""
    start = prefix.find(b'"metadata"')
    head = prefix[start:] if start >= 0 else prefix
    found = {}
    for field, pattern in _FIELDS.items():
        match = pattern.search(head)
        found[field] = (
            match.group(1).decode("utf-8", "replace").replace("\x00", "")[:253] if match else ""
        )
    return Cut(found["namespace"], found["name"], size, found["resourceVersion"][:64])


def list_metadata_of_prefix(prefix: bytes) -> dict[str, object] | None:
    """A list's own metadata (resourceVersion, continue) from its body's first bytes: the
    API server writes `kind`, `apiVersion` and `metadata` before `items`."""
    end = prefix.find(b'"items"')
    if end < 0:
        return None
    head = prefix[:end].rstrip().rstrip(b",") + b"}"
    try:
        body = orjson.loads(head)
    except orjson.JSONDecodeError:
        return None
    metadata = body.get("metadata") if isinstance(body, dict) else None
    return metadata if isinstance(metadata, dict) else None


# --- A list page read item by item ---------------------------------------------------------

# A list's own fields beside its items (kind, apiVersion, metadata with its continue token):
# a real one is well under 1 KiB; each is read whole, so each is capped.
MAX_LIST_FIELD_BYTES = 64 * KIB
# The longest key of a list's own fields that is read at all (a real one is `apiVersion`).
MAX_LIST_KEY_BYTES = 256
_SPACE = frozenset(b" \t\r\n")
# A run of JSON with no bracket outside a string: whole strings are skipped in one C call,
# so the Python loop below runs once per bracket, not per byte or per string. An unended
# string stops the run at its quote (the reader then waits inside it: _IN_STRING).
_RUN = re.compile(rb'(?:(?>[^"{}\[\]]+)|(?>"(?:[^"\\]|\\.)*+"))*+')
# The rest of a string read from inside it; it stops at its closing quote, or at a lone
# backslash that the next piece completes, or at the end of what has arrived.
_IN_STRING = re.compile(rb'(?:[^"\\]|\\.)*+')
# A number, true, false or null: up to the next delimiter.
_SCALAR = re.compile(rb"[^\s,\]}]*+")
_OPEN = frozenset(b"{[")
# How many ends an item's quick read tries before the scan takes over (ListReader).
QUICK_TRIES = 4


class _Span:
    """Where the JSON value that begins at `start` ends, found as its bytes arrive and
    never read twice: the scan resumes where the last piece ended (inside a string too), so
    a body sent a byte at a time costs what it costs whole."""

    __slots__ = ("depth", "in_string", "pos", "scalar", "start")

    def __init__(self, start: int, first: int) -> None:
        self.start = start
        self.depth = 0
        self.in_string = first == 0x22  # '"': a string on its own, read from inside it
        self.pos = start + 1 if self.in_string else start
        self.scalar = first not in _OPEN and not self.in_string

    def shift(self, removed: int) -> None:
        self.start -= removed
        self.pos -= removed

    def scan(self, data: bytearray, ended: bool) -> int | None:
        """The end (exclusive) of the value in `data`, or None until more arrives."""
        end = len(data)
        pos = self.pos
        if self.scalar:
            match = _SCALAR.match(data, pos)
            self.pos = match.end() if match else pos
            return self.pos if self.pos < end or ended else None
        while pos < end:
            if self.in_string:
                match = _IN_STRING.match(data, pos)
                pos = match.end() if match else pos
                if pos >= end or data[pos] != 0x22:  # the end of what came, or a lone "\"
                    break
                pos += 1
                self.in_string = False
                if self.depth == 0:  # a string on its own
                    self.pos = pos
                    return pos
                continue
            match = _RUN.match(data, pos)
            pos = match.end() if match else pos
            if pos >= end:
                break
            byte = data[pos]
            pos += 1
            if byte == 0x22:
                self.in_string = True
            elif byte in _OPEN:
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth == 0:
                    self.pos = pos
                    return pos
        self.pos = pos
        return None


class ListReader:
    """The items of one list page, parsed one at a time as its body arrives.

    A page is never held whole: what stays in memory is the piece being read and the item
    being parsed, each item at most `max_object_bytes` (one over it is read past, not kept,
    and named in `cut` from its first bytes, as a watch line over its cap is). The list's
    own `metadata` (resourceVersion, continue) may come before or after the items: the real
    API server writes it first, but nothing here relies on that; it is known once the items
    are read to their end. A page with more items than were asked for (`max_items`), a body
    that is not one JSON object with one `items` array, or one that ends early is refused.
    Every read waits no longer than `deadline` leaves (a trickling server). Errors of the
    connection itself are left to the caller (leases.kube.client words them).
    """

    def __init__(
        self,
        response: urllib3.BaseHTTPResponse,
        what: str,
        max_object_bytes: int,
        max_items: int,
        deadline: float,
    ) -> None:
        refuse_encoded(response, what)
        self.what = what
        self.max_object_bytes = max_object_bytes
        self.max_items = max_items
        self.deadline = deadline
        self.metadata: dict[str, Any] = {}
        self.cut: list[Cut] = []
        self.size = 0  # bytes read so far
        self.done = False  # the body was read to its end and was a whole list
        self._response = response
        self._sock = response_socket(response)
        self._timeout = self._sock.gettimeout() if self._sock is not None else None
        self._read = raw_read1(response)
        self._data = bytearray()
        self._pos = 0
        self._ended = False
        self._span: _Span | None = None  # the value being scanned
        self._prefix = b""  # the first bytes of the last value over its cap

    # --- reading -------------------------------------------------------------------------

    def _fill(self) -> bool:
        """One more piece of the body; False at its end."""
        if self._ended:
            return False
        if self._pos > READ_SIZE and self._pos * 2 > len(self._data):
            self._drop(self._pos)
        wait_until(self._sock, self.deadline, self.what)
        piece = self._read(READ_SIZE)  # type: ignore[operator]
        if not piece:
            self._ended = True
            return False
        self.size += len(piece)
        self._data += piece
        return True

    def _drop(self, upto: int) -> None:
        """Forget the bytes before `upto` (read and no longer needed)."""
        del self._data[:upto]
        self._pos -= upto
        self._dropped(upto)

    def _dropped(self, count: int) -> None:  # the span being scanned moves with the data
        span = self._span
        if span is not None:
            span.shift(count)

    def _refuse(self, why: str = "") -> KubeError:
        return KubeError(
            f"The API server sent a {self.what} that is not JSON{why}.", kind="bad_response"
        )

    def _next_byte(self) -> int:
        """The next byte that is not white space, consumed."""
        while True:
            data, pos = self._data, self._pos
            while pos < len(data) and data[pos] in _SPACE:
                pos += 1
            self._pos = pos
            if pos < len(data):
                self._pos = pos + 1
                return data[pos]
            if not self._fill():
                raise self._refuse(" (it ended early)")

    def _value(self, cap: int) -> tuple[bytes | None, int]:
        """The next JSON value's bytes (None when over `cap`: read past, only its first
        PREFIX_BYTES kept in self._prefix) and its size."""
        first = self._next_byte()
        self._pos -= 1  # the value's bytes stay until it is taken
        self._span = span = _Span(self._pos, first)
        self._prefix = b""
        skipped = 0  # bytes of an over-size value already let go
        tried_ended = False
        try:
            while True:
                end = span.scan(self._data, self._ended)
                if end is not None:
                    size = skipped + end - span.start
                    value = None
                    if not skipped and size <= cap:
                        value = bytes(self._data[span.start : end])
                    elif not skipped:
                        self._prefix = bytes(self._data[span.start : span.start + PREFIX_BYTES])
                    self._pos = end
                    return value, size
                if skipped + len(self._data) - span.start > cap:
                    # Over its cap: keep what names it, let the rest go as it is scanned.
                    if not skipped:
                        self._prefix = bytes(self._data[span.start : span.start + PREFIX_BYTES])
                    skipped += span.pos - span.start
                    if skipped > MAX_SKIPPED_LINE_BYTES:
                        raise KubeError(
                            f"The API server sent a {self.what} with one value over "
                            f"{MAX_SKIPPED_LINE_BYTES // MIB} MiB; the list is refused.",
                            kind="bad_response",
                        )
                    self._pos = span.pos
                    self._drop(span.pos)  # the span now starts where the scan stands
                    span.start = span.pos
                if not self._fill():
                    if tried_ended:
                        raise self._refuse(" (it ended early)")
                    tried_ended = True  # a number may end with the body: scan once more
        finally:
            self._span = None

    def _quick_item(self) -> Any:
        """The next item, when it is already here whole and written the way the real API
        server writes it (compact: `},{` or `}]` after it): parsed straight from the first
        such ends that parse, without scanning its brackets in Python (~15x faster).

        An object that parses whole from its opening brace can end nowhere else (JSON's
        nesting is decided by its bytes from that brace on), so whatever this finds is
        exactly what the scan would find; a few failed tries (an end inside a string or a
        nested object) and it leaves the item to the scan. None: not found this way."""
        data, start = self._data, self._pos
        if start >= len(data) or data[start] != 0x7B:  # "{"
            return None
        limit = min(len(data), start + self.max_object_bytes)
        pos = start
        for _ in range(QUICK_TRIES):
            # Another item follows (the usual case), or the items end here.
            end = data.find(b"},{", pos, limit)
            if end < 0:
                end = data.find(b"}]", pos, limit)
            if end < 0:
                return None
            pos = end + 1
            try:
                item = orjson.loads(data[start:pos])  # one copy: the slice
            except orjson.JSONDecodeError:
                continue
            self._pos = pos
            return item
        return None

    def _parse(self, value: bytes) -> Any:
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            raise self._refuse() from None

    # --- the list's shape ------------------------------------------------------------------

    def items(self) -> Iterator[dict[str, Any]]:
        """The page's objects under their cap, one by one; the connection goes back to its
        pool once the body is read to its end, and is closed otherwise."""
        try:
            yield from self._body()
            self.done = True
        finally:
            if self.done:
                if self._sock is not None:
                    self._sock.settimeout(self._timeout)  # back to the pool as it came
                self._response.release_conn()
            else:
                discard(self._response)
            # Let go of the response at once: the page object may outlive it (its metadata
            # is read after), and a response collected later closes the connection that
            # the pool has meanwhile given to the next request (seen as resets).
            self._data = bytearray()
            self._response = self._sock = self._read = None  # type: ignore[assignment]

    def _body(self) -> Iterator[dict[str, Any]]:
        if self._next_byte() != 0x7B:  # "{"
            raise self._refuse(" (not an object)")
        seen_items = False
        byte = self._next_byte()
        while byte != 0x7D:  # "}"
            self._pos -= 1
            key, _ = self._value(MAX_LIST_KEY_BYTES)
            name = self._parse(key) if key is not None else None
            if key is not None and not isinstance(name, str):
                raise self._refuse()
            if self._next_byte() != 0x3A:  # ":"
                raise self._refuse()
            if name == "items":
                if seen_items:
                    raise self._refuse(" (two item lists)")
                seen_items = True
                yield from self._items()
            else:
                value, _size = self._value(MAX_LIST_FIELD_BYTES)
                if value is None:
                    raise KubeError(
                        f"The API server sent a {self.what} whose own fields are over "
                        f"{MAX_LIST_FIELD_BYTES // KIB} KiB; the list is refused.",
                        kind="bad_response",
                    )
                parsed = self._parse(value)
                if name == "metadata" and isinstance(parsed, dict):
                    self.metadata = parsed
            byte = self._next_byte()
            if byte == 0x2C:  # ","
                byte = self._next_byte()
                if byte == 0x7D:
                    raise self._refuse()
            elif byte != 0x7D:
                raise self._refuse()
        while self._pos < len(self._data) or self._fill():
            if any(byte not in _SPACE for byte in self._data[self._pos :]):
                raise self._refuse(" (something follows the list)")
            self._pos = len(self._data)
        if not seen_items:
            raise KubeError(
                f"The API server answered a {self.what} without items.", kind="bad_response"
            )

    def _items(self) -> Iterator[dict[str, Any]]:
        if self._next_byte() != 0x5B:  # "["
            raise KubeError(
                f"The API server answered a {self.what} without items.", kind="bad_response"
            )
        count = 0
        byte = self._next_byte()
        if byte == 0x5D:  # "]": an empty page
            return
        while True:
            self._pos -= 1
            count += 1
            if count > self.max_items:
                raise KubeError(
                    f"The API server sent a {self.what} page of more than the "
                    f"{self.max_items} objects asked for; the list is refused.",
                    kind="bad_response",
                )
            item = self._quick_item()
            if item is None:
                value, size = self._value(self.max_object_bytes)
                if value is None:
                    self.cut.append(name_prefix(self._prefix, size))
                    item = None
                else:
                    item = self._parse(value)
                    del value
            if isinstance(item, dict):
                yield item
            byte = self._next_byte()
            if byte == 0x5D:
                return
            if byte != 0x2C:  # ","
                raise self._refuse()
            # The next value's first byte (a "]" here is no JSON value: refused there).
            byte = self._next_byte()
