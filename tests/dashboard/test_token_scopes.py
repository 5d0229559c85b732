"""API token scopes: read tokens read, write tokens also resize, and only operators get them."""

from __future__ import annotations

from io import StringIO
from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory

from dashboard.api import api_view, json_response
from dashboard.models import ApiToken
from nks.models import NksAccount, NksNodegroup, ResizeRequest

# The NKS fixtures (a fake NKS over real HTTP, its demo account polled once).
from tests.nks.conftest import fake_nks, nks_account, nks_settings, polled  # noqa: F401

pytestmark = pytest.mark.django_db

RESIZE = {"node_count": 4, "reason": "queue depth above 1000"}


def make_user(django_user_model: Any, username: str, *, operator: bool) -> Any:
    user = django_user_model.objects.create_user(username)
    if operator:
        user.groups.add(Group.objects.get(name="operators"))
    return user


def bearer(user: Any, scope: str) -> Client:
    _, plain = ApiToken.issue(user, name="tests", scope=scope)
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}")


def resize_path() -> str:
    nodegroup = NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )
    return f"/api/v1/nks/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/resize"


def post_resize(client: Client) -> tuple[int, dict[str, Any]]:
    response = client.post(resize_path(), orjson.dumps(RESIZE), content_type="application/json")
    assert response["Content-Type"] == "application/json"
    return response.status_code, orjson.loads(response.content)


def create_token(username: str, *args: str) -> str:
    out = StringIO()
    call_command("create_api_token", username, *args, stdout=out, stderr=StringIO())
    return out.getvalue().strip()


def test_a_read_token_of_an_operator_gets_403_naming_the_missing_scope(
    polled: NksAccount,  # noqa: F811
    django_user_model: Any,
) -> None:
    client = bearer(make_user(django_user_model, "bot", operator=True), ApiToken.Scope.READ)

    status, body = post_resize(client)

    assert status == 403
    assert body == {
        "error": "this token's scope is read; resizing needs a token with scope write",
        "required_scope": "write",
    }
    assert ResizeRequest.objects.count() == 0
    # The same token still reads.
    assert client.get("/api/v1/nks/clusters").status_code == 200


def test_a_write_token_of_an_operator_is_accepted(
    polled: NksAccount,  # noqa: F811
    django_user_model: Any,
) -> None:
    client = bearer(make_user(django_user_model, "bot", operator=True), ApiToken.Scope.WRITE)

    status, body = post_resize(client)

    assert status == 202, body
    request = ResizeRequest.objects.get()
    assert (body["id"], request.username, request.source) == (request.pk, "bot", "api")


def test_a_write_token_of_a_user_who_lost_operator_rights_gets_the_permission_403(
    polled: NksAccount,  # noqa: F811
    django_user_model: Any,
) -> None:
    user = make_user(django_user_model, "bot", operator=True)
    client = bearer(user, ApiToken.Scope.WRITE)
    user.groups.clear()

    status, body = post_resize(client)

    assert status == 403
    assert "operators" in body["error"] and "required_scope" not in body
    assert ResizeRequest.objects.count() == 0


def test_a_browser_session_is_not_limited_by_token_scopes(
    polled: NksAccount,  # noqa: F811
    django_user_model: Any,
) -> None:
    client = Client()
    client.force_login(make_user(django_user_model, "olivia", operator=True))

    status, body = post_resize(client)

    assert status == 202, body


def test_a_view_accepting_writes_needs_a_write_token_unless_it_declares_otherwise(
    django_user_model: Any,
) -> None:
    @api_view(methods=("POST",))
    def undeclared(request: HttpRequest) -> HttpResponse:
        return json_response({"ok": True})

    @api_view(methods=("POST",), scope=ApiToken.Scope.READ)
    def declared_read(request: HttpRequest) -> HttpResponse:
        return json_response({"ok": True})

    _, plain = ApiToken.issue(make_user(django_user_model, "bot", operator=True))
    factory = RequestFactory(HTTP_AUTHORIZATION=f"Bearer {plain}")

    refused = undeclared(factory.post("/api/v1/anything"))
    allowed = declared_read(factory.post("/api/v1/anything"))

    assert refused.status_code == 403
    assert orjson.loads(refused.content)["required_scope"] == "write"
    assert "this endpoint needs a token with scope write" in orjson.loads(refused.content)["error"]
    assert allowed.status_code == 200


def test_create_api_token_defaults_to_scope_read(django_user_model: Any) -> None:
    make_user(django_user_model, "grafana", operator=True)

    plain = create_token("grafana")

    token = ApiToken.objects.get()
    assert token.scope == ApiToken.Scope.READ
    assert token.prefix == plain[:10]


def test_create_api_token_issues_a_write_token_to_an_operator(django_user_model: Any) -> None:
    make_user(django_user_model, "bot", operator=True)

    create_token("bot", "--scope", "write")

    assert ApiToken.objects.get().scope == ApiToken.Scope.WRITE


def test_create_api_token_refuses_a_write_token_for_a_non_operator(
    django_user_model: Any,
) -> None:
    make_user(django_user_model, "grafana", operator=False)

    with pytest.raises(CommandError, match="'grafana' is not an operator") as refused:
        create_token("grafana", "--scope", "write")

    assert "operators group" in str(refused.value)
    assert ApiToken.objects.count() == 0


def test_admin_shows_scope_created_and_last_used(
    client: Client, django_user_model: Any, admin_user: Any
) -> None:
    bot = make_user(django_user_model, "bot", operator=True)
    write, plain = ApiToken.issue(bot, name="autoscaler", scope=ApiToken.Scope.WRITE)
    ApiToken.issue(bot, name="grafana")
    Client(HTTP_AUTHORIZATION=f"Bearer {plain}").get("/api/v1/me")  # records the last use
    client.force_login(admin_user)

    changelist = client.get("/admin/dashboard/apitoken/").content.decode()
    detail = client.get(f"/admin/dashboard/apitoken/{write.pk}/change/").content.decode()

    for column in ("column-scope", "column-created_at", "column-last_used_at"):
        assert column in changelist
    assert '<td class="field-scope">write (also resizes)</td>' in changelist
    assert '<td class="field-scope">read (GET endpoints)</td>' in changelist
    for field in ("field-scope", "field-created_at", "field-last_used_at"):
        assert field in detail
    # Read-only in the detail: the scope is chosen when the token is issued.
    assert 'name="scope"' not in detail


@pytest.mark.django_db(transaction=True)
def test_tokens_issued_before_scopes_existed_become_read(django_user_model: Any) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("dashboard", "0001_initial")])
    user = django_user_model.objects.create_user("old-script")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO dashboard_apitoken"
            " (user_id, name, prefix, token_hash, created_at) VALUES (%s, '', 'ldb_old', 'x', %s)",
            [user.pk, "2026-01-01T00:00:00Z"],
        )

    MigrationExecutor(connection).migrate([("dashboard", "0002_apitoken_scope")])

    assert ApiToken.objects.get().scope == ApiToken.Scope.READ
    # Back to the newest schema: later tests in this process use the tables added since.
    latest = MigrationExecutor(connection)
    latest.migrate(latest.loader.graph.leaf_nodes())
