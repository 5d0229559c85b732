from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutting_down

from leases import services, watcher_assignment
from leases.watcher import SHUTDOWN


@celeryd_after_setup.connect
def join_watch_fleet(instance: Any, **_: object) -> None:
    # Before the consumer starts: the worker's own queue is consumed from the first moment.
    watcher_assignment.join_fleet(instance)


@worker_ready.connect
def keep_watch_share(**_: object) -> None:
    watcher_assignment.start_keeping()


@worker_shutting_down.connect
def stop_watchers(**_: object) -> None:
    # Leave the fleet first, so the others count without this worker; then the watchers
    # release their locks on the way out, and another worker takes over at once.
    watcher_assignment.leave_fleet()
    SHUTDOWN.set()


@shared_task(ignore_result=True)
def watch_cluster(cluster_id: int) -> None:
    """Watch one cluster for as long as this worker holds its lock.

    Safe to run twice: the second run finds the lock taken and returns.
    """
    services.run_watcher(cluster_id)


@shared_task(ignore_result=True)
def ensure_watchers() -> None:
    """Start a watcher for every enabled cluster that has none (beat, every few seconds), on
    the watch worker with the most room (leases.watcher_assignment)."""
    unwatched = [
        cluster_id
        for cluster_id in services.clusters_without_watcher()
        if services.claim_dispatch(cluster_id)
    ]
    for cluster_id, queue in services.route_unwatched(unwatched):
        if queue is None:
            watch_cluster.delay(cluster_id)
        else:
            watch_cluster.apply_async(args=(cluster_id,), queue=queue)
