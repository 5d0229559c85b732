"""The Celery app: configuration from Django settings (``CELERY_*``), queues, time limits and
the beat schedule.

Three queues, each with its own worker, so that no kind of work waits behind another:

* ``watch``: the long-running stream tasks, on a thread-pool worker so one process can hold
  many streams.
* ``alerts``: alert evaluation, mail and chat delivery, and watcher supervision. Short tasks
  only: however slow an outside API gets, the evaluator that would alert about it is never
  queued behind it.
* ``default``: NKS polls, resizes and the housekeeping that dispatches them.

Every task but the watchers has a soft and a hard time limit (`TASK_TIME_LIMITS`): the soft
one raises ``SoftTimeLimitExceeded`` inside the task (so a poll releases its lock and says on
its row that it was stopped), the hard one kills the process if the task did not stop.
Celery enforces them in prefork workers (the ``default`` and ``alerts`` ones).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu import Queue

from dashboard.liveness import WorkerLivenessFile

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

DEFAULT_QUEUE = "default"
ALERTS_QUEUE = "alerts"
WATCH_QUEUE = "watch"
QUEUES = (DEFAULT_QUEUE, ALERTS_QUEUE, WATCH_QUEUE)
# A task still running this long after its soft limit is killed with its process.
KILL_GRACE_SECONDS = 30


@dataclass(frozen=True, slots=True)
class TimeLimits:
    soft: int
    hard: int


def poll_time_limits() -> TimeLimits:
    """An NKS poll's limits: NKS_POLL_TIME_LIMIT_SECONDS, then the kill. A poll's lock must
    outlive the hard limit (`nks.poller.poll_lock`), so two polls never overlap."""
    from django.conf import settings

    soft = int(settings.NKS_POLL_TIME_LIMIT_SECONDS)
    return TimeLimits(soft=soft, hard=soft + KILL_GRACE_SECONDS)


def retention_time_limits() -> TimeLimits:
    """History retention stops by itself at its budget (between batches); the soft limit is
    for a batch that runs far past it. Its lock outlives the kill
    (`dashboard.retention.LOCK_SLACK_SECONDS`)."""
    from django.conf import settings

    soft = int(settings.HISTORY_PRUNE_BUDGET_SECONDS) + 60
    return TimeLimits(soft=soft, hard=soft + KILL_GRACE_SECONDS)


# Seconds, per task. None: no limit, on purpose (say why beside it). A task missing here
# gets BUILTIN_TIME_LIMITS; tests/dashboard/test_celery_limits.py insists that every task of
# ours is listed.
TASK_TIME_LIMITS: dict[str, TimeLimits | Callable[[], TimeLimits] | None] = {
    # A watcher runs as long as its worker holds the cluster's lock: for days. It is not
    # stopped by a clock but supervised: it renews its lock, its probe closes a stuck stream
    # (leases.watch_probe), `ensure_watchers` restarts a dead one within the lock's TTL and
    # `source_stale` alerts on a quiet one. The thread pool of the `watch` worker could not
    # enforce a limit anyway (Celery enforces them in prefork workers only).
    "leases.tasks.watch_cluster": None,
    # A handful of queries each.
    "leases.tasks.ensure_watchers": TimeLimits(soft=20, hard=30),
    "dashboard.tasks.record_worker_heartbeat": TimeLimits(soft=10, hard=20),
    "nks.tasks.poll_due_accounts": TimeLimits(soft=20, hard=30),
    "nks.tasks.sweep_resizes": TimeLimits(soft=30, hard=45),
    "alerts.tasks.send_due_notifications": TimeLimits(soft=20, hard=30),
    # One poll: the cluster list, then the rest concurrently, every call bounded by the
    # client's own deadline.
    "nks.tasks.poll_account": poll_time_limits,
    # A read and at most one write to NKS (never retried); a stopped submit leaves its row
    # in flight, and `sweep_resizes` follows it up as a write whose fate is unknown.
    "nks.tasks.submit_resize": TimeLimits(soft=120, hard=150),
    "nks.tasks.follow_resize": TimeLimits(soft=60, hard=90),
    # History retention (dashboard.retention): stops itself at HISTORY_PRUNE_BUDGET_SECONDS.
    "dashboard.tasks.prune_history": retention_time_limits,
    # Evaluation holds a lock of 30 s (alerts.evaluation.EVALUATION_LOCK_TTL): it is stopped
    # before the lock could lapse, so two evaluations never run at once.
    "alerts.tasks.evaluate_alerts": TimeLimits(soft=20, hard=28),
    "alerts.tasks.evaluate_due": TimeLimits(soft=20, hard=28),
    # One mail or chat post. Below the shortest claim on the row (alerts.delivery: 70 s for
    # a channel post, longer for mail) so a stopped sender's row is retried, never sent by
    # two senders at once.
    "alerts.tasks.send_notification": TimeLimits(soft=45, hard=60),
    # One ping, bounded by DEADMAN_TIMEOUT_SECONDS (at most 30 s) in total.
    "alerts.tasks.ping_deadman": TimeLimits(soft=40, hard=50),
}
# Celery's own tasks (celery.chord_unlock, ...): this app never uses them, bounded anyway.
BUILTIN_TIME_LIMITS = TimeLimits(soft=60, hard=90)


def time_limits_of(task_name: str) -> TimeLimits | None:
    entry = TASK_TIME_LIMITS.get(task_name, BUILTIN_TIME_LIMITS)
    return entry() if callable(entry) else entry


class TimeLimitAnnotations:
    """Celery's ``task_annotations`` hook: each task's limits from `TASK_TIME_LIMITS`, read
    when the task is bound (Django's settings are loaded by then)."""

    def annotate(self, task: Any) -> dict[str, int | None]:
        limits = time_limits_of(task.name)
        if limits is None:
            return {"soft_time_limit": None, "time_limit": None}
        return {"soft_time_limit": limits.soft, "time_limit": limits.hard}

    def annotate_any(self) -> None:
        return None


app = Celery("dashboard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = tuple(Queue(name) for name in QUEUES)
app.conf.task_annotations = (TimeLimitAnnotations(),)
# Liveness files for cheap healthchecks and probes (dashboard.liveness): off unless the
# environment names them, as the image does.
app.steps["worker"].add(WorkerLivenessFile)
app.conf.beat_scheduler = "dashboard.liveness:LivenessScheduler"
app.conf.task_routes = {
    "leases.tasks.watch_*": {"queue": WATCH_QUEUE},
    # Supervising watchers is a few queries that must run while polls are slow: on the
    # queue that is kept short, beside the evaluation that alerts on a dead watcher.
    "leases.tasks.ensure_watchers": {"queue": ALERTS_QUEUE},
    "alerts.tasks.*": {"queue": ALERTS_QUEUE},
}
# The schedule lives in code, beside the tasks it names, so a deploy cannot drift from it.
app.conf.beat_schedule = {
    # A dead watcher's lock expires within its TTL (20 s); this restarts it right after.
    "ensure-lease-watchers": {
        "task": "leases.tasks.ensure_watchers",
        "schedule": 5.0,
        "options": {"queue": ALERTS_QUEUE, "expires": 5.0},
    },
    # One heartbeat per queue, run by that queue's worker: a queue whose worker is gone or
    # stuck goes silent on the overview page and in /metrics.
    **{
        f"heartbeat-{queue}-queue": {
            "task": "dashboard.tasks.record_worker_heartbeat",
            "schedule": 15.0,
            "args": (queue,),
            "options": {"queue": queue, "expires": 15.0},
        }
        for queue in QUEUES
    },
    # Each NKS account is polled every NKS_POLL_SECONDS: this only claims the accounts that
    # are due (on their rows), so the interval is a setting read at run time, not here.
    "nks-poll-due-accounts": {
        "task": "nks.tasks.poll_due_accounts",
        "schedule": 5.0,
        "options": {"queue": DEFAULT_QUEUE, "expires": 5.0},
    },
    # Re-sends resize requests whose task was lost and resumes following stalled ones.
    "nks-sweep-resizes": {
        "task": "nks.tasks.sweep_resizes",
        "schedule": 15.0,
        "options": {"queue": DEFAULT_QUEUE, "expires": 15.0},
    },
    # History retention: each run deletes for at most its budget, the next one continues.
    "history-retention": {
        "task": "dashboard.tasks.prune_history",
        "schedule": 3600.0,
        "options": {"queue": DEFAULT_QUEUE, "expires": 600.0},
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
        queue=ALERTS_QUEUE,
        expires=every,
    )
    # Sweep: queue every notification that is due, so a lost task message or a retry after
    # an SMTP outage is sent without anyone noticing it was missing.
    sender.add_periodic_task(
        every,
        sender.signature("alerts.tasks.send_due_notifications"),
        name="alerts-send-due",
        queue=ALERTS_QUEUE,
        expires=every,
    )


app.autodiscover_tasks()
