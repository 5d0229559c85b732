"""Every admin action takes the change permission: a view-only staff user runs none.

Walks every registered admin: a view-only user is offered no action and a posted one does
nothing; a staff user who may change (and delete) rows is offered each one. Then the actions that
matter most are run through the changelist as each, and their effect looked for.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client, RequestFactory
from django.utils import timezone

from alerts.models import AlertChannel, ChannelKind, DeliveryState, Notification
from dashboard.models import ApiToken
from nks.models import ResizeRequest, ResizeState
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, make_resize

pytestmark = pytest.mark.django_db


def staff(django_user_model: Any, username: str, *codenames: str) -> Any:
    user = django_user_model.objects.create_user(username, is_staff=True)
    perms = Permission.objects.none()
    for prefix in codenames:
        perms = perms | Permission.objects.filter(codename__startswith=prefix)
    user.user_permissions.set(perms)
    return django_user_model.objects.get(pk=user.pk)  # forget the permission cache


def declared_actions(model_admin: admin.ModelAdmin) -> list[str]:
    return [
        action if isinstance(action, str) else action.__name__ for action in model_admin.actions
    ]


def offered(model_admin: admin.ModelAdmin, user: Any) -> set[str]:
    request = RequestFactory().get("/admin/")
    request.user = user
    return set(model_admin.get_actions(request))


def test_a_view_only_user_is_offered_no_action_and_a_change_user_every_one(
    django_user_model: Any,
) -> None:
    viewer = staff(django_user_model, "viewer", "view_")
    changer = staff(django_user_model, "changer", "view_", "change_", "delete_")
    checked = 0
    for model_admin in admin.site._registry.values():
        names = declared_actions(model_admin)
        assert offered(model_admin, viewer) == set(), model_admin
        assert offered(model_admin, changer) >= set(names), model_admin
        checked += len(names)
    assert checked >= 4  # revoke, give_up, send_test_message, retry_now at least


@pytest.fixture
def rows(django_user_model: Any) -> dict[str, Any]:
    operator = django_user_model.objects.create_user("olivia")
    token, _plain = ApiToken.issue(operator, name="ci")
    group = make_nodegroup(make_nks_cluster(make_account()))
    resize = make_resize(group, ResizeState.IN_PROGRESS, nks_called_at=timezone.now())
    channel = AlertChannel.objects.create(
        name="oncall", kind=ChannelKind.SLACK, url="https://hooks.example.org/services/x"
    )
    now = timezone.now()
    failed = Notification.objects.create(
        kind="opened",
        channel=channel,
        subject="s",
        body_text="",
        body_html="",
        state=DeliveryState.FAILED,
        created_at=now,
        next_attempt_at=now,
    )
    return {"token": token, "resize": resize, "channel": channel, "notification": failed}


ACTIONS = [
    ("dashboard", "apitoken", "revoke", "token"),
    ("nks", "resizerequest", "give_up", "resize"),
    ("alerts", "alertchannel", "send_test_message", "channel"),
    ("alerts", "notification", "retry_now", "notification"),
]


def effect(name: str, rows: dict[str, Any]) -> object:
    """What each action changes, read back from the database."""
    if name == "revoke":
        return ApiToken.objects.get(pk=rows["token"].pk).revoked_at is not None
    if name == "give_up":
        return ResizeRequest.objects.get(pk=rows["resize"].pk).given_up_by != ""
    if name == "send_test_message":
        return Notification.objects.filter(channel=rows["channel"]).count() > 1
    return Notification.objects.get(pk=rows["notification"].pk).state != DeliveryState.FAILED


@pytest.mark.parametrize(("app", "model", "action", "row"), ACTIONS)
def test_each_action_is_refused_to_a_view_only_user_and_runs_for_a_change_user(
    django_user_model: Any, rows: dict[str, Any], app: str, model: str, action: str, row: str
) -> None:
    viewer = staff(django_user_model, "viewer", "view_")
    changer = staff(django_user_model, "changer", "view_", "change_", "delete_")
    url = f"/admin/{app}/{model}/"
    form = {"action": action, "_selected_action": [rows[row].pk]}
    client = Client()
    client.force_login(viewer)
    response = client.post(url, form, follow=True)
    assert response.status_code == 200
    assert effect(action, rows) is False, f"a view-only user ran {action}"

    client.force_login(changer)
    response = client.post(url, form, follow=True)
    assert response.status_code == 200
    assert effect(action, rows) is True, f"a change user could not run {action}"
