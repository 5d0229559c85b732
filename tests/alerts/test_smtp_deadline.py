"""A trickling SMTP server cannot hold the alerts worker: the whole session has a deadline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import DeliveryState, Notification
from tests.alerts.conftest import Clock, SmtpServer, free_port
from tests.alerts.factories import make_incident

pytestmark = pytest.mark.django_db


class TricklingSmtp:
    """Answers like an SMTP server, one byte every `pause` seconds, from `after` on.

    `after` is how many whole reply lines it sends at full speed first: 0 trickles the
    greeting itself; 5 lets the client through EHLO, MAIL and RCPT and trickles DATA's answer.
    """

    REPLIES = (b"220 trickle ESMTP\r\n", b"250 trickle\r\n", b"250 OK\r\n", b"250 OK\r\n")

    def __init__(self, after: int, pause: float = 0.2) -> None:
        self.after = after
        self.pause = pause
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by close()
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                for reply in self.REPLIES[: self.after]:
                    conn.sendall(reply)
                    if reply.startswith(b"220"):
                        continue
                    conn.recv(4096)  # the command this reply answers comes first
                if self.after:
                    conn.recv(4096)
                # From here: an answer that never ends, a byte at a time, each well within
                # EMAIL_TIMEOUT of the last.
                conn.sendall(b"2")
                while not self.stopped.wait(self.pause):
                    conn.sendall(b"5")
            except OSError:
                return

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


@pytest.fixture
def trickle(request: pytest.FixtureRequest, settings: Any) -> Iterator[TricklingSmtp]:
    server = TricklingSmtp(after=request.param)
    settings.EMAIL_BACKEND = "alerts.smtp.DeadlineEmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", server.port
    settings.EMAIL_TIMEOUT = 5  # every single read arrives well within this
    settings.EMAIL_DEADLINE_SECONDS = 2
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("trickle", [0, 1], ids=["greeting", "ehlo-answer"], indirect=True)
def test_a_trickling_smtp_server_is_cut_at_the_session_deadline_and_the_mail_kept(
    clock: Clock, trickle: TricklingSmtp
) -> None:
    make_incident("lease_expired:prod/kube-system/kube-scheduler", cluster="prod")
    (notification_id,) = notifications.plan_notifications(timezone.now(), dispatch=False)

    started = time.monotonic()
    assert delivery.deliver_notification(notification_id) == DeliveryState.PENDING
    elapsed = time.monotonic() - started

    assert 1.5 <= elapsed < 4, f"the session lasted {elapsed:.1f} s against a 2 s deadline"
    row = Notification.objects.get(pk=notification_id)
    assert "took longer than 2 s in total" in row.last_error
    assert row.next_attempt_at is not None and row.attempts == 1


def test_after_a_cut_session_the_next_attempt_goes_out_to_a_healthy_server(
    clock: Clock, smtp_server: SmtpServer, settings: Any
) -> None:
    settings.EMAIL_DEADLINE_SECONDS = 2
    make_incident("lease_expired:prod/kube-system/kube-scheduler", cluster="prod")
    (notification_id,) = notifications.plan_notifications(timezone.now(), dispatch=False)
    trickling = TricklingSmtp(after=0)
    try:
        settings.EMAIL_PORT = trickling.port
        assert delivery.deliver_notification(notification_id) == DeliveryState.PENDING
    finally:
        trickling.close()

    settings.EMAIL_PORT = smtp_server.port
    clock.advance(15)
    assert delivery.deliver_notification(notification_id) == DeliveryState.SENT
    assert len(smtp_server.received) == 1


def test_the_claim_outlasts_the_longest_session_a_live_sender_can_have(settings: Any) -> None:
    settings.EMAIL_TIMEOUT, settings.EMAIL_DEADLINE_SECONDS = 10, 60
    assert delivery.claim_seconds(recipients=50) == 60 + 30, "the deadline bounds many steps"
    settings.EMAIL_TIMEOUT = 2
    assert delivery.claim_seconds(recipients=1) == 2 * 9 + 30, "few short steps end sooner"
