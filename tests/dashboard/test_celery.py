from __future__ import annotations

import time

import pytest

from dashboard.celery import app
from dashboard.models import WorkerHeartbeat
from dashboard.tasks import record_worker_heartbeat


def test_three_queues_and_watch_tasks_are_routed_to_the_watch_queue() -> None:
    assert {queue.name for queue in app.conf.task_queues} == {"default", "alerts", "watch"}
    assert app.conf.task_default_queue == "default"
    route = app.amqp.router.route({}, "leases.tasks.watch_cluster")
    assert route["queue"].name == "watch"


def test_beat_schedule_sends_a_heartbeat_to_each_queue() -> None:
    schedule = app.conf.beat_schedule
    queues = {
        entry["options"]["queue"]
        for entry in schedule.values()
        if entry["task"] == "dashboard.tasks.record_worker_heartbeat"
    }
    assert queues == {"default", "alerts", "watch"}


def test_acks_late_is_off_unless_a_task_opts_in() -> None:
    assert app.conf.task_acks_late is False


@pytest.mark.django_db(transaction=True)
def test_heartbeat_task_travels_through_the_real_broker_to_a_worker(celery_worker: None) -> None:
    record_worker_heartbeat.apply_async(args=("default",), queue="default")
    deadline = time.monotonic() + 15
    while not WorkerHeartbeat.objects.filter(queue="default").exists():
        assert time.monotonic() < deadline, "the worker did not run the heartbeat task"
        time.sleep(0.1)
    assert WorkerHeartbeat.objects.get(queue="default").worker
