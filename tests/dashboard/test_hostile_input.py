"""NUL characters, odd bearer tokens and database errors that are not outages.

On PostgreSQL a NUL in any value that reached a query raised DataError, which the error
page called "database unreachable" (503). These run on both databases; CI's PostgreSQL run
is the one that proves it.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.test import Client, RequestFactory

from dashboard.models import ApiToken
from dashboard.views import server_error
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db

METRICS_TOKEN = "scrape-token-123"


@pytest.fixture
def engineer_client(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    client.raise_request_exception = False
    return client


@pytest.fixture
def api(django_user_model: Any) -> Client:
    _, token = ApiToken.issue(django_user_model.objects.create_user("script"), name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)


@pytest.mark.parametrize(
    "url",
    [
        "/leases/prod/kube%00system/kube-scheduler/",
        "/clusters/a%00b/",
        "/clusters/a/nodegroups/b%00/",
        "/alerts/?q=%00",
        "/leases/?namespace=kube-system%00",
        "/leases/?q%00=x",
        "/clusters/resizes/?user=a%00b",
        "/leases/?after=i.1%00",
    ],
)
def test_a_nul_in_a_page_url_is_a_400_page(engineer_client: Client, url: str) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    response = engineer_client.get(url)

    assert response.status_code == 400
    text = response.content.decode()
    assert "Bad request." in text and "NUL character" in text
    assert 'href="/"' in text


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/leases/prod/kube%00system/kube-scheduler",
        "/api/v1/leases?q=%00",
        "/api/v1/alerts?state=open%00",
        "/api/v1/nks/clusters/a%00/nodegroups/b/resize",
    ],
)
def test_a_nul_in_an_api_url_is_a_json_400(api: Client, url: str) -> None:
    response = api.get(url)

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "NUL character" in orjson.loads(response.content)["error"]


def test_a_nul_in_a_cookie_is_a_400_before_the_session_is_looked_up(client: Client) -> None:
    client.raise_request_exception = False
    client.cookies["sessionid"] = "abcdefgh\x00ijklmnop"

    response = client.get("/leases/")

    assert response.status_code == 400


def test_requests_without_nul_are_untouched(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    assert engineer_client.get("/leases/?q=sched%2500").status_code == 200
    assert engineer_client.get("/leases/prod/kube-system/kube-scheduler/").status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        "Bearer ß²𝟘",
        "Bearer \u202escrape-token-123",
        "Bearer scrape\x00token",
        "Bearer " + "x" * 100_000,
        "Bearer \udcff",
    ],
)
def test_odd_metrics_bearers_are_refused_not_a_500(
    client: Client, settings: Any, header: str
) -> None:
    settings.METRICS_TOKEN = METRICS_TOKEN
    client.raise_request_exception = False

    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION=header)

    assert response.status_code == 403


def test_a_non_ascii_metrics_token_still_matches_itself(client: Client, settings: Any) -> None:
    settings.METRICS_TOKEN = "jeton-ß"

    response = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer jeton-ß"
    )

    assert response.status_code == 200


@pytest.mark.parametrize(
    "header",
    [
        "Bearer ß²𝟘",
        "Bearer abc\x00def",
        "Bearer " + "x" * 100_000,
        "Bearer \u200f\u202e",
        "bearer",
        "Basic Zm9vOmJhcg==",
    ],
)
def test_odd_api_bearers_are_a_401(header: str) -> None:
    client = Client(HTTP_AUTHORIZATION=header, raise_request_exception=False)

    response = client.get("/api/v1/leases")

    assert response.status_code == 401
    assert orjson.loads(response.content)["error"] == "invalid or missing API token"


@pytest.mark.parametrize("error", [DataError, IntegrityError])
def test_a_value_the_database_refused_is_a_500_not_an_outage(
    rf: RequestFactory, error: type[Exception]
) -> None:
    for path in ("/leases/", "/api/v1/leases"):
        try:
            raise error("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        except error:
            response = server_error(rf.get(path))
        assert response.status_code == 500
        assert b"unreachable" not in response.content


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_a_lost_database_connection_is_still_a_503(
    rf: RequestFactory, error: type[Exception]
) -> None:
    try:
        raise error("connection refused")
    except error:
        response = server_error(rf.get("/api/v1/leases"))
    assert response.status_code == 503
    assert "unreachable" in orjson.loads(response.content)["error"]
