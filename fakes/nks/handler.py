"""The HTTP side of the fake NKS: reads a request, carries out an injected fault if one
matches, and otherwise answers through `routes`."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fakes.nks.routes import answer, json_bytes

if TYPE_CHECKING:
    from fakes.nks.server import FakeNks

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    # stop() must not wait for a handler sleeping in an injected delay or a keep-alive read.
    block_on_close = False
    # The benchmark opens dozens of connections at once; the default backlog of 5 would make
    # the kernel drop SYNs and the client wait a second to retransmit.
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], fake: FakeNks) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def close_open_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.open_connections)
        for connection in connections:
            # OSError: the peer closed it already.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive, so the client's connection pool is really exercised.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms per request).
    disable_nagle_algorithm = True
    server_version = "FakeNKS/1.0"
    sys_version = ""
    server: HttpServer

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib prints every request to stderr; the demo's console has better uses.
        logger.debug("fake NKS: " + format, *args)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return b""
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        raw_body = self._read_body()
        if fake.latency > 0:
            fake.sleep(fake.latency)
        fault = fake.take_fault(method, path)
        if fault is not None and fault.action == "delay":
            fake.sleep(fault.delay)
            fault = None
        if fault is not None and fault.action == "drop":
            fake.record(method, path, None, self.headers, raw_body)
            self.close_connection = True
            return

        extra_headers: dict[str, str] = {}
        content_type = "application/json"
        if fault is not None and fault.action in ("status", "html"):
            status = fault.status
            body = fault.body or b""
            content_type = fault.content_type
            if fault.retry_after is not None:
                extra_headers["Retry-After"] = fault.retry_after
        else:
            status, payload, extra_headers = answer(
                fake.state, method, path, raw_body, self.headers
            )
            body = json_bytes(payload) if payload is not None else b""
            if fault is not None and fault.action == "truncate":
                body = body[: max(1, len(body) // 2)]
        fake.record(method, path, status, self.headers, raw_body)
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra_headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout is shorter than an injected delay).
            self.close_connection = True
