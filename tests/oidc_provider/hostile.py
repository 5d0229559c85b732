"""A provider endpoint that misbehaves at the wire: slow, huge or compressed answers.

A real HTTP server in a thread of the test process. Each path is one misbehaviour; the
answers are otherwise what a provider would send, so only the bound on the call can refuse
them (not a parse error).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DRIP_SECONDS = 8.0  # how long a dripping answer lasts in all
DRIP_EVERY = 0.2  # well under any read timeout: only a total deadline stops it
HUGE_BYTES = 2 * 1024 * 1024


class HostileEndpoint:
    """Serves `document` (a JSON object) slowly, hugely or gzipped, by path."""

    def __init__(self) -> None:
        self.document: dict[str, Any] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                behaviour = self.path.strip("/").split("/")[0]
                body = json.dumps(endpoint.document).encode()
                # A broken pipe is the dashboard giving up: that is the point.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    getattr(self, f"answer_{behaviour.replace('-', '_')}")(body)

            do_POST = do_GET

            def answer_drip_headers(self, body: bytes) -> None:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
                for number in range(int(DRIP_SECONDS / DRIP_EVERY)):
                    self.wfile.write(f"X-Drip-{number}: {number}\r\n".encode())
                    self.wfile.flush()
                    time.sleep(DRIP_EVERY)
                self.wfile.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

            def answer_drip_body(self, body: bytes) -> None:
                # No Content-Length: the body ends when the connection does. JSON allows the
                # spaces dripped before its closing brace.
                self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
                self.wfile.write(body[:-1])
                for _ in range(int(DRIP_SECONDS / DRIP_EVERY)):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(DRIP_EVERY)
                self.wfile.write(b"}")

            def answer_huge(self, body: bytes) -> None:
                padded = json.dumps({**endpoint.document, "pad": "x" * HUGE_BYTES}).encode()
                self.send(padded, {})

            def answer_huge_chunked(self, body: bytes) -> None:
                # No Content-Length to check in advance: only counting the bytes stops it.
                padded = json.dumps({**endpoint.document, "pad": "x" * HUGE_BYTES}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for start in range(0, len(padded), 65536):
                    chunk = padded[start : start + 65536]
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")

            def answer_gzip(self, body: bytes) -> None:
                # Compressed although the dashboard asked for identity.
                self.send(gzip.compress(body), {"Content-Encoding": "gzip"})

            def send(self, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def hostile_endpoint() -> Iterator[HostileEndpoint]:
    endpoint = HostileEndpoint()
    thread = threading.Thread(target=endpoint.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()
