from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_postrun
from django.db import connections

from dashboard.celery import app
from dashboard.models import WorkerHeartbeat
from dashboard.tasks import record_worker_heartbeat
from tests.conftest import reset_celery_connections


def test_two_queues_and_watch_tasks_are_routed_to_the_watch_queue() -> None:
    assert {queue.name for queue in app.conf.task_queues} == {"default", "watch"}
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
    assert queues == {"default", "watch"}


def test_acks_late_is_off_unless_a_task_opts_in() -> None:
    assert app.conf.task_acks_late is False


@pytest.fixture
def isolated_broker(tmp_path: Path) -> Iterator[None]:
    """Keep the test's messages apart from a `make run` that may share var/broker."""
    if not app.conf.broker_url.startswith("filesystem"):
        # Redis: the queue is shared, but the test worker closes the connection pool when
        # it stops; later tests must get a new one.
        try:
            yield
        finally:
            _reset_connection_pool()
        return
    saved = app.conf.broker_transport_options
    folder = tmp_path / "queue"
    folder.mkdir()
    app.conf.broker_transport_options = {
        **saved,
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
    }
    _reset_connection_pool()
    try:
        yield
    finally:
        app.conf.broker_transport_options = saved
        _reset_connection_pool()


def _reset_connection_pool() -> None:
    reset_celery_connections()


@pytest.fixture
def worker_closes_its_connections() -> Iterator[None]:
    """Close the worker thread's database connection after each task.

    Otherwise the thread's PostgreSQL session outlives the test and blocks the teardown of
    the test database (the `celery worker` command installs Django's fixup for this; the
    in-process test worker does not).
    """

    def close(**_: object) -> None:
        connections.close_all()

    task_postrun.connect(close, weak=False)
    try:
        yield
    finally:
        task_postrun.disconnect(close)


@pytest.mark.django_db(transaction=True)
def test_heartbeat_task_travels_through_the_real_broker_to_a_worker(
    isolated_broker: None, worker_closes_its_connections: None
) -> None:
    with start_worker(
        app, pool="solo", perform_ping_check=False, queues=["default"], loglevel="WARNING"
    ):
        record_worker_heartbeat.apply_async(args=("default",), queue="default")
        deadline = time.monotonic() + 15
        while not WorkerHeartbeat.objects.filter(queue="default").exists():
            assert time.monotonic() < deadline, "the worker did not run the heartbeat task"
            time.sleep(0.1)
    heartbeat = WorkerHeartbeat.objects.get(queue="default")
    assert heartbeat.worker
