"""Fixtures for alert tests: a frozen clock, evaluation as beat runs it, a real SMTP server.

Time starts at tests.leases.factories.NOW and moves only when a test says so. Mail goes to
Django's in-memory outbox (pytest-django's `mailoutbox`) unless a test uses `smtp_server`,
a real aiosmtpd server on a fixed port that can be stopped and started again.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
import time_machine
from aiosmtpd.controller import Controller
from django.db import connection
from django.utils import timezone

from alerts import delivery, evaluation
from alerts.models import Notification
from leases.models import KubeCluster
from tests.leases.factories import NOW

ONCALL = "oncall@example.org"


@pytest.fixture(autouse=True)
def alert_settings(settings: Any) -> Any:
    settings.ALERT_EMAIL_TO = [ONCALL]
    settings.DASHBOARD_URL = "https://dash.example.org"
    settings.DEFAULT_FROM_EMAIL = "Lease dashboard <alerts@dash.example.org>"
    return settings


@pytest.fixture
def clock() -> Iterator[Clock]:
    with time_machine.travel(NOW, tick=False) as traveller:
        yield Clock(traveller)


@dataclass
class Clock:
    traveller: Any

    def now(self) -> datetime:
        return timezone.now()

    def advance(self, seconds: float) -> datetime:
        self.traveller.shift(timedelta(seconds=seconds))
        return timezone.now()


def keep_fresh(*clusters: KubeCluster) -> None:
    """The watchers of these clusters wrote just now (as a live watcher does twice a second)."""
    KubeCluster.objects.filter(pk__in=[c.pk for c in clusters]).update(
        connected=True,
        last_flush_at=timezone.now(),
        last_event_at=timezone.now(),
        leases_as_of=timezone.now(),
        nodes_as_of=timezone.now(),
    )


@contextmanager
def watching(*clusters: KubeCluster, every: float = 0.05) -> Iterator[None]:
    """A live watcher's part, for tests with a real worker: the clusters' data is proved
    current every `every` seconds (leases.freshness), from a thread with its own database
    connection (the test must be transactional)."""
    stop = threading.Event()

    def prove() -> None:
        try:
            while not stop.wait(every):
                keep_fresh(*clusters)
        finally:
            connection.close()

    thread = threading.Thread(target=prove, daemon=True)
    keep_fresh(*clusters)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def evaluate(*fresh: KubeCluster) -> evaluation.EvaluationSummary:
    """One beat tick: evaluate and plan, then send what is due (as the sweep would)."""
    keep_fresh(*fresh)
    summary = evaluation.run_evaluation(dispatch=False)
    assert summary is not None
    assert summary.errors == []
    delivery.send_due_notifications()
    return summary


@pytest.fixture
def run_evaluation() -> Callable[..., evaluation.EvaluationSummary]:
    return evaluate


def notifications(kind: str | None = None) -> list[Notification]:
    rows = Notification.objects.order_by("created_at", "id")
    return list(rows.filter(kind=kind) if kind else rows)


# --- A real SMTP server ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ReceivedMail:
    mail_from: str
    recipients: list[str]
    message: EmailMessage


@dataclass
class SmtpServer:
    """aiosmtpd on a fixed port; `stop()` then `start()` is an outage and a recovery."""

    port: int = field(default_factory=free_port)
    received: list[ReceivedMail] = field(default_factory=list)
    # While `stall` is set, the server holds the client at `stall_phase` ("RCPT": before the
    # message is sent; "DATA": the message is in, the "250 OK" not yet answered).
    stall: threading.Event = field(default_factory=threading.Event)
    stall_phase: str = "DATA"
    stalled: threading.Event = field(default_factory=threading.Event)
    refuse_recipients: bool = False
    controller: Controller | None = None

    async def _hold(self, phase: str) -> None:
        if self.stall_phase != phase:
            return
        if self.stall.is_set():
            self.stalled.set()
        while self.stall.is_set():
            await asyncio.sleep(0.02)

    async def handle_RCPT(
        self, server: object, session: object, envelope: Any, address: str, options: list[str]
    ) -> str:
        if self.refuse_recipients:
            return "550 5.1.1 No such user here"
        await self._hold("RCPT")
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
        message = message_from_bytes(envelope.original_content, policy=policy.default)
        self.received.append(
            ReceivedMail(envelope.mail_from, list(envelope.rcpt_tos), message)  # type: ignore[arg-type]
        )
        # Stalling here: the message is taken (queued for delivery), the reply not yet sent.
        await self._hold("DATA")
        return "250 Message accepted for delivery"

    def start(self) -> None:
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None


@pytest.fixture
def smtp_server(settings: Any) -> Iterator[SmtpServer]:
    server = SmtpServer()
    server.start()
    settings.EMAIL_BACKEND = "alerts.smtp.DeadlineEmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = server.port
    settings.EMAIL_TIMEOUT = 5
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    try:
        yield server
    finally:
        server.stall.clear()
        server.stop()
