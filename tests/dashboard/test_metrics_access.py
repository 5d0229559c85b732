"""Who may read /metrics: in production only the token's bearer; forwarded addresses are
believed only from a trusted proxy.

Behind an ingress every request's peer is the ingress pod, a private address: an address
allow-list of private ranges let the whole internet scrape. The production cases run in a
fresh process with the production settings, as a pod would.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.conftest import run_django
from tests.dashboard.test_settings import PRODUCTION_ENV

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-0123456789"
# What the old deploy/kubernetes/configmap.yaml allowed: every private range.
PRIVATE_RANGES = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,127.0.0.1/32"
# The ingress pod: the peer of every request that came in from the internet.
INGRESS_POD = "10.244.1.7"


def _production_answers(env: dict[str, str], requests: list[dict[str, str]]) -> list[int]:
    """The status of each /metrics request, sent in a production process.

    Refusals are answered before any database read; the database of PRODUCTION_ENV is not
    reachable, so only the access decision is exercised here.
    """
    result = run_django(
        "import json, sys\nfrom django.test import Client\n"
        # A granted request reads the unreachable database: a 500, not a crash.
        "c = Client(raise_request_exception=False)\n"
        f"requests = json.loads({json.dumps(json.dumps(requests))})\n"
        "print(json.dumps([c.get('/metrics', **r).status_code for r in requests]))",
        env={**PRODUCTION_ENV, **env},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_without_a_token_serves_metrics_to_nobody() -> None:
    assert _production_answers(
        {"METRICS_ALLOWED_IPS": PRIVATE_RANGES},
        [{"REMOTE_ADDR": "127.0.0.1"}, {"REMOTE_ADDR": INGRESS_POD}],
    ) == [403, 403]


def test_production_refuses_a_private_peer_without_the_token() -> None:
    statuses = _production_answers(
        {"METRICS_TOKEN": TOKEN, "METRICS_ALLOWED_IPS": PRIVATE_RANGES},
        [
            {"REMOTE_ADDR": INGRESS_POD},
            {"REMOTE_ADDR": "127.0.0.1"},
            {"REMOTE_ADDR": INGRESS_POD, "HTTP_AUTHORIZATION": "Bearer wrong-token"},
        ],
    )
    assert statuses == [403, 403, 403]


def test_production_refusal_says_a_token_is_needed() -> None:
    result = run_django(
        "from django.test import Client\n"
        "r = Client().get('/metrics', REMOTE_ADDR='127.0.0.1')\n"
        "print(r.status_code, r.content.decode())",
        env={**PRODUCTION_ENV, "METRICS_TOKEN": TOKEN},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == '403 {"error": "metrics need a bearer token"}'


def test_production_serves_the_token_bearer(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION = True
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = []
    response = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION=f"Bearer {TOKEN}"
    )
    assert response.status_code == 200
    assert "dashboard_build_info" in response.content.decode()


def test_production_allowed_ips_narrow_where_the_token_is_accepted(
    client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.PRODUCTION = True
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_IPS = ["10.244.0.0/16"]
    bearer = f"Bearer {TOKEN}"
    assert (
        client.get("/metrics", REMOTE_ADDR="10.244.5.5", HTTP_AUTHORIZATION=bearer).status_code
        == 200
    )
    assert (
        client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION=bearer).status_code
        == 403
    )


def test_forwarded_for_from_an_untrusted_peer_is_ignored(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXY_CIDRS = []
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 403


def test_forwarded_for_is_ignored_from_a_peer_outside_the_trusted_proxies(
    client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXY_CIDRS = ["10.244.0.0/16"]
    response = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 403


def test_a_trusted_proxy_is_believed(client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXY_CIDRS = ["10.244.0.0/16"]
    settings.METRICS_ALLOWED_IPS = ["192.0.2.10/32"]
    # The client at 192.0.2.10 came in through the ingress pod.
    through_ingress = client.get(
        "/metrics", REMOTE_ADDR=INGRESS_POD, HTTP_X_FORWARDED_FOR="192.0.2.10"
    )
    # The ingress's own address is not the client's: it is in the trusted range, not allowed.
    other_client = client.get(
        "/metrics", REMOTE_ADDR=INGRESS_POD, HTTP_X_FORWARDED_FOR="198.51.100.4"
    )
    assert through_ingress.status_code == 200
    assert other_client.status_code == 403


def test_entries_the_client_wrote_left_of_the_proxy_are_not_believed(
    client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.TRUSTED_PROXY_CIDRS = ["10.244.0.0/16"]
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1/32"]
    # The client sent "X-Forwarded-For: 127.0.0.1"; the ingress appended the real peer.
    spoofed = client.get(
        "/metrics", REMOTE_ADDR=INGRESS_POD, HTTP_X_FORWARDED_FOR="127.0.0.1, 203.0.113.9"
    )
    # A chain of trusted proxies is walked through to the first untrusted hop.
    chained = client.get(
        "/metrics", REMOTE_ADDR=INGRESS_POD, HTTP_X_FORWARDED_FOR="127.0.0.1, 10.244.9.9"
    )
    garbled = client.get("/metrics", REMOTE_ADDR=INGRESS_POD, HTTP_X_FORWARDED_FOR="127.0.0.1, x")
    assert spoofed.status_code == 403
    assert chained.status_code == 200
    assert garbled.status_code == 403


def test_development_still_serves_loopback_without_a_token(client: Client) -> None:
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200


def test_a_malformed_trusted_proxy_range_stops_start_up() -> None:
    result = run_django("", env={"TRUSTED_PROXY_CIDRS": "10.0.0.0/33"})
    assert result.returncode != 0
    assert "TRUSTED_PROXY_CIDRS entry '10.0.0.0/33'" in result.stderr
