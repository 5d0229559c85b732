"""Response headers: the Content-Security-Policy, and no-store for signed-in pages and the API."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.test import Client

from dashboard.models import ApiToken
from tests.conftest import REPO_ROOT, run_django

pytestmark = pytest.mark.django_db

EXPECTED_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
    "base-uri": ["'self'"],
    "object-src": ["'none'"],
}
# Inline code and styles the policy refuses; mail templates are not served with it.
INLINE = re.compile(
    r"<script(?![^>]*\bsrc=)[^>]*>|<style\b|\sstyle\s*=|\son[a-z]+\s*=|javascript:|"
    # htmx runs hx-on and hx-trigger filters ("every 5s [isOn()]") through eval.
    r"hx-on[:-]|hx-trigger=\"[^\"]*\[!?[A-Za-z_$][\w$.]*\(",
    re.IGNORECASE,
)
HTMX = {"HTTP_HX_REQUEST": "true"}


def parse_policy(header: str) -> dict[str, list[str]]:
    directives = (part.split() for part in header.split(";") if part.strip())
    return {name: sources for name, *sources in directives}


def test_pages_carry_a_policy_that_allows_only_the_site_itself(
    engineer_client: Client,
) -> None:
    for path in ("/", "/leases/", "/clusters/", "/alerts/"):
        response = engineer_client.get(path)
        assert response.status_code == 200, path
        assert parse_policy(response["Content-Security-Policy"]) == EXPECTED_POLICY, path
        assert "{#" not in response.content.decode(), "a template comment was rendered"


def test_the_login_page_carries_the_policy_too(client: Client) -> None:
    response = client.get("/login/")
    assert parse_policy(response["Content-Security-Policy"]) == EXPECTED_POLICY


def test_form_action_also_allows_the_oidc_providers_origin() -> None:
    result = run_django(
        "from django.test import Client\nprint(Client().get('/login/')['Content-Security-Policy'])",
        env={
            "OIDC_OP_AUTHORIZATION_ENDPOINT": "https://sso.example.com:8443/realms/ops/auth",
            "OIDC_ISSUER": "https://sso.example.com:8443/realms/ops",
            "OIDC_CLIENT_ID": "dashboard",
            "OIDC_CLIENT_SECRET": "client-secret",
        },
    )
    assert result.returncode == 0, result.stderr
    policy = parse_policy(result.stdout.strip())
    assert policy["form-action"] == ["'self'", "https://sso.example.com:8443"]
    assert policy["script-src"] == ["'self'"]


def test_no_template_has_inline_script_style_or_handlers() -> None:
    templates = [
        path
        for folder in (REPO_ROOT / "templates", *REPO_ROOT.glob("*/templates"))
        for path in folder.rglob("*.html")
        if "email" not in path.relative_to(folder).parts
    ]
    assert len(templates) > 20
    found = [
        f"{path.relative_to(REPO_ROOT)}: {match.group(0)}"
        for path in templates
        for match in INLINE.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_static_javascript_uses_no_eval() -> None:
    for path in Path(REPO_ROOT / "static").rglob("*.js"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"\beval\s*\(|new Function|\bFunction\s*\(|setAttribute\(\"on", text)


def test_signed_in_pages_and_their_htmx_regions_are_not_stored(engineer_client: Client) -> None:
    for path, headers in (("/", {}), ("/leases/", {}), ("/leases/", HTMX), ("/alerts/", {})):
        response = engineer_client.get(path, **headers)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"], path


def test_api_answers_are_not_stored_even_errors(client: Client, engineer: Any) -> None:
    _, token = ApiToken.issue(engineer)

    answered = client.get("/api/v1/leases", HTTP_AUTHORIZATION=f"Bearer {token}")
    refused = client.get("/api/v1/leases")

    assert answered.status_code == 200 and refused.status_code == 401
    for response in (answered, refused):
        assert "no-store" in response["Cache-Control"]
    assert orjson.loads(refused.content)["error"]


def test_static_files_keep_their_cache_headers(engineer_client: Client) -> None:
    response = engineer_client.get("/static/css/dashboard.css")
    assert response.status_code == 200
    assert "no-store" not in response.get("Cache-Control", "")
    assert b".readybar" in b"".join(response.streaming_content)
