"""A stuck NKS poll: stopped by its time limit, alerted on, and never in alerting's way.

NKS is the fake over real HTTP, made to stall (it answers after a minute). Celery's soft time
limit is what billiard's pool does: the pool sends SIGUSR1 to the worker process and its
handler raises ``SoftTimeLimitExceeded`` in the task's thread; the tests install that very
handler and send the signal.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from billiard.pool import soft_timeout_sighandler
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.core import mail
from django.db import connections
from django.utils import timezone

from alerts.models import AlertRule, Incident, IncidentState, Rule
from alerts.tasks import evaluate_alerts
from dashboard.celery import ALERTS_QUEUE, app
from fakes.nks import FakeNks
from nks.models import NksAccount
from nks.poller import poll_account, poll_lock
from nks.services import register_nks_account
from tests.alerts.conftest import Clock, evaluate

STALL_SECONDS = 60.0
KEY = f"{Rule.NKS_POLL_STUCK}:demo"


@pytest.fixture
def fake_nks() -> Iterator[FakeNks]:
    with FakeNks(scenario="demo") as fake:
        yield fake


@pytest.fixture
def poll_settings(settings: Any) -> Any:
    """Client timeouts longer than the stall's test: only the time limit can stop the poll."""
    from nks.accounts import forget_clients

    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"test-stuck-{uuid.uuid4().hex}"},
    }
    settings.NKS_HTTP_TIMEOUT = 120
    settings.NKS_HTTP_RETRIES = 0
    settings.NKS_POLL_WORKERS = 4
    settings.ALERT_GROUP_SECONDS = 0
    forget_clients()
    yield settings
    forget_clients()


@pytest.fixture
def account(fake_nks: FakeNks, poll_settings: Any, db: None) -> NksAccount:
    registered, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    return registered


@pytest.fixture
def soft_time_limit() -> Iterator[Callable[[float], None]]:
    """`arm(seconds)`: the soft time limit of the task running in this (the main) thread."""
    previous = signal.signal(signal.SIGUSR1, soft_timeout_sighandler)
    timers: list[threading.Timer] = []

    def arm(seconds: float) -> None:
        timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGUSR1))
        timers.append(timer)
        timer.start()

    try:
        yield arm
    finally:
        for timer in timers:
            timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


def stuck_incident() -> Incident | None:
    return Incident.objects.filter(key=KEY, resolved_at__isnull=True).first()


# --- The time limit stops a stalled poll -------------------------------------------------------


@pytest.mark.parametrize(
    "stalled_path",
    [
        pytest.param("/v1/clusters", id="the-cluster-list"),
        # The concurrent part: every cluster's detail stalls inside the fetch's thread pool.
        pytest.param("/v1/clusters/[^/]+", id="every-cluster-detail"),
    ],
)
def test_a_stalled_poll_stops_at_its_soft_limit_frees_the_lock_and_says_so_on_the_account(
    account: NksAccount,
    fake_nks: FakeNks,
    soft_time_limit: Callable[[float], None],
    stalled_path: str,
) -> None:
    fake_nks.delay_next(stalled_path, STALL_SECONDS, times=50, method="GET")
    soft_time_limit(1.0)
    started = time.monotonic()
    result = poll_account(account.pk)
    took = time.monotonic() - started

    # Stopped at once, not after the stalled calls (each would wait out its own timeout).
    assert took < 5, took
    assert not result.ok
    account.refresh_from_db()
    assert account.last_error == (
        "The poll ran over 120 s and was stopped (NKS_POLL_TIME_LIMIT_SECONDS): NKS answers too"
        " slowly or not at all. The next poll tries again."
    )
    assert account.last_error_kind == "timeout"
    assert account.consecutive_failures == 1 and account.last_poll_at is not None
    assert account.poll_started_at is None
    # The lock is free: the next poll (NKS answering again) runs and succeeds.
    lock = poll_lock(account.pk)
    assert lock.acquire()
    lock.release()
    fake_nks.clear_faults()
    assert poll_account(account.pk).ok
    account.refresh_from_db()
    assert account.last_error == "" and account.poll_started_at is None


# --- nks_poll_stuck: judged by the account row -------------------------------------------------


def test_a_poll_running_past_twice_its_time_limit_opens_an_incident_until_a_poll_completes(
    clock: Clock, account: NksAccount
) -> None:
    started = clock.now()
    NksAccount.objects.filter(pk=account.pk).update(poll_started_at=started)
    clock.advance(239)
    evaluate()
    assert stuck_incident() is None  # 2 x 120 s is the default threshold

    clock.advance(2)
    evaluate()
    incident = stuck_incident()
    assert incident is not None and incident.state == IncidentState.FIRING
    assert incident.since == started
    assert incident.title == "NKS account demo: a poll is stuck"
    facts = {item["label"]: item for item in incident.details["facts"]}
    assert facts["Poll time limit"]["text"] == "2 min"
    assert facts["Threshold"]["text"] == "4 min"

    # Its worker died mid-poll; the next poll starts (after the lock's TTL): a start proves
    # nothing, so the incident stays open...
    clock.advance(60)
    NksAccount.objects.filter(pk=account.pk).update(poll_started_at=clock.now())
    evaluate()
    assert stuck_incident() is not None
    # ...until that poll completes.
    NksAccount.objects.filter(pk=account.pk).update(
        poll_started_at=None, last_poll_at=clock.now() - timedelta(seconds=1)
    )
    evaluate()
    assert stuck_incident() is None
    resolved = Incident.objects.get(key=KEY)
    assert resolved.state == IncidentState.RESOLVED
    assert resolved.details["resolution_message"]["id"] == (
        "a poll completed (or the account was disabled)"
    )


def test_the_rule_row_sets_the_threshold_and_a_disabled_account_is_not_judged(
    clock: Clock, account: NksAccount
) -> None:
    AlertRule.objects.update_or_create(rule=Rule.NKS_POLL_STUCK, defaults={"grace_seconds": 30})
    NksAccount.objects.filter(pk=account.pk).update(poll_started_at=clock.now())
    clock.advance(31)
    evaluate()
    assert stuck_incident() is not None
    NksAccount.objects.filter(pk=account.pk).update(enabled=False)
    evaluate()
    assert stuck_incident() is None


def test_a_poll_stopped_by_its_limit_resolves_the_incident(
    clock: Clock, account: NksAccount
) -> None:
    started = clock.now()
    NksAccount.objects.filter(pk=account.pk).update(poll_started_at=started)
    clock.advance(300)
    evaluate()
    assert stuck_incident() is not None
    # What the poller writes when the stuck poll is finally stopped: its start is recorded
    # as the last poll's, and the running mark goes.
    NksAccount.objects.filter(pk=account.pk).update(poll_started_at=None, last_poll_at=started)
    evaluate()
    assert stuck_incident() is None


# --- End to end: the alerts worker alerts while the poll blocks its process -------------------


@pytest.fixture
def alerts_worker(private_broker: None) -> Iterator[None]:
    """A real Celery worker consuming only the `alerts` queue; nothing consumes `default`, as
    when every default process is held by a stalled poll."""

    def close(**_: object) -> None:
        connections.close_all()

    task_postrun.connect(close, weak=False)
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, queues=[ALERTS_QUEUE], loglevel="WARNING"
        ):
            yield
    finally:
        task_postrun.disconnect(close)


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@pytest.mark.django_db(transaction=True)
def test_while_a_stalled_poll_holds_its_process_the_alerts_queue_opens_the_incident_and_mails(
    fake_nks: FakeNks,
    poll_settings: Any,
    soft_time_limit: Callable[[float], None],
    alerts_worker: None,
    mailoutbox: list[mail.EmailMessage],
) -> None:
    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    AlertRule.objects.update_or_create(rule=Rule.NKS_POLL_STUCK, defaults={"grace_seconds": 1})
    fake_nks.delay_next("/v1/clusters", STALL_SECONDS, method="GET")
    seen: dict[str, Any] = {}

    def beat_and_watch() -> None:
        # Beat's part, while the poll below holds the main thread: evaluation, sent by name
        # to where beat sends it, is run by the alerts worker.
        try:
            assert wait_for(
                lambda: NksAccount.objects.filter(poll_started_at__isnull=False).exists(), 10
            )
            time.sleep(1.2)
            evaluate_alerts.apply_async(expires=30)
            seen["opened"] = wait_for(
                lambda: Incident.objects.filter(key=KEY, state=IncidentState.FIRING).exists(), 15
            )
            seen["mailed"] = wait_for(lambda: len(mailoutbox) >= 1, 15)
            seen["poll_still_running"] = NksAccount.objects.filter(
                poll_started_at__isnull=False
            ).exists()
        finally:
            connections.close_all()
            # The pool's part: the poll's soft time limit.
            soft_time_limit(0)

    watcher = threading.Thread(target=beat_and_watch)
    watcher.start()
    result = poll_account(account.pk)  # stalls until the soft limit stops it
    watcher.join(timeout=30)

    assert seen == {"opened": True, "mailed": True, "poll_still_running": True}
    assert "NKS account demo: a poll is stuck" in mailoutbox[0].subject
    assert not result.ok and "was stopped" in result.error
    # The stopped poll counts as a completed one: the next evaluation resolves the incident.
    evaluate_alerts.apply_async(expires=30)
    assert wait_for(lambda: not Incident.objects.filter(key=KEY, resolved_at=None).exists(), 15)
    assert timezone.now() - Incident.objects.get(key=KEY).resolved_at < timedelta(seconds=30)
