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
A list page is capped as a whole (what one page may make the worker hold before parsing);
an over-size page is asked again with a smaller `limit`, so a few large objects never stop
a list.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import time
from dataclasses import dataclass

import orjson
import urllib3

from leases.kube.errors import KubeError

KIB = 1024
MIB = 1024 * KIB
MAX_LEASE_BYTES = 256 * KIB
MAX_NODE_BYTES = 1 * MIB
MAX_OBJECT_BYTES = {"leases": MAX_LEASE_BYTES, "nodes": MAX_NODE_BYTES}
# A page of 500 real leases is about 1 MiB and of 500 real Nodes about 25 MiB.
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


def first_item_prefix(prefix: bytes) -> bytes:
    """Where the first item of a list body begins (its metadata names it)."""
    start = prefix.find(b'"items"')
    return prefix[start:] if start >= 0 else prefix
