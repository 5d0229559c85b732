"""The dead-man's switch: after a completed evaluation, ping a URL outside the dashboard.

A dashboard whose evaluator, database or workers are dead cannot alert on itself. A
Healthchecks.io-style service can: it expects a ping every few minutes and raises the alarm
when they stop. So after an alert evaluation that completed, at most every
DEADMAN_INTERVAL_SECONDS (one claim in the shared cache, whichever worker evaluated), the
alerts worker sends one ping (the `alerts.tasks.ping_deadman` task, so a slow ping never
holds the evaluation or its lock). An evaluation with rule errors pings `<url>/fail` when
DEADMAN_PING_FAIL is on, and nothing otherwise: silence is the signal then.

The URL is the operator's (a setting, checked at start-up: https unless DEADMAN_ALLOW_HTTP)
and a secret: whoever has it can ping in the dashboard's name, and so hide its death. It is
never logged, stored or shown; what went wrong is said in words of our own (httpx's errors
quote the URL). The last ping's outcome and age are kept in the cache for `/metrics`.
"""

from __future__ import annotations

import enum
import http
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.cache import cache
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from alerts.evaluation import EvaluationSummary
from dashboard import outbound_http

logger = logging.getLogger(__name__)

PREFIX = "lease_dashboard_deadman"
# Held for DEADMAN_INTERVAL_SECONDS by the evaluation that queues a ping: cache.add is atomic,
# so several alerts workers ping once per interval between them.
PING_CLAIM_KEY = "deadman:claim"
LAST_PING_KEY = "deadman:last"
# The last outcome outlives any sensible interval; a month-old one still says "this old".
LAST_PING_TTL = 30 * 24 * 3600
# A ping service answers "OK": anything bigger is read no further.
MAX_ANSWER_BYTES = 16 * 1024
USER_AGENT = "lease-dashboard-deadman/1"


class Kind(enum.StrEnum):
    SUCCESS = "success"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class PingResult:
    ok: bool
    # "HTTP 200 OK", "took longer than 10 s in total": never the URL.
    text: str


@dataclass(frozen=True, slots=True)
class LastPing:
    at: float  # time.time() when the answer (or the failure) came
    kind: Kind
    ok: bool
    text: str


def enabled() -> bool:
    return bool(settings.DEADMAN_SECRET_URL)


def kind_after(summary: EvaluationSummary | None) -> Kind | None:
    """Which ping an evaluation earns: None when it did not run (another one was busy, and
    that one pings) or had errors and fail pings are off."""
    if summary is None:
        return None
    if not summary.errors:
        return Kind.SUCCESS
    return Kind.FAIL if settings.DEADMAN_PING_FAIL else None


def after_evaluation(summary: EvaluationSummary | None, queue_ping: Callable[[Kind], Any]) -> None:
    """Queue a ping if this evaluation earned one and none was queued this interval.

    Never raises: the evaluation is done and recorded whatever happens to its ping.
    """
    if not enabled():
        return
    try:
        kind = kind_after(summary)
        if kind is None:
            return
        if not cache.add(PING_CLAIM_KEY, kind.value, timeout=settings.DEADMAN_INTERVAL_SECONDS):
            return
        queue_ping(kind)
    except Exception:
        # The cache or the broker: their errors name their own hosts, never the ping URL.
        logger.exception("deadman: the ping could not be queued")


def ping_url(url: str, kind: Kind) -> str:
    """The URL of the ping: Healthchecks signals a failure at `<url>/fail`."""
    if kind is Kind.SUCCESS:
        return url
    parts = urlsplit(url)
    return parts._replace(path=parts.path.rstrip("/") + "/fail").geturl()


def ping(kind: Kind) -> PingResult | None:
    """Send one ping now, record its outcome; None when the switch is off. Never raises."""
    url = settings.DEADMAN_SECRET_URL
    if not url:
        return None
    try:
        result = send_ping(ping_url(url, kind))
    except Exception as error:
        # Nothing foreseen raises here; if something does, its text may quote the URL.
        result = PingResult(False, f"unexpected {type(error).__name__}")
    if result.ok:
        logger.debug("deadman: %s ping answered %s", kind, result.text)
    else:
        logger.warning("deadman: %s ping failed: %s", kind, result.text)
    try:
        record(LastPing(time.time(), kind, result.ok, result.text))
    except Exception:
        logger.exception("deadman: the ping's outcome could not be recorded")
    return result


def send_ping(url: str) -> PingResult:
    """One request within DEADMAN_TIMEOUT_SECONDS in total; 2xx is a ping that arrived."""
    scheme = urlsplit(url).scheme
    if scheme != "https" and not (settings.DEADMAN_ALLOW_HTTP and scheme == "http"):
        # Checked at start-up; again here for settings changed since (tests, a shell).
        return PingResult(False, "refused: the URL must use https (DEADMAN_ALLOW_HTTP)")
    seconds = float(settings.DEADMAN_TIMEOUT_SECONDS)
    method = settings.DEADMAN_METHOD
    try:
        with outbound_http.bounded_client(
            timeout=httpx.Timeout(seconds), proxy=outbound_http.environment_proxy(url)
        ) as client:
            response = outbound_http.send(
                client,
                method,
                url,
                deadline=outbound_http.Deadline(seconds),
                max_body=MAX_ANSWER_BYTES,
                headers={"User-Agent": USER_AGENT},
                content=b"" if method == "POST" else None,
            )
    except outbound_http.OutboundError as error:
        return PingResult(False, str(error))
    except httpx.TimeoutException:
        return PingResult(False, f"no answer within {seconds:g} s (timed out)")
    except httpx.HTTPError as error:
        # Its text names the URL: the kind of failure says enough (ConnectError, ...).
        return PingResult(False, f"{type(error).__name__}: the request did not complete")
    status = _status_line(response)
    if 200 <= response.status_code < 300:
        return PingResult(True, status)
    if 300 <= response.status_code < 400:
        # Where it points is not followed or recorded: it may hold the key too.
        return PingResult(False, f"{status}: a redirect, not followed")
    return PingResult(False, status)


def _status_line(response: httpx.Response) -> str:
    try:
        phrase = http.HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = ""
    return f"HTTP {response.status_code} {phrase}".strip()


def record(last: LastPing) -> None:
    value = {"at": last.at, "kind": last.kind.value, "ok": last.ok, "text": last.text}
    cache.set(LAST_PING_KEY, value, timeout=LAST_PING_TTL)


def last_ping() -> LastPing | None:
    value = cache.get(LAST_PING_KEY)
    if not isinstance(value, dict):
        return None
    return LastPing(float(value["at"]), Kind(value["kind"]), bool(value["ok"]), str(value["text"]))


class DeadmanCollector(Collector):
    """Whether the switch is on, and the last ping's age and outcome (never its URL)."""

    def collect(self) -> Iterable[Metric]:
        on = GaugeMetricFamily(f"{PREFIX}_enabled", "1 when DEADMAN_URL is set.")
        on.add_metric([], 1 if enabled() else 0)
        yield on
        if not enabled():
            return
        up = GaugeMetricFamily(
            f"{PREFIX}_metrics_up", "1 when the last ping's outcome could be read."
        )
        try:
            last = last_ping()
        except Exception:
            logger.exception("deadman: the last ping's outcome could not be read")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        age = GaugeMetricFamily(
            f"{PREFIX}_last_ping_age_seconds",
            "Seconds since the last ping was answered or failed (-1: none yet).",
        )
        age.add_metric([], -1.0 if last is None else round(max(time.time() - last.at, 0.0), 3))
        yield age
        ok = GaugeMetricFamily(
            f"{PREFIX}_last_ping_ok",
            "1 when the last ping was answered with 2xx, 0 when it failed (none: no ping yet).",
            labels=["kind"],
        )
        if last is not None:
            ok.add_metric([last.kind.value], 1 if last.ok else 0)
        yield ok


_registered = False


def register() -> None:
    """Add the collector to the dashboard's registry, once per process."""
    global _registered
    if _registered:
        return
    from dashboard.metrics import register_collector

    register_collector(DeadmanCollector())
    _registered = True
