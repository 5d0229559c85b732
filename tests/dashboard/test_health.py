from __future__ import annotations

import orjson
import pytest
from django.test import Client

from tests.conftest import run_django

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


def test_readyz_is_503_with_a_reason_when_the_broker_is_down(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.CELERY_BROKER_URL = "redis://:brokerpass@127.0.0.1:1/0"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["broker"]["ok"] is False
    assert "broker unreachable" in body["reason"]
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
    assert "database unreachable" in data["reason"]
    assert "dbpass" not in body


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
