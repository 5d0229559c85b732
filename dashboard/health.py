"""Readiness checks: can this process reach the database, the broker and the lock cache?
Only the database decides readiness (`REQUIRED_CHECKS`); the others are reported.

Each check answers in a few seconds at most. Its ``detail`` says what is wrong (the driver's
first line, which names hosts and ports) and is meant for the log only: /readyz is served
without a login, so it answers just the names of the failing checks (see
``readiness_report``), and ``log_failures`` writes the details where operators look.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.db import DatabaseError, connections
from kombu import Connection

BROKER_TIMEOUT_SECONDS = 3.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float


def _describe(exc: BaseException) -> str:
    # The first line of the driver's message says what failed (refused, timeout, auth);
    # URLs are not part of these messages, but passwords could be, so cut at "password".
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if "password" in message.lower():
        message = "authentication failed"
    return f"{type(exc).__name__}: {message}"[:300]


def check_database() -> CheckResult:
    started = time.monotonic()
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        connections["default"].close()  # a broken connection must not be reused
        return CheckResult(
            "database", False, f"database unreachable: {_describe(exc)}", time.monotonic() - started
        )
    return CheckResult("database", True, "ok", time.monotonic() - started)


def check_broker() -> CheckResult:
    started = time.monotonic()
    if settings.CELERY_BROKER_URL.startswith("filesystem"):
        folder = Path(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_out"])
        ok = folder.is_dir() and _is_writable(folder)
        detail = "ok" if ok else "broker folder is missing or not writable"
        return CheckResult("broker", ok, detail, time.monotonic() - started)
    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            connect_timeout=BROKER_TIMEOUT_SECONDS,
            transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        ) as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS
            )
    except Exception as exc:  # kombu wraps every transport's own error types
        return CheckResult(
            "broker", False, f"broker unreachable: {_describe(exc)}", time.monotonic() - started
        )
    return CheckResult("broker", True, "ok", time.monotonic() - started)


def check_lock_cache() -> CheckResult:
    started = time.monotonic()
    try:
        cache = caches["locks"]
        cache.set("readyz", "1", timeout=5)
        ok = cache.get("readyz") == "1"
    except Exception as exc:  # Redis and database cache backends raise their own errors
        return CheckResult(
            "locks", False, f"lock store unreachable: {_describe(exc)}", time.monotonic() - started
        )
    return CheckResult(
        "locks", ok, "ok" if ok else "lock store did not keep a value", time.monotonic() - started
    )


def _is_writable(folder: Path) -> bool:
    probe = folder / ".readyz"
    try:
        probe.write_text("1")
        probe.unlink()
    except OSError:
        return False
    return True


def run_readiness_checks() -> list[CheckResult]:
    return [check_database(), check_broker(), check_lock_cache()]


def log_failures(checks: list[CheckResult]) -> None:
    for check in checks:
        if not check.ok:
            logger.warning("readiness check %s failed: %s", check.name, check.detail)


# What a web process cannot serve a page without. The broker (resize and action forms queue
# their task there) and the lock store (Redis in production) are reported, but a Redis blip
# must not take every web pod out of the Service while pages can still be read.
REQUIRED_CHECKS = frozenset({"database"})


def readiness_report(checks: list[CheckResult]) -> tuple[bool, dict[str, Any]]:
    """Whether this process is ready (every required check passed), and the body /readyz
    answers to anyone.

    Only check names, results and timings: no detail, since drivers' messages carry hosts,
    ports and sometimes user names. ``status`` is "ok", "degraded" (only checks that pages
    can do without failed) or "unavailable"; ``reason`` names the failing checks,
    comma-separated in check order ("database", "broker, locks").
    """
    failed = [check.name for check in checks if not check.ok]
    ready = not REQUIRED_CHECKS.intersection(failed)
    status = "ok" if not failed else "degraded" if ready else "unavailable"
    body: dict[str, Any] = {"status": status}
    if failed:
        body["reason"] = ", ".join(failed)
    body["checks"] = {
        check.name: {"ok": check.ok, "ms": round(check.seconds * 1000, 1)} for check in checks
    }
    return ready, body
