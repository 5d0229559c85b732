"""The Celery app: configuration from Django settings (``CELERY_*``), queues and beat schedule.

Two queues: ``watch`` holds long-running stream tasks and is consumed by a thread-pool worker
so one process can hold many streams; ``default`` takes polls, alert evaluation and mail.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = (Queue("default"), Queue("watch"))
app.conf.task_routes = {
    "leases.tasks.watch_*": {"queue": "watch"},
}
# The schedule lives in code, beside the tasks it names, so a deploy cannot drift from it.
app.conf.beat_schedule = {
    # A dead watcher's lock expires within its TTL (20 s); this restarts it right after.
    "ensure-lease-watchers": {
        "task": "leases.tasks.ensure_watchers",
        "schedule": 5.0,
        "options": {"queue": "default", "expires": 5.0},
    },
    "heartbeat-default-queue": {
        "task": "dashboard.tasks.record_worker_heartbeat",
        "schedule": 15.0,
        "args": ("default",),
        "options": {"queue": "default", "expires": 15.0},
    },
    "heartbeat-watch-queue": {
        "task": "dashboard.tasks.record_worker_heartbeat",
        "schedule": 15.0,
        "args": ("watch",),
        "options": {"queue": "watch", "expires": 15.0},
    },
}
app.autodiscover_tasks()
