"""The evaluation scheduled for a lease's expiry plus grace (alerts.expiry_schedule).

The clock tests freeze time and call the tasks where the worker would; the worker tests run
a real Celery worker (a thread, a private broker) and wait in real time, a few seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.core.cache import caches
from django.utils import timezone

from alerts import delivery, evaluation, expiry_schedule, tasks
from alerts.models import AlertRule, EvaluatorStatus, Incident, IncidentState, Notification, Rule
from dashboard.celery import app
from leases.models import KubeCluster, Lease
from tests.alerts.conftest import Clock, evaluate, keep_fresh, watching
from tests.conftest import reset_celery_connections
from tests.leases.factories import NOW, known_until, make_cluster, make_lease

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_schedule_left() -> Iterator[None]:
    """Redis outlives a test's transaction: a schedule left by another test must not count."""
    caches["locks"].delete(expiry_schedule.SCHEDULE_KEY)
    yield
    caches["locks"].delete(expiry_schedule.SCHEDULE_KEY)


def current_token() -> str:
    current = caches["locks"].get(expiry_schedule.SCHEDULE_KEY)
    assert isinstance(current, dict)
    return str(current["token"])


def renew(lease: Lease, at: datetime) -> None:
    """What the ingest writes for a renewal."""
    duration = lease.lease_duration_seconds or 0
    Lease.objects.filter(pk=lease.pk).update(
        renew_time=at, observed_at=at, expires_at=at + timedelta(seconds=duration)
    )


# --- Which moment -----------------------------------------------------------------------------


def test_the_next_due_moment_is_the_earliest_expiry_plus_grace_of_a_held_leader_lease(
    clock: Clock,
) -> None:
    prod = make_cluster("prod")
    # Expires at NOW+2, alerts one more lease duration later: NOW+5.
    make_lease(prod, "kube-scheduler", renewed_ago=1, duration=3)
    make_lease(prod, "kube-controller-manager", renewed_ago=0, duration=4)  # NOW+8
    # Not leader leases, released, already due, or due beyond two ticks: none of them counts.
    make_lease(prod, "node-1", namespace="kube-node-lease", renewed_ago=1, duration=1)
    make_lease(prod, "cloud-controller-manager", holder="", renewed_ago=1, duration=1)
    make_lease(prod, "ingress-leader", namespace="ingress", renewed_ago=10, duration=3)
    make_lease(prod, "long-leader", namespace="apps", renewed_ago=0, duration=15)
    known_until(prod, NOW)  # the data vouches for every due moment up to now

    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=5)
    known_until(prod, NOW + timedelta(seconds=5))
    assert expiry_schedule.next_lease_due(NOW + timedelta(seconds=5)) == NOW + timedelta(seconds=8)
    known_until(prod, NOW)

    # A fixed grace on the rule replaces "one more lease duration".
    AlertRule.objects.filter(rule=Rule.LEASE_EXPIRED).update(grace_seconds=1)
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=3)
    AlertRule.objects.filter(rule=Rule.LEASE_EXPIRED).update(enabled=False)
    assert expiry_schedule.next_lease_due(NOW) is None


def test_leaders_of_one_cluster_due_close_together_are_evaluated_together_and_mailed_once(
    clock: Clock, private_broker: None, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod, staging = (
        make_cluster("prod", leases_as_of=NOW),
        make_cluster("staging", leases_as_of=NOW),
    )
    make_lease(prod, "kube-scheduler", renewed_ago=1, duration=3)  # due NOW+5
    make_lease(prod, "kube-controller-manager", renewed_ago=0, duration=3)  # NOW+6
    make_lease(prod, "cloud-controller-manager", renewed_ago=0, duration=4)  # NOW+8
    make_lease(staging, "kube-scheduler", renewed_ago=0.5, duration=3)  # NOW+5.5

    # The second prod leader, 1 s after the first: both at NOW+6. The third, 3 s after the
    # first, and the other cluster's leader do not hold the first one back.
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=6)

    clock.advance(6)
    evaluate(prod, staging)
    assert Incident.objects.filter(cluster="prod", state=IncidentState.FIRING).count() == 2
    assert sorted(message.subject for message in mailoutbox) == [
        "[FIRING] prod: kube-system/kube-scheduler lease expired (+1 more)",
        "[FIRING] staging: kube-system/kube-scheduler lease expired",
    ]


def node_lease(cluster: KubeCluster, name: str, expires_in: float, duration: int = 40) -> Lease:
    renewed = NOW + timedelta(seconds=expires_in - duration)
    return make_lease(
        cluster,
        name,
        namespace="kube-node-lease",
        renewed_ago=(NOW - renewed).total_seconds(),
        duration=duration,
    )


def test_a_cluster_whose_nodes_stop_is_due_when_its_first_node_lease_is_past_the_grace(
    clock: Clock, settings: Any
) -> None:
    settings.ALERT_NODE_GRACE_SECONDS = 2
    prod, staging = make_cluster("prod"), make_cluster("staging")
    node_lease(prod, "prod-1", expires_in=3)  # due NOW+5
    node_lease(prod, "prod-2", expires_in=3.5)
    node_lease(prod, "prod-3", expires_in=30)  # renewing: beyond the horizon
    node_lease(staging, "staging-1", expires_in=6)  # due NOW+8
    known_until(prod, NOW)
    known_until(staging, NOW)
    # prod's two nodes are due within COALESCE_SECONDS: evaluated together, at the second.
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=5.5)
    known_until(prod, NOW + timedelta(seconds=5.5))
    known_until(staging, NOW + timedelta(seconds=5.5))
    assert expiry_schedule.next_lease_due(NOW + timedelta(seconds=5.5)) == NOW + timedelta(
        seconds=8
    )
    AlertRule.objects.filter(rule=Rule.NODE_HEARTBEATS_EXPIRED).update(grace_seconds=0)
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=3.5)
    AlertRule.objects.filter(rule=Rule.NODE_HEARTBEATS_EXPIRED).update(enabled=False)
    assert expiry_schedule.next_lease_due(NOW) is None


def test_a_node_threshold_makes_the_cluster_due_at_its_nth_expired_node(clock: Clock) -> None:
    AlertRule.objects.filter(rule=Rule.NODE_HEARTBEATS_EXPIRED).update(threshold=3)
    prod = make_cluster("prod", leases_as_of=NOW)
    node_lease(prod, "prod-1", expires_in=-4)  # expired already: counts toward the three
    node_lease(prod, "prod-2", expires_in=2)
    node_lease(prod, "prod-3", expires_in=7)  # the third: the incident opens here
    node_lease(prod, "prod-4", expires_in=8)  # within COALESCE_SECONDS: evaluated with it
    node_lease(prod, "prod-5", expires_in=11)
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=8)
    AlertRule.objects.filter(rule=Rule.NODE_HEARTBEATS_EXPIRED).update(threshold=6)
    assert expiry_schedule.next_lease_due(NOW) is None


def test_a_hundred_stopped_nodes_ask_for_one_evaluation_and_an_open_incident_for_none(
    clock: Clock, private_broker: None, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod = make_cluster("prod")
    keep_fresh(prod)
    for index in range(100):
        node_lease(prod, f"node-{index:03}", expires_in=1 + index / 20)  # NOW+1 .. NOW+5.95
    # The first at NOW+1, with those due within COALESCE_SECONDS of it: NOW+2.5, 31 nodes.
    assert expiry_schedule.next_lease_due(NOW) == NOW + timedelta(seconds=2.5)
    clock.advance(2.5)
    evaluate(prod)
    incident = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED)
    assert incident.state == IncidentState.FIRING
    assert [message.subject for message in mailoutbox] == [
        "[FIRING] prod: 31 nodes stopped heart-beating"
    ]
    # The incident is open: the other 69 dues are the periodic tick's to add, not 69 runs.
    assert expiry_schedule.next_lease_due(timezone.now()) is None


def test_a_disabled_cluster_schedules_nothing(clock: Clock) -> None:
    make_lease(make_cluster("prod", enabled=False), "kube-scheduler", renewed_ago=1, duration=3)
    assert expiry_schedule.next_lease_due(NOW) is None


# --- Renewals, outages and double runs (frozen clock) ----------------------------------------


def test_a_renewal_supersedes_the_schedule_and_a_stale_one_that_fires_opens_nothing(
    clock: Clock, private_broker: None, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod = make_cluster("prod", leases_as_of=NOW)
    lease = make_lease(prod, "kube-scheduler", renewed_ago=1, duration=3)
    assert expiry_schedule.schedule_next_evaluation() == NOW + timedelta(seconds=5)
    first = current_token()

    # Scheduling again for the same moment queues nothing new.
    assert expiry_schedule.schedule_next_evaluation() == NOW + timedelta(seconds=5)
    assert current_token() == first

    # The leader renews; the next evaluation moves the schedule and the first one is void.
    clock.advance(2)
    renew(lease, timezone.now())
    keep_fresh(prod)
    assert evaluation.run_evaluation() is not None
    assert not expiry_schedule.is_current(first)
    second = current_token()

    # The first schedule's moment passes: its task does nothing at all.
    clock.advance(3.5)
    keep_fresh(prod)
    runs = EvaluatorStatus.objects.get().last_started_at
    tasks.evaluate_due(first)
    assert EvaluatorStatus.objects.get().last_started_at == runs

    # Had nothing evaluated in between, the stale schedule runs an ordinary evaluation: the
    # renewed lease is not expired, so it opens nothing and mails nobody.
    tasks.evaluate_due(second)
    assert EvaluatorStatus.objects.get().last_started_at == timezone.now()
    assert not Incident.objects.exists()
    delivery.send_due_notifications()
    assert mailoutbox == []


def test_a_scheduled_run_and_the_periodic_tick_at_the_same_moment_mail_once(
    clock: Clock, private_broker: None, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod = make_cluster("prod", leases_as_of=NOW)
    make_lease(prod, "kube-scheduler", renewed_ago=1, duration=3)
    assert expiry_schedule.schedule_next_evaluation() == NOW + timedelta(seconds=5)
    token = current_token()

    clock.advance(5)
    keep_fresh(prod)
    tasks.evaluate_due(token)
    tasks.evaluate_alerts()
    tasks.evaluate_due(token)  # delivered twice by the broker, say
    delivery.send_due_notifications()

    incident = Incident.objects.get()
    assert incident.state == IncidentState.FIRING and incident.opened_at == timezone.now()
    assert Notification.objects.count() == 1
    assert [message.subject for message in mailoutbox] == [
        "[FIRING] prod: kube-system/kube-scheduler lease expired"
    ]


@pytest.fixture
def broker_down() -> Iterator[None]:
    """The broker refuses connections (a Redis on a port nobody listens on)."""
    saved = (app.conf.broker_url, app.conf.broker_transport, app.conf.broker_transport_options)
    app.conf.broker_url = "redis://127.0.0.1:1/0"
    app.conf.broker_transport = None
    app.conf.broker_transport_options = {"socket_connect_timeout": 1}
    reset_celery_connections()
    try:
        yield
    finally:
        app.conf.broker_url, app.conf.broker_transport, app.conf.broker_transport_options = saved
        reset_celery_connections()


def test_during_a_broker_outage_evaluation_goes_on_and_the_periodic_tick_opens_it(
    clock: Clock, broker_down: None, mailoutbox: list[mail.EmailMessage], caplog: Any
) -> None:
    prod = make_cluster("prod")
    make_lease(prod, "kube-scheduler", renewed_ago=1, duration=3)

    started = time.monotonic()
    summary = evaluation.run_evaluation()
    assert summary is not None and summary.errors == []
    assert time.monotonic() - started < 3, "the evaluation must not stall on the broker"
    assert caches["locks"].get(expiry_schedule.SCHEDULE_KEY) is None
    assert "could not schedule the evaluation" in caplog.text

    # No scheduled run comes; the periodic tick, once due, opens it and mails once.
    clock.advance(5)
    evaluate(prod)
    assert Incident.objects.get().state == IncidentState.FIRING
    assert len(mailoutbox) == 1


# --- A real worker, real time ----------------------------------------------------------------


def leader_lease(cluster: KubeCluster, renewed: datetime, duration: int) -> Lease:
    return make_lease(
        cluster,
        "kube-scheduler",
        renew_time=renewed,
        observed_at=renewed,
        expires_at=renewed + timedelta(seconds=duration),
        duration=duration,
    )


def wait_until(check: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


@pytest.mark.django_db(transaction=True)
def test_a_worker_evaluates_at_expiry_plus_grace_and_mails_without_waiting_for_the_tick(
    celery_worker: None, mailoutbox: list[mail.EmailMessage], settings: Any
) -> None:
    settings.ALERT_EVAL_SECONDS = 30  # no tick would come in time
    prod = make_cluster("prod")
    keep_fresh(prod)
    renewed = timezone.now()
    leader_lease(prod, renewed, duration=1)
    due = renewed + timedelta(seconds=2)

    assert evaluation.run_evaluation() is not None  # the tick that sees the lease renewing
    assert not Incident.objects.exists()

    with watching(prod):
        opened = wait_until(lambda: Incident.objects.filter(state=IncidentState.FIRING).exists(), 5)
    assert opened
    incident = Incident.objects.get()
    assert incident.opened_at is not None
    assert due <= incident.opened_at < due + timedelta(seconds=1)
    assert wait_until(lambda: len(mailoutbox) == 1, 5)
    time.sleep(0.5)
    assert [message.subject for message in mailoutbox] == [
        "[FIRING] prod: kube-system/kube-scheduler lease expired"
    ]


@pytest.mark.django_db(transaction=True)
def test_a_worker_evaluates_at_a_node_lease_expiry_and_mails_without_waiting_for_the_tick(
    celery_worker: None, mailoutbox: list[mail.EmailMessage], settings: Any
) -> None:
    settings.ALERT_EVAL_SECONDS = 30  # no tick would come in time
    settings.ALERT_NODE_GRACE_SECONDS = 1
    prod = make_cluster("prod")
    keep_fresh(prod)
    renewed = timezone.now()
    make_lease(
        prod,
        "prod-pool-a-1",
        namespace="kube-node-lease",
        renew_time=renewed,
        observed_at=renewed,
        expires_at=renewed + timedelta(seconds=1),
        duration=1,
    )
    due = renewed + timedelta(seconds=2)

    assert evaluation.run_evaluation() is not None  # the tick that sees the node renewing
    assert not Incident.objects.exists()

    with watching(prod):
        opened = wait_until(lambda: Incident.objects.filter(state=IncidentState.FIRING).exists(), 5)
    assert opened
    incident = Incident.objects.get()
    assert incident.rule == Rule.NODE_HEARTBEATS_EXPIRED
    assert incident.opened_at is not None
    assert due <= incident.opened_at < due + timedelta(seconds=1)
    assert wait_until(lambda: len(mailoutbox) == 1, 5)
    assert mailoutbox[0].subject == "[FIRING] prod: 1 node stopped heart-beating"


@pytest.mark.django_db(transaction=True)
def test_a_worker_does_nothing_for_a_schedule_a_renewal_superseded(
    celery_worker: None, mailoutbox: list[mail.EmailMessage], settings: Any
) -> None:
    settings.ALERT_EVAL_SECONDS = 30
    prod = make_cluster("prod")
    keep_fresh(prod)
    lease = leader_lease(prod, timezone.now(), duration=1)
    assert evaluation.run_evaluation() is not None
    first = current_token()

    # Renewed half a second later, and evaluated: the schedule moves half a second on.
    time.sleep(0.5)
    renew(lease, timezone.now())
    assert evaluation.run_evaluation() is not None
    assert not expiry_schedule.is_current(first)

    # The leader keeps renewing past both moments: no incident, no mail.
    for _ in range(6):
        time.sleep(0.5)
        renew(lease, timezone.now())
    assert not Incident.objects.exists()
    assert mailoutbox == []
