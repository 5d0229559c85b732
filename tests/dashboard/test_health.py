from __future__ import annotations

import logging
import socket

import orjson
import pytest
from django.test import Client

from tests.conftest import run_django

# What a driver's message would leak: hosts, driver and exception class names.
LEAKS = ("127.0.0.1", "localhost", "psycopg", "OperationalError", "redis", "Redis", "Error")

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_login(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_healthz_answers_a_probe_addressed_by_pod_ip(client: Client) -> None:
    # Kubelet sends Host: <pod ip>:8000, which ALLOWED_HOSTS does not list.
    response = client.get("/healthz", HTTP_HOST="10.244.3.17:8000")
    assert response.status_code == 200


def test_readyz_reports_each_dependency(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert {name for name in body["checks"]} == {"database", "broker", "locks"}
    assert all(check["ok"] for check in body["checks"].values())


def test_readyz_stays_ready_but_degraded_when_the_broker_is_down(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    # Pages are still served without the broker: a Redis blip must not take every web pod
    # out of the Service (issue 23). Only the database decides.
    settings.CELERY_BROKER_URL = "redis://:brokerpass@127.0.0.1:1/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "degraded"
    assert body["checks"]["broker"]["ok"] is False
    assert body["reason"] == "broker"
    assert "brokerpass" not in response.content.decode()


DATABASE_DOWN_ENV = {
    "DATABASE_URL": "postgres://dashboard:dbpass@127.0.0.1:1/dashboard",
    "DEBUG": "false",
}


def test_readyz_is_503_when_the_database_is_down() -> None:
    result = run_django(
        "from django.test import Client\n"
        "r = Client().get('/readyz')\n"
        "print(r.status_code); print(r.content.decode())",
        env=DATABASE_DOWN_ENV,
    )
    assert result.returncode == 0, result.stderr
    status, body = result.stdout.split("\n", 1)
    assert status == "503"
    data = orjson.loads(body)
    assert data["checks"]["database"]["ok"] is False
    # Without Redis the lock store is a table in that same database.
    assert data["reason"] == "database, locks"
    assert "dbpass" not in body


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_readyz_names_a_down_broker_without_hosts_ports_or_driver_messages(
    client: Client,
    settings,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = closed_port()
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{port}/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}

    with caplog.at_level(logging.WARNING, logger="dashboard.health"):
        response = client.get("/readyz")

    text = response.content.decode()
    assert response.status_code == 200
    assert response.json()["reason"] == "broker"
    assert str(port) not in text
    assert [leak for leak in LEAKS if leak in text] == []
    assert all(set(check) == {"ok", "ms"} for check in response.json()["checks"].values())
    # The why goes to the log, for operators.
    logged = [record.getMessage() for record in caplog.records]
    assert any(message.startswith("readiness check broker failed: ") for message in logged)
    assert any(str(port) in message for message in logged)


def test_readyz_names_every_down_dependency_without_hosts_ports_or_driver_messages() -> None:
    db_port, redis_port = closed_port(), closed_port()
    result = run_django(
        "from django.test import Client\n"
        "r = Client().get('/readyz')\n"
        "print(r.status_code); print(r.content.decode())",
        env={
            "DATABASE_URL": f"postgres://dashboard:dbpass@127.0.0.1:{db_port}/dashboard",
            "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        },
    )
    assert result.returncode == 0, result.stderr
    status, body = result.stdout.split("\n", 1)
    assert status == "503"
    assert orjson.loads(body)["reason"] == "database, broker, locks"
    assert str(db_port) not in body and str(redis_port) not in body
    assert [leak for leak in LEAKS if leak in body] == []
    assert "readiness check database failed: " in result.stderr
    assert str(db_port) in result.stderr


def test_pages_show_an_error_banner_not_a_stack_trace_when_the_database_is_down() -> None:
    result = run_django(
        "from django.test import Client\n"
        "c = Client(raise_request_exception=False)\n"
        "c.cookies['sessionid'] = 'x' * 32\n"
        "r = c.get('/leases/', HTTP_HOST='127.0.0.1')\n"
        "print(r.status_code); print(r.content.decode())",
        env=DATABASE_DOWN_ENV,
    )
    assert result.returncode == 0, result.stderr
    status, body = result.stdout.split("\n", 1)
    assert status == "503"
    assert "The database is unreachable" in body
    assert 'class="banner banner-error"' in body
    assert "Traceback" not in body and "dbpass" not in body


def test_metrics_are_refused_from_an_address_outside_the_allow_list(client: Client) -> None:
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403


def test_metrics_are_served_to_loopback_in_prometheus_format(client: Client) -> None:
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'dashboard_worker_heartbeat_age_seconds{queue="default"}' in text
    assert "dashboard_build_info" in text


def test_metrics_accept_the_configured_bearer_token(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.METRICS_TOKEN = "scrape-token-123"
    denied = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer wrong-token"
    )
    allowed = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-token-123"
    )
    assert denied.status_code == 403
    assert allowed.status_code == 200


def test_readyz_stays_ready_and_pages_are_served_while_redis_is_down(tmp_path) -> None:  # type: ignore[no-untyped-def]
    redis_port = closed_port()
    result = run_django(
        "from django.test import Client\n"
        "c = Client(raise_request_exception=False)\n"
        "r = c.get('/readyz')\n"
        "print(r.status_code); print(r.content.decode())\n"
        "r = c.get('/login/', HTTP_HOST='127.0.0.1')\n"
        "print(r.status_code)",
        env={"REDIS_URL": f"redis://127.0.0.1:{redis_port}/0", "DASHBOARD_VAR_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    status, body, login = result.stdout.strip().split("\n")
    assert status == "200"
    assert orjson.loads(body)["status"] == "degraded"
    assert orjson.loads(body)["reason"] == "broker, locks"
    assert str(redis_port) not in body
    assert login == "200"
