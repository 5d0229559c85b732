from __future__ import annotations

from celery import shared_task
from celery.signals import worker_shutting_down

from leases import services
from leases.watcher import SHUTDOWN


@worker_shutting_down.connect
def stop_watchers(**_: object) -> None:
    # Watchers release their locks on the way out, so another worker takes over at once.
    SHUTDOWN.set()


@shared_task(ignore_result=True)
def watch_cluster(cluster_id: int) -> None:
    """Watch one cluster for as long as this worker holds its lock.

    Safe to run twice: the second run finds the lock taken and returns.
    """
    services.run_watcher(cluster_id)


@shared_task(ignore_result=True)
def ensure_watchers() -> None:
    """Start a watcher for every enabled cluster that has none (beat, every few seconds)."""
    for cluster_id in services.clusters_without_watcher():
        if services.claim_dispatch(cluster_id):
            watch_cluster.delay(cluster_id)
