"""Giving up on a resize in admin never releases the one-resize guard while NKS may act.

The fake NKS carries the resize out over real HTTP; the guard is the request staying in
flight (and the partial unique index behind it): a second resize of the nodegroup is refused
until NKS itself shows the nodegroup no longer updating.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from fakes.nks import FakeNks
from nks.models import NksAccount, NksNodegroup, ResizeRequest, ResizeState
from nks.poller import poll_account
from nks.resize_progress import advance_resize, follow_resize
from nks.resizes import ResizeConflict, request_resize, submit_resize

pytestmark = pytest.mark.django_db

RESIZE_POSTS = r"/v1/clusters/[^/]+/actions/resize"
CHANGELIST = "/admin/nks/resizerequest/"


def nodegroup() -> NksNodegroup:
    return NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )


def resize(user: Any, to: int) -> ResizeRequest:
    return request_resize(
        user=user, nodegroup=nodegroup(), node_count=to, nodes_to_remove=[], reason="load"
    )


def state(request: ResizeRequest) -> ResizeState:
    return ResizeState(ResizeRequest.objects.get(pk=request.pk).state)


@pytest.fixture
def resize_admin(client: Client, django_user_model: Any) -> Client:
    """A staff user who may view and change resize requests (not a superuser)."""
    user = django_user_model.objects.create_user("ada", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_resizerequest", "change_resizerequest"])
    )
    client.force_login(user)
    return client


def give_up(client: Client, request: ResizeRequest) -> str:
    response = client.post(
        CHANGELIST, {"action": "give_up", "_selected_action": [request.pk]}, follow=True
    )
    assert response.status_code == 200
    return response.content.decode()


def test_giving_up_while_nks_resizes_keeps_the_guard_until_nks_is_done(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, resize_admin: Client
) -> None:
    fake_nks.state.resize_delay = 3600  # NKS keeps resizing until the test says
    request = resize(operator, 4)
    assert submit_resize(request.pk) == ResizeState.SUBMITTED
    ResizeRequest.objects.filter(pk=request.pk).update(last_checked_at=None)
    follow_resize(request.pk)
    assert state(request) == ResizeState.IN_PROGRESS

    page = give_up(resize_admin, request)
    assert state(request) == ResizeState.IN_PROGRESS, "still in flight: NKS is resizing"
    with pytest.raises(ResizeConflict):
        resize(operator, 5)
    assert "NKS may still be resizing" in page
    request.refresh_from_db()
    assert request.given_up_by == "ada"
    assert follow_resize(request.pk) is False, "no longer followed"

    # NKS still resizing at the next poll: still guarded.
    assert poll_account(polled.pk).ok
    assert state(request) == ResizeState.IN_PROGRESS

    # NKS reports the nodegroup done while its event never settles (why one gives up). A
    # reading from before the give-up does not count; the next poll's does.
    fake_group = fake_nks.state.find_nodegroup(
        fake_nks.state.find_cluster("prod-api"), "default-worker"
    )
    fake_group.status = "UPDATE_COMPLETE"
    stale = ResizeRequest.objects.select_related("nodegroup", "event").get(pk=request.pk)
    NksNodegroup.objects.filter(pk=request.nodegroup_id).update(
        status="UPDATE_COMPLETE", polled_at=stale.given_up_at - timedelta(seconds=1)
    )
    stale = ResizeRequest.objects.select_related("nodegroup", "event").get(pk=request.pk)
    assert advance_resize(stale, stale.given_up_at) == ResizeState.IN_PROGRESS
    with pytest.raises(ResizeConflict):
        resize(operator, 5)

    assert poll_account(polled.pk).ok
    request.refresh_from_db()
    assert request.state == ResizeState.FAILED
    assert "Given up by ada; NKS then showed nodegroup default-worker UPDATE_COMPLETE" in (
        request.error
    )
    assert resize(operator, 5).state == ResizeState.PENDING, "the guard is released"


def test_a_given_up_resize_nks_completes_ends_as_nks_says(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, resize_admin: Client
) -> None:
    fake_nks.state.resize_delay = 3600
    request = resize(operator, 4)
    submit_resize(request.pk)
    give_up(resize_admin, request)
    assert state(request) == ResizeState.SUBMITTED
    fake_nks.state.finish_all_resizes()
    assert poll_account(polled.pk).ok
    assert state(request) == ResizeState.SUCCEEDED


def test_giving_up_before_anything_was_sent_ends_it_and_nothing_is_sent(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, resize_admin: Client
) -> None:
    request = resize(operator, 4)
    assert "nothing had been sent to NKS" in give_up(resize_admin, request)
    assert state(request) == ResizeState.FAILED
    assert submit_resize(request.pk) is None, "the task finds it taken"
    assert fake_nks.requests_seen(RESIZE_POSTS, method="POST") == []
    assert resize(operator, 5).state == ResizeState.PENDING


def test_the_resize_page_and_api_say_it_was_given_up_and_still_guards_the_nodegroup(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, resize_admin: Client
) -> None:
    fake_nks.state.resize_delay = 3600
    request = resize(operator, 4)
    submit_resize(request.pk)
    give_up(resize_admin, request)

    reader = Client()
    reader.force_login(operator)
    page = reader.get(f"/clusters/resizes/{request.pk}/").content.decode()
    assert "ada gave up following this resize" in page
    assert "no other resize of this nodegroup can start" in page
    answer = reader.get(f"/api/v1/nks/resize-requests/{request.pk}").json()
    assert answer["given_up_by"] == "ada"
    assert answer["given_up_at"] is not None
    assert answer["in_flight"] is True
