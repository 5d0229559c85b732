"""Liveness files: a Celery worker and beat each prove, by a file's modification time, that
their own loop still turns.

A container healthcheck or a Kubernetes exec probe then costs one `stat`, where `celery
inspect ping` started a Python process of about 66 MiB and waited up to 10 s for a broadcast
reply through the broker (so a Redis blip failed every worker's probe at once):

    test $(( $(date +%s) - $(stat -c %Y /tmp/celery-worker-alive) )) -lt 60

* A worker touches `CELERY_LIVENESS_FILE` every 10 s (`CELERY_LIVENESS_SECONDS`) from its own
  timer (a bootstep on the worker's blueprint). That timer is driven by the worker's event
  loop, so a loop that hangs stops touching. So does a worker waiting to reconnect to its
  broker (seen in compose with Redis refusing connections: unhealthy after about a minute,
  healthy again within 40 s of Redis answering): a probe that restarts on it restarts
  workers during a long Redis outage, which does no harm but does not help either.
* Beat touches `CELERY_BEAT_LIVENESS_FILE` at every tick of its scheduler: its shortest
  entry is due every 5 s, so a beat that stopped scheduling (or cannot reach its broker)
  is seen within a minute. The
  schedule file itself proves nothing: it exists from the first start on.

Both settings are empty by default (`make run` needs no probe); the image sets them under
/tmp, the one writable place of its read-only root. The file is removed on a clean stop, so
a stopped process is never taken for a live one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from celery import bootsteps
from celery.beat import PersistentScheduler

logger = logging.getLogger(__name__)

# How often a worker touches its file (CELERY_LIVENESS_SECONDS; a probe allows six times this).
LIVENESS_TOUCH_SECONDS = 10.0
WORKER_FILE_ENV = "CELERY_LIVENESS_FILE"
BEAT_FILE_ENV = "CELERY_BEAT_LIVENESS_FILE"


def liveness_path(variable: str) -> Path | None:
    """The file a process touches, or None when the operator named none."""
    value = os.environ.get(variable, "").strip()
    return Path(value) if value else None


def touch(path: Path) -> None:
    """Move the file's modification time to now; a failure is logged, never raised (the
    probe failing is the signal, the process must go on)."""
    try:
        path.touch()
    except OSError as exc:
        logger.warning("liveness: cannot touch %s: %s", path, exc.strerror or exc)


def remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


class WorkerLivenessFile(bootsteps.StartStopStep):
    """Touches CELERY_LIVENESS_FILE while the worker runs (see the module's docstring)."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.path = liveness_path(WORKER_FILE_ENV)
        self.timer_entry: Any = None

    def include_if(self, worker: Any) -> bool:
        return self.path is not None

    def start(self, worker: Any) -> None:
        assert self.path is not None  # include_if
        path = self.path
        touch(path)
        every = float(os.environ.get("CELERY_LIVENESS_SECONDS") or LIVENESS_TOUCH_SECONDS)
        self.timer_entry = worker.timer.call_repeatedly(max(every, 0.5), touch, (path,))

    def stop(self, worker: Any) -> None:
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None
        if self.path is not None:
            remove(self.path)


class LivenessScheduler(PersistentScheduler):
    """Beat's scheduler (the default one, with its schedule file), touching
    CELERY_BEAT_LIVENESS_FILE at every tick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.liveness_file = liveness_path(BEAT_FILE_ENV)
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self.liveness_file is not None:
            touch(self.liveness_file)
        return super().tick(*args, **kwargs)

    def close(self) -> None:
        super().close()
        if self.liveness_file is not None:
            remove(self.liveness_file)
