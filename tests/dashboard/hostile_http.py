"""A hostile HTTP server on loopback: it trickles, bloats or gzip-bombs every answer.

Raw sockets, not http.server, so it can send a status line byte by byte, keep a connection
open, and lie about its encoding exactly as a hostile or broken endpoint would.
"""

from __future__ import annotations

import socket
import threading
import time
import zlib
from typing import Self


def gzip_bomb(inflated_mib: int) -> bytes:
    """``inflated_mib`` MiB of zeros, gzip-compressed (about a thousandth of the size)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    parts = [compressor.compress(block) for _ in range(inflated_mib)]
    return b"".join([*parts, compressor.flush()])


class HostileServer:
    """Answers every request per ``mode``:

    * ``trickle``: a 200 whose status line, headers and body come one byte every ``interval``
      (with ``body_only``, the status line and headers at once, then the body so);
    * ``bomb``: a 200 with ``Content-Encoding: gzip`` and ``body`` (a small gzip bomb);
    * ``huge``: a 200 with an identity body of ``size`` bytes, sent as fast as it is read.
    """

    def __init__(
        self,
        mode: str,
        *,
        interval: float = 0.5,
        body: bytes = b"",
        size: int = 0,
        body_only: bool = False,
    ) -> None:
        self.mode = mode
        self.body_only = body_only
        self.interval = interval
        self.body = body
        self.size = size
        self.requests = 0
        self.sent_body_bytes = 0
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        host, port = self._listener.getsockname()
        self.url = f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return
            rest += chunk
        self.requests += 1

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._read_request(conn)
                if self.mode == "trickle":
                    self._trickle(conn)
                elif self.mode == "bomb":
                    head = (
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        f"Content-Encoding: gzip\r\nContent-Length: {len(self.body)}\r\n\r\n"
                    )
                    conn.sendall(head.encode())
                    self._send_body(conn, self.body)
                else:
                    head = (
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n"
                    )
                    conn.sendall(head.encode())
                    chunk = b"[" * 65536
                    left = self.size
                    while left > 0 and not self._stop.is_set():
                        piece = chunk[: min(left, len(chunk))]
                        conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                        self.sent_body_bytes += len(piece)
                        left -= len(piece)
                    conn.sendall(b"0\r\n\r\n")
            except OSError:
                return

    def _send_body(self, conn: socket.socket, body: bytes) -> None:
        for start in range(0, len(body), 65536):
            conn.sendall(body[start : start + 65536])
            self.sent_body_bytes += len(body[start : start + 65536])

    def _trickle(self, conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        answer = b" " * 1000
        if self.body_only:
            conn.sendall(head)
        else:
            answer = head + answer
        for index in range(len(answer)):
            if self._stop.is_set():
                return
            conn.sendall(answer[index : index + 1])
            time.sleep(self.interval)
