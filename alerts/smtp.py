"""SMTP with a total deadline: Django's SMTP backend, but one session can never outlast it.

smtplib bounds each blocking call by EMAIL_TIMEOUT, not the session: a server that answers
one byte every few seconds keeps every `recv` under the timeout and holds the sender (and the
alerts worker running it) for hours. Here a timer shuts the session's socket down once
EMAIL_DEADLINE_SECONDS have passed since the session began, whatever it was waiting for; the
blocked read then fails at once and the notification is retried like any other outage.
"""

from __future__ import annotations

import contextlib
import smtplib
import socket
import threading
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.backends.smtp import EmailBackend


class SmtpDeadlineExceeded(smtplib.SMTPException):
    """The session ran over EMAIL_DEADLINE_SECONDS and was cut (a retry may succeed)."""


class DeadlineEmailBackend(EmailBackend):
    """`EmailBackend` whose sessions (connect, greeting, every command, DATA) share one deadline."""

    def __init__(self, *args: Any, deadline: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = float(deadline or settings.EMAIL_DEADLINE_SECONDS)
        self._socket_lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._expired = False

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        base = super().connection_class
        backend = self

        class _Recorded(base):  # type: ignore[valid-type,misc]
            # The socket is recorded as soon as it exists: the greeting is read inside
            # smtplib.SMTP's constructor, before the backend holds `self.connection`.
            def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
                sock = super()._get_socket(host, port, timeout)
                backend._record(sock)
                return sock

        return _Recorded

    def _record(self, sock: socket.socket) -> None:
        with self._socket_lock:
            self._socket = sock
            if self._expired:
                _shut(sock)

    def _expire(self) -> None:
        with self._socket_lock:
            self._expired = True
            if self._socket is not None:
                _shut(self._socket)

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        with self._socket_lock:
            self._expired = False
            self._socket = None
        timer = threading.Timer(self.deadline, self._expire)
        timer.daemon = True
        timer.start()
        try:
            sent = super().send_messages(email_messages)
        except (smtplib.SMTPException, OSError) as error:
            if self._expired:
                raise SmtpDeadlineExceeded(
                    f"the SMTP session took longer than {self.deadline:g} s in total and was cut"
                ) from error
            raise
        finally:
            timer.cancel()
        return sent


def _shut(sock: socket.socket) -> None:
    # Already closed is fine: then nothing is waiting on it.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
