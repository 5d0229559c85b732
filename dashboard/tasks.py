from __future__ import annotations

import socket

from celery import shared_task
from django.utils import timezone

from dashboard import retention, services


@shared_task(ignore_result=True)
def record_worker_heartbeat(queue: str) -> None:
    # Harmless to run twice: it only moves a timestamp forward.
    services.record_worker_heartbeat(queue, worker=socket.gethostname())


@shared_task(ignore_result=True)
def prune_history() -> None:
    # One run at a time (a lock); each run stops at its budget and the next continues.
    retention.prune_history(timezone.now())
