"""SMTP with a total deadline: Django's SMTP backend, but one session can never outlast it.

smtplib bounds each blocking call by EMAIL_TIMEOUT, not the session: a server that answers
one byte every few seconds keeps every `recv` under the timeout and holds the sender (and the
alerts worker running it) for hours. Here a `SocketAlarm` shuts the session's socket once
EMAIL_DEADLINE_SECONDS have passed since the session began, whatever it was waiting for; the
blocked read then fails at once and the notification is retried like any other outage.
"""

from __future__ import annotations

import smtplib
import socket
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage
from django.core.mail.backends.smtp import EmailBackend

from dashboard.socket_alarm import SocketAlarm


class SmtpDeadlineExceeded(smtplib.SMTPException):
    """The session ran over EMAIL_DEADLINE_SECONDS and was cut (a retry may succeed)."""


class DeadlineEmailBackend(EmailBackend):
    """`EmailBackend` whose sessions (connect, greeting, every command, DATA) share one deadline."""

    def __init__(self, *args: Any, deadline: float | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deadline = float(deadline or settings.EMAIL_DEADLINE_SECONDS)
        self._alarm: SocketAlarm | None = None

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        base = super().connection_class
        backend = self

        class _Watched(base):  # type: ignore[valid-type,misc]
            # The socket is watched as soon as it exists: the greeting is read inside
            # smtplib.SMTP's constructor, before the backend holds `self.connection`.
            def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
                sock = super()._get_socket(host, port, timeout)
                if backend._alarm is not None:
                    backend._alarm.watch(sock)
                return sock

        return _Watched

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        with SocketAlarm(self.deadline) as alarm:
            self._alarm = alarm
            try:
                return super().send_messages(email_messages)
            except (smtplib.SMTPException, OSError) as error:
                if alarm.expired:
                    raise SmtpDeadlineExceeded(
                        f"the SMTP session took longer than {self.deadline:g} s in total and "
                        "was cut"
                    ) from error
                raise
            finally:
                self._alarm = None
