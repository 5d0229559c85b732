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
    # Each NKS account is polled every NKS_POLL_SECONDS: this only claims the accounts that
    # are due (on their rows), so the interval is a setting read at run time, not here.
    "nks-poll-due-accounts": {
        "task": "nks.tasks.poll_due_accounts",
        "schedule": 5.0,
        "options": {"queue": "default", "expires": 5.0},
    },
    # Re-sends resize requests whose task was lost and resumes following stalled ones.
    "nks-sweep-resizes": {
        "task": "nks.tasks.sweep_resizes",
        "schedule": 15.0,
        "options": {"queue": "default", "expires": 15.0},
    },
    "nks-prune-health-history": {
        "task": "nks.tasks.prune_health_history",
        "schedule": 3600.0,
        "options": {"queue": "default", "expires": 600.0},
    },
}


@app.on_after_configure.connect
def schedule_alerts(sender: Celery, **_: object) -> None:
    """Alert evaluation and the mail sweep, every ALERT_EVAL_SECONDS (a setting, hence here:
    Django's settings are loaded by the time Celery reads its configuration)."""
    from django.conf import settings

    every = float(settings.ALERT_EVAL_SECONDS)
    # Evaluate: open, update and resolve incidents, plan the mail that is due.
    sender.add_periodic_task(
        every,
        sender.signature("alerts.tasks.evaluate_alerts"),
        name="alerts-evaluate",
        queue="default",
        expires=every,
    )
    # Sweep: queue every notification that is due, so a lost task message or a retry after
    # an SMTP outage is sent without anyone noticing it was missing.
    sender.add_periodic_task(
        every,
        sender.signature("alerts.tasks.send_due_notifications"),
        name="alerts-send-due",
        queue="default",
        expires=every,
    )


app.autodiscover_tasks()
