"""The dead-man's switch over real HTTP: a completed evaluation pings the operator's URL, at
most once per interval, bounded in total against a server that stalls, and the URL (it holds
the check's key) never reaches a log line, /metrics, a page or Django's error report."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.views.debug import SafeExceptionReporterFilter

from alerts import deadman, tasks
from alerts.evaluation import EvaluationSummary
from dashboard.celery import app
from dashboard.metrics import render_metrics
from tests.conftest import run_django

pytestmark = pytest.mark.django_db

# The check's key, as Healthchecks.io puts it in the ping URL's path.
PING_KEY = "0f3c9b1e-secret-ping-key-77a1"


@dataclass(frozen=True, slots=True)
class Ping:
    method: str
    path: str
    user_agent: str


@dataclass
class PingReceiver:
    """A Healthchecks-style endpoint on 127.0.0.1: records each request, answers as told.

    `mode`: "answer" (the queued statuses, then 200 "OK"), "trickle" (200 and a body that
    comes one byte every 0.2 s: no single read ever times out) or "silent" (reads the
    request and never answers).
    """

    mode: str = "answer"
    statuses: list[int] = field(default_factory=list)
    pings: list[Ping] = field(default_factory=list)
    # time.monotonic() as each ping arrived.
    arrivals: list[float] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    def url(self, path: str = f"/ping/{PING_KEY}") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> PingReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self._ping()

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._ping()

            def _ping(self) -> None:
                receiver.pings.append(
                    Ping(self.command, self.path, self.headers.get("User-Agent", ""))
                )
                receiver.arrivals.append(time.monotonic())
                receiver.arrived.set()
                if receiver.mode == "silent":
                    receiver.released.wait(30)
                    return
                if receiver.mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", "10000")
                    self.end_headers()
                    while not receiver.released.wait(0.2):
                        self.wfile.write(b"O")
                        self.wfile.flush()
                    return
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                body = b"OK" if status == 200 else b"not this time"
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", f"/elsewhere/{PING_KEY}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def receiver() -> Iterator[PingReceiver]:
    receiver = PingReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def switch_on(receiver: PingReceiver, settings: Any) -> Any:
    """The switch pointed at the receiver (http allowed, as only a test setup may)."""
    settings.DEADMAN_SECRET_URL = receiver.url()
    settings.DEADMAN_ALLOW_HTTP = True
    settings.DEADMAN_INTERVAL_SECONDS = 60
    settings.DEADMAN_TIMEOUT_SECONDS = 1
    settings.DEADMAN_METHOD = "GET"
    settings.DEADMAN_PING_FAIL = False
    return settings


@pytest.fixture(autouse=True)
def no_ping_yet() -> Iterator[None]:
    """The claim and the last outcome live in the shared cache: none from another test."""
    cache.delete_many([deadman.PING_CLAIM_KEY, deadman.LAST_PING_KEY])
    yield
    cache.delete_many([deadman.PING_CLAIM_KEY, deadman.LAST_PING_KEY])


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Tasks run where they are sent (see tests/alerts/test_notifications.py)."""
    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = saved
        app.amqp._producer_pool = None


def metrics_lines() -> list[str]:
    return [
        line
        for line in render_metrics().decode().splitlines()
        if line.startswith("lease_dashboard_deadman_")
    ]


def queued_here(kind: deadman.Kind) -> None:
    """The ping task's work, run at once: what the worker does with the queued ping."""
    deadman.ping(kind)


def test_an_evaluation_pings_and_the_next_within_the_interval_does_not(
    receiver: PingReceiver, switch_on: Any, eager_tasks: None
) -> None:
    tasks.evaluate_alerts()
    tasks.evaluate_alerts()

    assert receiver.pings == [Ping("GET", f"/ping/{PING_KEY}", deadman.USER_AGENT)]
    assert 'lease_dashboard_deadman_last_ping_ok{kind="success"} 1.0' in metrics_lines()


def test_evaluations_in_a_row_ping_once_per_interval(
    receiver: PingReceiver, switch_on: Any, eager_tasks: None
) -> None:
    switch_on.DEADMAN_INTERVAL_SECONDS = 1
    # Evaluations every 0.1 s, as due moments can bring them: a ping each time the claim
    # has lapsed, a second or more apart (the database cache keeps whole seconds: up to 2).
    started = time.monotonic()
    while len(receiver.pings) < 2 and time.monotonic() - started < 8:
        tasks.evaluate_alerts()
        time.sleep(0.1)

    assert len(receiver.pings) == 2
    assert receiver.arrivals[1] - receiver.arrivals[0] >= 0.9


def test_post_is_sent_when_asked(receiver: PingReceiver, switch_on: Any) -> None:
    switch_on.DEADMAN_METHOD = "POST"
    deadman.after_evaluation(EvaluationSummary(), queued_here)
    assert [ping.method for ping in receiver.pings] == ["POST"]


def test_rule_errors_ping_fail_only_when_asked(receiver: PingReceiver, switch_on: Any) -> None:
    broken = EvaluationSummary(errors=["lease_expired: relation does not exist"])

    deadman.after_evaluation(broken, queued_here)
    assert receiver.pings == [], "silence, by default: the service's grace time tells"
    deadman.after_evaluation(None, queued_here)
    assert receiver.pings == [], "another evaluation was busy: it pings, not this one"

    switch_on.DEADMAN_PING_FAIL = True
    deadman.after_evaluation(broken, queued_here)
    assert [ping.path for ping in receiver.pings] == [f"/ping/{PING_KEY}/fail"]
    assert 'lease_dashboard_deadman_last_ping_ok{kind="fail"} 1.0' in metrics_lines()


@pytest.mark.parametrize("mode", ["trickle", "silent"])
def test_a_stalled_server_is_given_up_at_the_total_deadline(
    receiver: PingReceiver, switch_on: Any, mode: str
) -> None:
    receiver.mode = mode
    started = time.monotonic()

    result = deadman.ping(deadman.Kind.SUCCESS)

    elapsed = time.monotonic() - started
    assert receiver.arrived.is_set()
    assert result is not None and not result.ok
    assert result.text in {"took longer than 1 s in total", "no answer within 1 s (timed out)"}
    assert 0.9 <= elapsed < 2.0, f"DEADMAN_TIMEOUT_SECONDS=1 bounds it all: {elapsed:.2f} s"
    assert 'lease_dashboard_deadman_last_ping_ok{kind="success"} 0.0' in metrics_lines()


def test_5xx_and_redirects_are_failed_pings_and_the_next_success_recovers(
    receiver: PingReceiver, switch_on: Any
) -> None:
    receiver.statuses = [503, 302]

    first = deadman.ping(deadman.Kind.SUCCESS)
    assert first == deadman.PingResult(False, "HTTP 503 Service Unavailable")
    assert 'lease_dashboard_deadman_last_ping_ok{kind="success"} 0.0' in metrics_lines()
    second = deadman.ping(deadman.Kind.SUCCESS)
    assert second == deadman.PingResult(False, "HTTP 302 Found: a redirect, not followed")
    assert [ping.path for ping in receiver.pings] == [f"/ping/{PING_KEY}"] * 2, "not followed"

    assert deadman.ping(deadman.Kind.SUCCESS) == deadman.PingResult(True, "HTTP 200 OK")
    lines = metrics_lines()
    assert 'lease_dashboard_deadman_last_ping_ok{kind="success"} 1.0' in lines
    (age,) = [line for line in lines if line.startswith("lease_dashboard_deadman_last_ping_age")]
    assert 0 <= float(age.split()[1]) < 5


def test_a_failure_to_queue_never_reaches_the_evaluation(
    switch_on: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broker_down(kind: deadman.Kind) -> None:
        raise ConnectionError("Error 111 connecting to redis.internal:6379")

    deadman.after_evaluation(EvaluationSummary(), broker_down)

    assert "deadman: the ping could not be queued" in caplog.text


def test_off_by_default_and_then_nothing_is_sent_or_served(receiver: PingReceiver) -> None:
    deadman.after_evaluation(EvaluationSummary(), queued_here)
    assert deadman.ping(deadman.Kind.SUCCESS) is None
    assert receiver.pings == []
    assert metrics_lines() == [
        "lease_dashboard_deadman_enabled 0.0",
    ]


def test_before_the_first_ping_its_age_says_never(switch_on: Any) -> None:
    lines = metrics_lines()
    assert "lease_dashboard_deadman_enabled 1.0" in lines
    assert "lease_dashboard_deadman_last_ping_age_seconds -1.0" in lines
    assert not any(line.startswith("lease_dashboard_deadman_last_ping_ok") for line in lines)


def test_the_url_never_reaches_logs_metrics_pages_or_error_reports(
    receiver: PingReceiver,
    switch_on: Any,
    caplog: pytest.LogCaptureFixture,
    client: Client,
    admin_user: Any,
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver.statuses = [200, 503, 302]
    for _ in range(3):
        deadman.ping(deadman.Kind.SUCCESS)
    receiver.mode = "silent"
    deadman.ping(deadman.Kind.FAIL)
    receiver.stop()
    refused = deadman.ping(deadman.Kind.SUCCESS)
    assert refused is not None and refused.text.startswith("ConnectError")
    switch_on.DEADMAN_SECRET_URL = f"https://127.0.0.1:{receiver.port}/ping/{PING_KEY}"
    assert deadman.ping(deadman.Kind.SUCCESS) is not None

    logged = [record.getMessage() + str(record.exc_text or "") for record in caplog.records]
    assert any("deadman: success ping failed: HTTP 503" in line for line in logged)
    assert not [line for line in logged if PING_KEY in line]
    assert PING_KEY not in render_metrics().decode()
    assert PING_KEY not in str(cache.get(deadman.LAST_PING_KEY))

    client.force_login(admin_user)
    for page in ("/", "/alerts/", "/admin/"):
        response = client.get(page)
        assert response.status_code == 200, page
        assert PING_KEY not in response.content.decode(), page

    # Django's error pages and mails list the settings: the name makes them mask it.
    safe = SafeExceptionReporterFilter().get_safe_settings()
    assert safe["DEADMAN_SECRET_URL"] == SafeExceptionReporterFilter.cleansed_substitute


def test_plain_http_to_an_https_only_switch_is_refused_without_sending(
    receiver: PingReceiver, switch_on: Any
) -> None:
    switch_on.DEADMAN_ALLOW_HTTP = False
    result = deadman.ping(deadman.Kind.SUCCESS)
    assert result == deadman.PingResult(
        False, "refused: the URL must use https (DEADMAN_ALLOW_HTTP)"
    )
    assert receiver.pings == []


@pytest.mark.parametrize(
    ("url", "allow_http", "error"),
    [
        (f"http://hc-ping.example/{PING_KEY}", "", "DEADMAN_URL must use https://"),
        (f"https://user:{PING_KEY}@hc-ping.example/x", "", "without a user name or password"),
        (f"ftp://hc-ping.example/{PING_KEY}", "true", "DEADMAN_URL must use https://"),
        (f"https:///{PING_KEY}", "", "DEADMAN_URL must name a host"),
        (f"https://[hc-ping/{PING_KEY}", "", "DEADMAN_URL is not a valid URL"),
    ],
)
def test_start_up_refuses_a_bad_url_without_quoting_it(
    url: str, allow_http: str, error: str
) -> None:
    result = run_django("", env={"DEADMAN_URL": url, "DEADMAN_ALLOW_HTTP": allow_http})
    assert result.returncode != 0
    assert error in result.stderr
    assert PING_KEY not in result.stderr


def test_start_up_takes_https_and_http_when_allowed() -> None:
    code = "from django.conf import settings; print(settings.DEADMAN_SECRET_URL is not None)"
    https = run_django(code, env={"DEADMAN_URL": f"https://hc-ping.example/{PING_KEY}"})
    assert https.returncode == 0, https.stderr
    assert https.stdout.strip() == "True"
    http = run_django(
        code,
        env={"DEADMAN_URL": f"http://127.0.0.1:9/{PING_KEY}", "DEADMAN_ALLOW_HTTP": "true"},
    )
    assert http.returncode == 0, http.stderr


def test_the_alerts_page_shows_the_last_ping_and_a_failure_without_the_url(
    receiver: PingReceiver, switch_on: Any, client: Client, admin_user: Any
) -> None:
    client.force_login(admin_user)

    def page() -> str:
        return " ".join(client.get("/alerts/").content.decode().split())

    assert 'data-deadman="none"' in page() and "Dead-man's switch: no ping yet." in page()

    deadman.ping(deadman.Kind.SUCCESS)
    text = page()
    assert 'data-deadman="ok"' in text and "Dead-man's switch: last ping answered" in text
    assert 'data-deadman="failed"' not in text

    receiver.statuses = [503]
    deadman.ping(deadman.Kind.SUCCESS)
    text = page()
    assert "Dead-man's switch: last ping failed" in text
    assert "could not reach its service" in text and "(HTTP 503 Service Unavailable)" in text
    assert PING_KEY not in text and str(receiver.port) not in text


def test_the_alerts_page_says_nothing_of_a_switch_that_is_off(
    client: Client, admin_user: Any
) -> None:
    client.force_login(admin_user)
    assert "data-deadman" not in client.get("/alerts/").content.decode()
