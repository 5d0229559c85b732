"""Revoking an API token is final: no admin save, stale form or update brings it back."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dashboard.models import ApiToken

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/dashboard/apitoken/"


def api_status(plain: str) -> int:
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}").get("/api/v1/me").status_code


def edit_form(token: ApiToken, **fields: str) -> dict[str, str]:
    return {"name": token.name, "revoked_at_0": "", "revoked_at_1": "", **fields}


@pytest.fixture
def root_client(client: Client, admin_user: Any) -> Client:
    client.force_login(admin_user)
    return client


def test_a_revoked_token_saved_in_admin_with_an_empty_revocation_stays_refused(
    root_client: Client, django_user_model: Any
) -> None:
    bot = django_user_model.objects.create_user("bot")
    token, plain = ApiToken.issue(bot, name="ci")
    assert api_status(plain) == 200
    root_client.post(CHANGELIST, {"action": "revoke", "_selected_action": [token.pk]})
    assert api_status(plain) == 401

    change = f"{CHANGELIST}{token.pk}/change/"
    response = root_client.post(change, edit_form(token, name="ci again"))
    assert api_status(plain) == 401, "the saved form brought the token back"
    assert response.status_code == 403
    page = root_client.get(change).content.decode()
    assert 'name="revoked_at_0"' not in page, "a revoked token's page only shows it"


def test_a_form_opened_before_the_revocation_does_not_undo_it(
    root_client: Client, django_user_model: Any
) -> None:
    token, plain = ApiToken.issue(django_user_model.objects.create_user("bot"), name="ci")
    stale = ApiToken.objects.get(pk=token.pk)
    token.revoke()
    stale.name = "renamed"
    stale.save()
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    assert api_status(plain) == 401


def test_no_update_clears_a_revocation(django_user_model: Any) -> None:
    token, plain = ApiToken.issue(django_user_model.objects.create_user("bot"))
    token.revoke()
    with pytest.raises(ValueError, match="cannot be restored"):
        ApiToken.objects.filter(pk=token.pk).update(revoked_at=None)
    assert api_status(plain) == 401
