"""Every task has the queue and the time limits it was meant to have.

A slow NKS endpoint once held both `default` worker processes for minutes: no evaluation, no
mail, no polls of other accounts, no watcher supervision. These tests walk every registered
task, so a task added without a limit or routed next to the polls fails here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.utils import timezone

from alerts import expiry_schedule
from alerts.evaluation import EVALUATION_LOCK_TTL
from alerts.tasks import evaluate_due
from dashboard.celery import (
    ALERTS_QUEUE,
    DEFAULT_QUEUE,
    KILL_GRACE_SECONDS,
    QUEUES,
    TASK_TIME_LIMITS,
    WATCH_QUEUE,
    app,
)
from dashboard.services import worker_status
from tests.alerts.conftest import keep_fresh
from tests.leases.factories import make_cluster, make_lease

OUR_APPS = ("alerts.", "dashboard.", "leases.", "nks.")
# The queue each task of ours must land on.
EXPECTED_QUEUES = {
    "alerts.tasks.evaluate_alerts": ALERTS_QUEUE,
    "alerts.tasks.evaluate_due": ALERTS_QUEUE,
    "alerts.tasks.send_notification": ALERTS_QUEUE,
    "alerts.tasks.send_due_notifications": ALERTS_QUEUE,
    "alerts.tasks.ping_deadman": ALERTS_QUEUE,
    "leases.tasks.ensure_watchers": ALERTS_QUEUE,
    "leases.tasks.watch_cluster": WATCH_QUEUE,
    "nks.tasks.poll_due_accounts": DEFAULT_QUEUE,
    "nks.tasks.poll_account": DEFAULT_QUEUE,
    "nks.tasks.submit_resize": DEFAULT_QUEUE,
    "nks.tasks.follow_resize": DEFAULT_QUEUE,
    "nks.tasks.sweep_resizes": DEFAULT_QUEUE,
    "dashboard.tasks.prune_history": DEFAULT_QUEUE,
    # Sent to each queue by name (beat's options); on its own, to the default one.
    "dashboard.tasks.record_worker_heartbeat": DEFAULT_QUEUE,
}
# Supervised instead of stopped by a clock (see dashboard.celery).
UNLIMITED = {"leases.tasks.watch_cluster"}


def our_tasks() -> list[Any]:
    app.loader.import_default_modules()
    return [task for name, task in sorted(app.tasks.items()) if name.startswith(OUR_APPS)]


def routed_queue(task_name: str) -> str:
    return app.amqp.router.route({}, task_name)["queue"].name


def test_every_task_of_ours_is_known_to_the_tests_and_the_limits_table() -> None:
    names = {task.name for task in our_tasks()}
    assert names == set(EXPECTED_QUEUES)
    assert names == set(TASK_TIME_LIMITS)


@pytest.mark.parametrize("task_name", sorted(EXPECTED_QUEUES))
def test_each_task_is_routed_to_its_queue(task_name: str) -> None:
    assert routed_queue(task_name) == EXPECTED_QUEUES[task_name]


def test_beat_sends_alerting_and_supervision_to_the_alerts_queue_and_polls_to_default() -> None:
    app.loader.import_default_modules()
    sent = {
        entry["task"]: entry["options"]["queue"]
        for entry in app.conf.beat_schedule.values()
        if entry["task"] != "dashboard.tasks.record_worker_heartbeat"
    }
    assert sent == {
        "leases.tasks.ensure_watchers": ALERTS_QUEUE,
        "nks.tasks.poll_due_accounts": DEFAULT_QUEUE,
        "nks.tasks.sweep_resizes": DEFAULT_QUEUE,
        "dashboard.tasks.prune_history": DEFAULT_QUEUE,
        "alerts.tasks.evaluate_alerts": ALERTS_QUEUE,
        "alerts.tasks.send_due_notifications": ALERTS_QUEUE,
    }


def test_every_queue_gets_a_heartbeat_and_the_overview_watches_every_queue() -> None:
    beats = [
        entry
        for entry in app.conf.beat_schedule.values()
        if entry["task"] == "dashboard.tasks.record_worker_heartbeat"
    ]
    # Run by the queue's own worker, about itself.
    assert sorted((entry["options"]["queue"], entry["args"]) for entry in beats) == sorted(
        (queue, (queue,)) for queue in QUEUES
    )


@pytest.mark.django_db
def test_a_silent_alerts_queue_shows_on_the_overview_and_in_metrics() -> None:
    status = {queue["queue"]: queue for queue in worker_status()}
    assert set(status) == {DEFAULT_QUEUE, ALERTS_QUEUE, WATCH_QUEUE}
    assert status[ALERTS_QUEUE]["silent"] is True


@pytest.mark.django_db
def test_the_evaluation_due_at_a_lease_expiry_is_published_to_the_alerts_queue(
    private_broker: None,
) -> None:
    # alerts.expiry_schedule names its queue (it publishes on a connection of its own), so
    # the route alone would not take it there: read what lands on the broker.
    caches["locks"].delete(expiry_schedule.SCHEDULE_KEY)
    cluster = make_cluster("prod")
    keep_fresh(cluster)
    renewed = timezone.now()
    make_lease(
        cluster,
        "kube-scheduler",
        renew_time=renewed,
        observed_at=renewed,
        expires_at=renewed + timedelta(seconds=2),
        duration=2,
    )
    try:
        assert expiry_schedule.schedule_next_evaluation() is not None
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            assert channel.basic_get(DEFAULT_QUEUE, no_ack=True) is None
            message = channel.basic_get(ALERTS_QUEUE, no_ack=True)
        assert message is not None
        assert message.headers["task"] == evaluate_due.name
    finally:
        caches["locks"].delete(expiry_schedule.SCHEDULE_KEY)


@pytest.mark.parametrize("task", our_tasks(), ids=lambda task: task.name)
def test_every_task_has_a_soft_and_a_hard_time_limit(task: Any) -> None:
    if task.name in UNLIMITED:
        assert task.soft_time_limit is None and task.time_limit is None
        return
    assert task.soft_time_limit and task.time_limit, task.name
    assert 0 < task.soft_time_limit < task.time_limit, task.name


def test_the_alerting_tasks_are_short() -> None:
    for name, queue in EXPECTED_QUEUES.items():
        if queue == ALERTS_QUEUE:
            assert app.tasks[name].time_limit <= 60, name


def test_evaluation_is_killed_before_its_lock_could_lapse() -> None:
    for name in ("alerts.tasks.evaluate_alerts", "alerts.tasks.evaluate_due"):
        assert app.tasks[name].time_limit < EVALUATION_LOCK_TTL


def test_a_poll_is_stopped_at_its_setting_and_its_lock_outlives_the_kill() -> None:
    from nks.poller import poll_lock

    poll = app.tasks["nks.tasks.poll_account"]
    assert poll.soft_time_limit == settings.NKS_POLL_TIME_LIMIT_SECONDS == 120
    assert poll.time_limit == poll.soft_time_limit + KILL_GRACE_SECONDS
    assert poll_lock(1).ttl > poll.time_limit


def test_tasks_sent_by_name_carry_no_limit_that_would_override_the_table() -> None:
    # A limit in a message beats the task's own; nothing we send sets one.
    for entry in app.conf.beat_schedule.values():
        assert "time_limit" not in entry.get("options", {})
        assert "soft_time_limit" not in entry.get("options", {})
