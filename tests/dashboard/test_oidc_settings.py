"""Single sign-on settings: half a configuration stops start-up, naming what is missing.

Each case starts a fresh process (settings are read once per process). No message may echo
the client secret, and loading settings must never contact the provider.
"""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_django
from tests.dashboard.test_settings import PRODUCTION_ENV

SECRET = "oidc-secret-7c1e9d0b5a3f"
ISSUER = "https://sso.example.org/realms/company"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OIDC_ISSUER": ISSUER}, "OIDC_CLIENT_ID is required for single sign-on"),
        (
            {"OIDC_ISSUER": ISSUER, "OIDC_CLIENT_ID": "dashboard"},
            "OIDC_CLIENT_SECRET is required for single sign-on",
        ),
        (
            {"OIDC_CLIENT_ID": "dashboard", "OIDC_CLIENT_SECRET": SECRET},
            "OIDC_OP_AUTHORIZATION_ENDPOINT is required for single sign-on without OIDC_ISSUER",
        ),
        (
            {
                "OIDC_CLIENT_ID": "dashboard",
                "OIDC_CLIENT_SECRET": SECRET,
                "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{ISSUER}/auth",
                "OIDC_OP_TOKEN_ENDPOINT": f"{ISSUER}/token",
                "OIDC_OP_USER_ENDPOINT": f"{ISSUER}/userinfo",
            },
            "OIDC_OP_JWKS_ENDPOINT is required for single sign-on without OIDC_ISSUER",
        ),
        ({"OIDC_ONLY": "true"}, "OIDC_CLIENT_ID is required for single sign-on"),
        (
            {"OIDC_OPERATOR_GROUPS": "sre", "OIDC_CLIENT_SECRET": SECRET},
            "OIDC_CLIENT_ID is required for single sign-on",
        ),
        ({"OIDC_RP_SIGN_ALGO": "none"}, "OIDC_RP_SIGN_ALGO='NONE' is not one of"),
        ({"OIDC_SCOPES": "email profile"}, "OIDC_SCOPES='email profile' must include openid"),
    ],
)
def test_incomplete_single_sign_on_stops_start_up_naming_the_variable(
    env: dict[str, str], message: str
) -> None:
    result = run_django("", env=env)
    assert result.returncode != 0
    assert message in result.stderr
    assert SECRET not in result.stderr + result.stdout


def test_production_refuses_a_provider_over_plain_http() -> None:
    env = {
        **PRODUCTION_ENV,
        "OIDC_ISSUER": "http://sso.example.org/realms/company",
        "OIDC_CLIENT_ID": "dashboard",
        "OIDC_CLIENT_SECRET": SECRET,
    }
    result = run_django("", env=env)
    assert result.returncode != 0
    assert "OIDC_ISSUER must start with one of https://" in result.stderr
    assert SECRET not in result.stderr


def test_production_names_what_is_missing_without_echoing_the_secret() -> None:
    env = {**PRODUCTION_ENV, "OIDC_ISSUER": ISSUER, "OIDC_CLIENT_SECRET": SECRET}
    result = run_django("", env=env)
    assert result.returncode != 0
    assert "OIDC_CLIENT_ID is required for single sign-on" in result.stderr
    assert SECRET not in result.stderr + result.stdout


@pytest.fixture
def listener() -> Iterator[tuple[str, list[object]]]:
    """A TCP port that records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    connections: list[object] = []

    def accept() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            connections.append(connection)
            connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/realms/company", connections
    server.close()
    thread.join(timeout=5)


def test_complete_settings_load_without_contacting_the_provider_and_read_the_secret_file(
    tmp_path: Path, listener: tuple[str, list[object]]
) -> None:
    issuer, connections = listener
    (tmp_path / "oidc-secret").write_text(SECRET + "\n")
    result = run_django(
        "from django.conf import settings as s\n"
        "from django.urls import reverse\n"
        "import hashlib\n"
        "print(s.OIDC_ISSUER, s.OIDC_RP_CLIENT_ID, s.OIDC_RP_SIGN_ALGO, s.OIDC_ONLY)\n"
        "print(s.OIDC_OPERATOR_GROUPS, s.OIDC_GROUPS_CLAIM)\n"
        "print(hashlib.sha256(s.OIDC_RP_CLIENT_SECRET.encode()).hexdigest())\n"
        "print(reverse('oidc_authentication_callback'), s.AUTHENTICATION_BACKENDS[0])\n",
        env={
            "OIDC_ISSUER": issuer + "/",
            "OIDC_CLIENT_ID": "dashboard",
            "OIDC_CLIENT_SECRET_FILE": str(tmp_path / "oidc-secret"),
            "OIDC_OPERATOR_GROUPS": "sre-oncall, platform-leads",
            "OIDC_ONLY": "yes",
        },
    )
    assert result.returncode == 0, result.stderr
    first, second, third, fourth = result.stdout.strip().splitlines()
    assert first == f"{issuer} dashboard RS256 True"
    assert second == "['sre-oncall', 'platform-leads'] groups"
    assert third == hashlib.sha256(SECRET.encode()).hexdigest()
    assert fourth == "/oidc/callback/ axes.backends.AxesStandaloneBackend"
    assert connections == [], "loading settings and URLs must not contact the provider"
