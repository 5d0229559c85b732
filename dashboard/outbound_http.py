"""Bounded HTTP exchanges with outside services: a total deadline and a cap on the answer.

httpx's timeouts bound each socket operation, not the exchange: a server that sends one byte
every few seconds keeps a request open for ever, and a small gzip answer can inflate to
gigabytes in memory. Every outside HTTP call (NKS and its identity service, chat and webhook
posts) is therefore sent through :func:`send`, which

* bounds connect, TLS, every write and every read by what remains of one monotonic
  :class:`Deadline` (each socket operation's timeout is shrunk to it, headers included);
* reads the body raw, in chunks, and stops past ``max_body`` bytes;
* asks for ``Accept-Encoding: identity`` and refuses any other ``Content-Encoding``
  unread, so nothing is ever decompressed.

Errors are :class:`OutboundError` subclasses whose words never include the URL: callers put
them into their own error types. Clients come from :func:`bounded_client`, whose transport
applies the deadline of the calling thread (httpx's sync I/O happens in that thread).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.request import getproxies, proxy_bypass

import httpcore
import httpx

# Chunks are read at most this large, so a body stops within one chunk past its cap.
READ_CHUNK = 64 * 1024


class OutboundError(Exception):
    """An exchange stopped by its bounds; the message says which, never the URL."""


class DeadlineExceeded(OutboundError):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"took longer than {seconds:g} s in total")


class BodyTooLarge(OutboundError):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"answer larger than {format_size(limit)}")


class UnsupportedEncoding(OutboundError):
    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        super().__init__(f"answer compressed as {encoding!r}, which was not asked for")


def format_size(size: int) -> str:
    """8388608 -> "8 MiB"; sizes that are not whole MiB or KiB stay in bytes."""
    for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"


class Deadline:
    """A moment on the monotonic clock, ``seconds`` from its creation."""

    def __init__(self, seconds: float) -> None:
        if seconds <= 0:
            raise ValueError("a deadline needs a positive number of seconds")
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self._end - time.monotonic()

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0

    def bound(self, timeout: float | None) -> float:
        """``timeout`` shrunk to what remains; raises once nothing does."""
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded(self.seconds)
        return left if timeout is None else min(timeout, left)


_current = threading.local()


@contextmanager
def _bounded_by(deadline: Deadline) -> Iterator[None]:
    previous = getattr(_current, "deadline", None)
    _current.deadline = deadline
    try:
        yield
    finally:
        _current.deadline = previous


def _timeout(timeout: float | None, error: type[Exception]) -> float | None:
    deadline: Deadline | None = getattr(_current, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline.remaining()
    if left <= 0:
        # httpcore's own timeout error: httpx turns it into its TimeoutException, which
        # send() then reports as the deadline.
        raise error("deadline reached")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _timeout(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _timeout(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        kwargs["timeout"] = _timeout(kwargs.get("timeout"), httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """Every socket operation's timeout shrunk to the calling thread's deadline."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        # Name resolution inside connect is not bounded by a socket timeout (getaddrinfo
        # blocks); NKS and chat hosts are resolved by the system resolver's own limits.
        kwargs["timeout"] = _timeout(kwargs.get("timeout"), httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        kwargs["timeout"] = _timeout(kwargs.get("timeout"), httpcore.ConnectTimeout)
        return _DeadlineStream(self._backend.connect_unix_socket(*args, **kwargs))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _DeadlineTransport(httpx.HTTPTransport):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # httpx builds its connection pool without a way to pass a network backend; the
        # pool (direct or through a proxy) takes it from this attribute for every connection.
        pool = self._pool
        pool._network_backend = _DeadlineBackend(pool._network_backend)  # type: ignore[union-attr]


def environment_proxy(url: str) -> str | None:
    """The proxy the environment (``HTTPS_PROXY``, ``NO_PROXY``...) names for ``url``."""
    parts = httpx.URL(url)
    if not parts.host or proxy_bypass(parts.host):
        return None
    return getproxies().get(parts.scheme)


def bounded_client(
    *,
    timeout: httpx.Timeout,
    limits: httpx.Limits | None = None,
    base_url: str = "",
    headers: Mapping[str, str] | None = None,
    proxy: str | None = None,
) -> httpx.Client:
    """An httpx client whose every exchange :func:`send` can bound; redirects never followed.

    ``trust_env`` is off so no proxy transport from the environment replaces the bounded
    one: pass ``proxy`` (``environment_proxy(url)`` for the usual variables) instead.
    """
    transport = _DeadlineTransport(limits=limits or httpx.Limits(), proxy=proxy, trust_env=True)
    return httpx.Client(
        base_url=base_url,
        timeout=timeout,
        headers=dict(headers or {}),
        transport=transport,
        follow_redirects=False,
        trust_env=False,
    )


def send(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    deadline: Deadline,
    max_body: int,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    """Send one request and read its whole answer, within ``deadline`` and ``max_body``.

    Raises :class:`DeadlineExceeded`, :class:`BodyTooLarge`, :class:`UnsupportedEncoding`,
    or httpx's own errors (a refused connection, a per-operation timeout that came first).
    The response returned holds its body, already read.
    """
    request = client.build_request(
        method,
        url,
        headers={**(headers or {}), "Accept-Encoding": "identity"},
        content=content,
    )
    # The wait for a free pooled connection is not a socket operation: bound it here.
    timeouts = request.extensions.get("timeout", {})
    request.extensions["timeout"] = {
        stage: deadline.bound(value) for stage, value in timeouts.items()
    }
    with _bounded_by(deadline):
        try:
            response = client.send(request, stream=True)
            try:
                body = _read_body(response, deadline, max_body)
            finally:
                response.close()
        except httpx.TimeoutException:
            if deadline.expired:
                raise DeadlineExceeded(deadline.seconds) from None
            raise
    return httpx.Response(
        response.status_code,
        headers=response.headers,
        content=body,
        request=request,
        extensions=response.extensions,
    )


def _read_body(response: httpx.Response, deadline: Deadline, max_body: int) -> bytes:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        # Decompressing is where a bomb goes off: it is refused before a byte is read.
        raise UnsupportedEncoding(encoding)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        raise BodyTooLarge(max_body)
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_raw(READ_CHUNK):
        size += len(chunk)
        if size > max_body:
            raise BodyTooLarge(max_body)
        chunks.append(chunk)
        if deadline.expired:
            raise DeadlineExceeded(deadline.seconds)
    return b"".join(chunks)
