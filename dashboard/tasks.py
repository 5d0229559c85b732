from __future__ import annotations

import socket

from celery import shared_task

from dashboard import services


@shared_task(ignore_result=True)
def record_worker_heartbeat(queue: str) -> None:
    # Harmless to run twice: it only moves a timestamp forward.
    services.record_worker_heartbeat(queue, worker=socket.gethostname())
