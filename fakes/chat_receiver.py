"""A tiny chat/webhook receiver: records what is posted to it and answers as told.

Stands in for a Dooray!, Slack or generic webhook endpoint, over real HTTP, for the tests
and the demo. It can be told to answer with an error a number of times (500 three times,
404, 429 with Retry-After, a redirect) or to take its time, so retries, permanent failures
and timeouts are exercised on the wire. Imports nothing from the product.

    python -m fakes.chat_receiver --port 8091     # prints each message it gets
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True, slots=True)
class Received:
    """One POST as it arrived: the path (with query), its headers and body."""

    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()


@dataclass
class ChatReceiver:
    """Records posts; `answer(...)` queues replies, `delay` holds each reply for a while."""

    host: str = "127.0.0.1"
    port: int = 0
    received: list[Received] = field(default_factory=list)
    # Seconds to wait before answering (a slow endpoint: the sender's timeout fires first).
    delay: float = 0.0
    echo: bool = False
    _answers: deque[Answer] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def answer(
        self,
        status: int,
        *,
        times: int = 1,
        body: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        """The next `times` posts get this answer (then 200 "ok" again)."""
        reply = Answer(status, body.encode(), tuple((headers or {}).items()))
        with self._lock:
            self._answers.extend([reply] * times)

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def start(self) -> ChatReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                received = Received(self.path, dict(self.headers.items()), body)
                with receiver._lock:
                    receiver.received.append(received)
                    reply = receiver._answers.popleft() if receiver._answers else Answer(200, b"ok")
                if receiver.echo:
                    receiver.print_message(received, reply.status)
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the tests and the demo print what matters themselves

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @staticmethod
    def print_message(received: Received, status: int) -> None:
        try:
            shown = json.dumps(received.json, ensure_ascii=False, indent=2)
        except ValueError:
            shown = received.body.decode(errors="replace")
        print(f"--- POST {received.path} -> {status}", flush=True)
        for name in ("X-Dashboard-Timestamp", "X-Dashboard-Signature"):
            if name in received.headers:
                print(f"{name}: {received.headers[name]}", flush=True)
        print(shown, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8091)
    options = parser.parse_args(argv)
    receiver = ChatReceiver(host=options.host, port=options.port, echo=True).start()
    print(f"Listening on {receiver.url('/')} (any path); Ctrl-C stops.", flush=True)
    stopping = threading.Event()
    # honcho and docker stop with SIGTERM, a person with Ctrl-C: both end it cleanly.
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopping.set())
    stopping.wait()
    receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
