"""A deadline for libraries that only time out each read: shut the sockets when time is up.

smtplib, `requests` and urllib3 bound each blocking call, not the whole exchange, so a server
that answers a byte every few seconds never trips a timeout. A `SocketAlarm` runs a timer
for the exchange; the sockets it has been handed are shut down when it rings, which wakes a
blocked read at once, and the caller then turns the error into "took too long in total".
Plain Python: the API clients may use it (it knows no Django).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class SocketAlarm:
    """`with SocketAlarm(seconds) as alarm:` … `alarm.watch(sock)` for each socket opened."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True

    def __enter__(self) -> SocketAlarm:
        self._timer.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` when the alarm rings (at once, if it has rung already)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                shut(sock)

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                shut(sock)


def shut(sock: socket.socket) -> None:
    """Shut a socket down for both directions; already closed is fine (nothing waits on it).

    socket.socket's own shutdown even for a TLS socket: closing the TLS layer would race the
    thread that is reading from it.
    """
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
