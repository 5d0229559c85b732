from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from dashboard.models import ApiToken

pytestmark = pytest.mark.django_db

PAGES = ["/", "/leases/", "/clusters/", "/alerts/"]


@pytest.mark.parametrize("path", PAGES)
def test_every_page_needs_a_login(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_admin_needs_a_login(client: Client) -> None:
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "login" in response["Location"]


def test_login_page_is_in_the_product_style(client: Client) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "css/dashboard.css" in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_logging_in_shows_the_shell_with_its_navigation(client: Client, engineer) -> None:  # type: ignore[no-untyped-def]
    response = client.post(
        "/login/", {"username": "erin", "password": "engineer-pass-123"}, follow=True
    )
    assert response.status_code == 200
    html = response.content.decode()
    for label in ("Overview", "Leases", "Clusters"):
        assert f">{label}</a>" in html
    # The open-incident badge sits inside the Alerts link, so it is part of the link's name.
    assert re.search(r'>Alerts\s*<span id="nav-alerts-badge"[^>]*>0</span>\s*</a>', html)
    assert 'aria-current="page">Overview' in html
    assert 'hx-headers=\'{"X-CSRFToken": "' in html
    assert "/static/django-htmx/" in html or "htmx" in html


def test_wrong_password_keeps_the_user_out(client: Client, engineer) -> None:  # type: ignore[no-untyped-def]
    response = client.post("/login/", {"username": "erin", "password": "nope"})
    assert response.status_code == 200
    assert "didn't match" in response.content.decode()


@pytest.mark.parametrize("path", PAGES)
def test_each_section_renders_an_honest_empty_state(engineer_client: Client, path: str) -> None:
    response = engineer_client.get(path)
    assert response.status_code == 200
    assert 'class="card empty"' in response.content.decode()


def test_logout_is_a_post_and_ends_the_session(engineer_client: Client) -> None:
    response = engineer_client.post("/logout/")
    assert response.status_code == 302
    assert engineer_client.get("/").status_code == 302


def test_operators_group_holds_the_cluster_change_permission(operator, engineer) -> None:  # type: ignore[no-untyped-def]
    group = Group.objects.get(name="operators")
    assert group.permissions.filter(codename="change_clusters").exists()
    assert operator.has_perm("dashboard.change_clusters")
    assert not engineer.has_perm("dashboard.change_clusters")


def test_htmx_request_gets_only_the_targeted_region(engineer_client: Client) -> None:
    response = engineer_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workers")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="workers"')
    assert "<html" not in html


def test_unknown_page_gets_the_styled_404(engineer_client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False
    response = engineer_client.get("/no/such/page/")
    assert response.status_code == 404
    assert "Nothing lives at this address" in response.content.decode()


def _issue_token(username: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", username, stdout=out, stderr=err)
    return out.getvalue().strip()


def test_api_without_credentials_is_401_json(client: Client) -> None:
    response = client.get("/api/v1/me")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_api_token_from_the_command_authenticates(client: Client, engineer) -> None:  # type: ignore[no-untyped-def]
    token = _issue_token("erin")
    response = client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    assert response.json() == {"username": "erin", "can_change_clusters": False}
    assert ApiToken.objects.get().last_used_at is not None


def test_api_token_is_stored_hashed(engineer) -> None:  # type: ignore[no-untyped-def]
    token = _issue_token("erin")
    stored = ApiToken.objects.get()
    assert token not in {stored.token_hash, stored.prefix, stored.name}
    assert stored.prefix == token[:10]


def test_wrong_and_revoked_tokens_get_the_same_generic_401(client: Client, engineer) -> None:  # type: ignore[no-untyped-def]
    token = _issue_token("erin")
    ApiToken.objects.get().revoke()
    revoked = client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {token}")
    wrong = client.get("/api/v1/me", HTTP_AUTHORIZATION="Bearer ldb_not-a-real-token")
    malformed = client.get("/api/v1/me", HTTP_AUTHORIZATION="Basic ZXJpbjpwYXNz")
    assert revoked.status_code == wrong.status_code == malformed.status_code == 401
    assert (
        revoked.json()
        == wrong.json()
        == malformed.json()
        == {"error": "invalid or missing API token"}
    )


def test_token_of_an_inactive_user_is_refused(client: Client, engineer) -> None:  # type: ignore[no-untyped-def]
    token = _issue_token("erin")
    engineer.is_active = False
    engineer.save()
    assert client.get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401


def test_api_accepts_a_logged_in_browser_session(engineer_client: Client) -> None:
    response = engineer_client.get("/api/v1/me")
    assert response.status_code == 200


def test_create_api_token_for_unknown_user_fails_clearly() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="No user named 'ghost'"):
        call_command("create_api_token", "ghost", stdout=StringIO(), stderr=StringIO())


def test_demo_user_is_created_once_and_its_password_printed_once() -> None:
    first, second = StringIO(), StringIO()
    call_command("ensure_demo_user", stdout=first)
    call_command("ensure_demo_user", stdout=second)
    assert "User: demo" in first.getvalue()
    assert "Password:" in first.getvalue()
    assert second.getvalue() == ""
    from django.contrib.auth import get_user_model

    demo = get_user_model().objects.get(username="demo")
    assert demo.has_perm("dashboard.change_clusters")
    password = first.getvalue().split("Password:")[1].split()[0]
    assert demo.check_password(password)
