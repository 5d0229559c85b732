"""Resizing a nodegroup: the form's checks, one call to NKS per request, and progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.db import connections
from django.test import Client
from django.utils import timezone

from fakes.nks import FakeNks
from leases.models import Node
from nks.models import NksAccount, NksCluster, NksNodegroup, ResizeRequest, ResizeState
from nks.poller import poll_account
from nks.resize_progress import advance_resize, follow_resize, sweep_resizes
from nks.resizes import UNCERTAIN_GIVE_UP, ResizeConflict, request_resize, submit_resize
from tests.nks.nodes import nodes_like_the_fake
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db

RESIZE_POSTS = r"/v1/clusters/[^/]+/actions/resize"


def group(cluster: str, name: str) -> NksNodegroup:
    return NksNodegroup.objects.select_related("cluster").get(cluster__name=cluster, name=name)


def resize_url(nodegroup: NksNodegroup) -> str:
    return f"/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/resize/"


def page_url(nodegroup: NksNodegroup) -> str:
    return f"/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/"


def follow(request_id: int) -> ResizeState:
    """One follow-up check now (as the task does every few seconds)."""
    ResizeRequest.objects.filter(pk=request_id).update(last_checked_at=None)
    follow_resize(request_id)
    return ResizeState(ResizeRequest.objects.get(pk=request_id).state)


def posts(fake: FakeNks) -> list[Any]:
    return fake.requests_seen(RESIZE_POSTS, method="POST")


def make_request(nodegroup: NksNodegroup, user: Any, to: int, **kwargs: Any) -> ResizeRequest:
    return request_resize(
        user=user,
        nodegroup=nodegroup,
        node_count=to,
        nodes_to_remove=kwargs.pop("nodes_to_remove", []),
        reason=kwargs.pop("reason", "load test"),
        **kwargs,
    )


# --- The form's checks -------------------------------------------------------------------------


def _set(cluster: str, name: str, **fields: Any) -> Callable[[], None]:
    def apply() -> None:
        NksNodegroup.objects.filter(cluster__name=cluster, name=name).update(**fields)

    return apply


def _set_cluster(**fields: Any) -> Callable[[], None]:
    def apply() -> None:
        NksCluster.objects.filter(name="prod-api").update(**fields)

    return apply


def _nothing() -> None:
    return None


def _instances(cluster: str, nodegroup: str) -> list[str]:
    """Instance UUIDs of the watched cluster's Nodes labelled with the nodegroup, by name."""
    nodes = Node.objects.filter(cluster__name=cluster, nodegroup_label=nodegroup).order_by("name")
    return [node.provider_id.removeprefix("openstack:///") for node in nodes]


def _victims(count: int) -> list[str]:
    return _instances("prod-api", "default-worker")[:count]


@pytest.fixture
def watched(polled: NksAccount, fake_nks: FakeNks) -> NksAccount:
    """prod-api polled and watched: a Node and heartbeat Lease per node of the fake."""
    nodes_like_the_fake(fake_nks, "prod-api")
    return polled


INVALID = [
    ("not a number", _nothing, {"node_count": "three"}, "Enter a whole number."),
    ("zero", _nothing, {"node_count": "0"}, "greater than or equal to 1"),
    ("over the quota", _nothing, {"node_count": "11"}, "less than or equal to 10"),
    (
        "above the nodegroup maximum",
        _set("prod-api", "default-worker", max_node_count=4),
        {"node_count": "5"},
        "has a maximum of 4 nodes.",
    ),
    ("same size", _nothing, {"node_count": "3"}, "already has 3 nodes: no change."),
    (
        "nodegroup busy",
        _set("prod-api", "default-worker", status="UPDATE_IN_PROGRESS"),
        {"node_count": "4"},
        "is UPDATE_IN_PROGRESS: wait for that operation to finish.",
    ),
    (
        "cluster busy",
        _set_cluster(status="UPDATE_IN_PROGRESS"),
        {"node_count": "4"},
        "Cluster prod-api is UPDATE_IN_PROGRESS",
    ),
    (
        "autoscaler on",
        _set("prod-api", "default-worker", autoscaler_enabled=True),
        {"node_count": "4"},
        "The cluster autoscaler is enabled on default-worker",
    ),
    (
        "gone",
        _set("prod-api", "default-worker", gone_at=timezone.now()),
        {"node_count": "4"},
        "This nodegroup is gone from NKS.",
    ),
    (
        "not a worker",
        _set("prod-api", "default-worker", role="master"),
        {"node_count": "4"},
        "Only worker nodegroups can be resized",
    ),
    (
        "removing nodes while scaling out",
        _nothing,
        {"node_count": "4", "nodes_to_remove": "first"},
        "Nodes can only be removed when scaling in.",
    ),
    (
        "too few nodes chosen",
        _nothing,
        {"node_count": "1", "nodes_to_remove": "first", "confirm_name": "default-worker"},
        "removes 2 nodes: choose exactly 2 (chosen: 1).",
    ),
    (
        "a node of another nodegroup",
        _nothing,
        {"node_count": "2", "nodes_to_remove": "stranger", "confirm_name": "default-worker"},
        "is not a node of nodegroup default-worker.",
    ),
    (
        "no confirmation",
        _nothing,
        {"node_count": "2", "nodes_to_remove": "first"},
        "Removing nodes needs confirmation: type default-worker exactly.",
    ),
    (
        "wrong confirmation",
        _nothing,
        {"node_count": "2", "nodes_to_remove": "first", "confirm_name": "default"},
        "Removing nodes needs confirmation",
    ),
    ("no reason", _nothing, {"node_count": "4", "reason": ""}, "Say why"),
]


@pytest.mark.parametrize(
    ("setup", "data", "message"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_the_form_refuses_every_invalid_combination(
    watched: NksAccount,
    operator_client: Client,
    django_capture_on_commit_callbacks: Any,
    setup: Callable[[], None],
    data: dict[str, str],
    message: str,
) -> None:
    setup()
    nodegroup = group("prod-api", "default-worker")
    form = {"reason": "more capacity", **data}
    if form.get("nodes_to_remove") == "first":
        form["nodes_to_remove"] = _victims(1)[0]
    elif form.get("nodes_to_remove") == "stranger":
        form["nodes_to_remove"] = _instances("prod-api", "batch-worker")[0]
    with django_capture_on_commit_callbacks() as callbacks:
        response = operator_client.post(resize_url(nodegroup), form, follow=True)
    assert_refused_back_on_the_page(response)
    text = response.content.decode()
    assert message.replace("'", "&#x27;") in text
    assert ResizeRequest.objects.count() == 0 and callbacks == []


def test_below_the_nodegroup_minimum_names_it(watched: NksAccount, operator_client: Client) -> None:
    NksNodegroup.objects.filter(name="default-worker").update(min_node_count=3)
    nodegroup = group("prod-api", "default-worker")
    victim = _victims(1)
    response = operator_client.post(
        resize_url(nodegroup),
        {"node_count": "2", "nodes_to_remove": victim, "reason": "x", "confirm_name": "x"},
        follow=True,
    )
    assert_refused_back_on_the_page(response)
    assert "default-worker has a minimum of 3 nodes." in response.content.decode()


def test_engineers_see_no_form_and_cannot_post(polled: NksAccount, engineer_client: Client) -> None:
    nodegroup = group("prod-api", "default-worker")
    text = engineer_client.get(page_url(nodegroup)).content.decode()
    assert "Target node count" not in text
    response = engineer_client.post(resize_url(nodegroup), {"node_count": "4", "reason": "x"})
    assert response.status_code == 403
    assert ResizeRequest.objects.count() == 0


def test_the_form_needs_a_csrf_token(polled: NksAccount, operator: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    response = client.post(resize_url(group("prod-api", "default-worker")), {"node_count": "4"})
    assert response.status_code == 403
    assert ResizeRequest.objects.count() == 0


# --- One request, one call -----------------------------------------------------------------


def test_a_valid_post_records_the_request_and_the_task_calls_nks_once(
    polled: NksAccount,
    operator_client: Client,
    fake_nks: FakeNks,
    django_capture_on_commit_callbacks: Any,
) -> None:
    nodegroup = group("prod-api", "default-worker")
    with django_capture_on_commit_callbacks() as callbacks:
        response = operator_client.post(
            resize_url(nodegroup), {"node_count": "4", "reason": "Black Friday"}
        )
    request = ResizeRequest.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/resizes/{request.pk}/"
    assert len(callbacks) == 1, "the task is queued once, after the commit"
    assert (request.state, request.from_count, request.to_count) == ("pending", 3, 4)
    assert (request.username, request.reason, request.source) == ("olivia", "Black Friday", "form")

    assert submit_resize(request.pk) == ResizeState.SUBMITTED
    assert submit_resize(request.pk) is None, "a replayed task finds the request taken"
    (sent,) = posts(fake_nks)
    assert sent.body == {"nodegroup": nodegroup.uuid, "node_count": 4}
    request.refresh_from_db()
    assert request.nks_called_at is not None and request.state == ResizeState.SUBMITTED

    assert follow(request.pk) == ResizeState.IN_PROGRESS
    request.refresh_from_db()
    assert request.event is not None and request.event.type == "NODEGROUP_SCALE_OUT"
    assert request.started_at is not None
    assert group("prod-api", "default-worker").status == "UPDATE_IN_PROGRESS"

    fake_nks.state.finish_all_resizes()
    assert follow(request.pk) == ResizeState.SUCCEEDED
    request.refresh_from_db()
    assert request.finished_at is not None and request.error == ""
    assert group("prod-api", "default-worker").node_count == 4
    assert len(posts(fake_nks)) == 1


def test_a_double_submit_makes_one_request_and_one_call(
    polled: NksAccount,
    operator_client: Client,
    fake_nks: FakeNks,
    django_capture_on_commit_callbacks: Any,
) -> None:
    nodegroup = group("prod-api", "default-worker")
    form = {"node_count": "5", "reason": "double-click"}
    with django_capture_on_commit_callbacks() as callbacks:
        first = operator_client.post(resize_url(nodegroup), form)
        second = operator_client.post(resize_url(nodegroup), form, follow=True)
    request = ResizeRequest.objects.get()
    assert first.status_code == 302
    assert_refused_back_on_the_page(second)
    text = second.content.decode()
    assert "already in flight" in text
    assert f'href="/clusters/resizes/{request.pk}/"' in text
    assert len(callbacks) == 1
    # Even if the task is delivered twice, NKS sees one call.
    for _ in range(2):
        submit_resize(request.pk)
    assert len(posts(fake_nks)) == 1


@pytest.mark.django_db(transaction=True)
def test_two_engineers_at_the_same_moment_make_one_request(
    fake_nks: FakeNks, nks_settings: Any, django_user_model: Any
) -> None:
    from nks.services import register_nks_account

    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    assert poll_account(account.pk).ok
    users = [django_user_model.objects.create_user(name) for name in ("ann", "bob")]
    nodegroup = group("prod-api", "default-worker")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def engineer(user: Any) -> None:
        try:
            barrier.wait()
            make_request(nodegroup, user, 4)
            outcomes.append("created")
        except ResizeConflict as conflict:
            outcomes.append(f"conflict with #{conflict.request.pk}")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=engineer, args=(user,)) for user in users]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    request = ResizeRequest.objects.get()
    assert sorted(outcomes) == [f"conflict with #{request.pk}", "created"]


# --- Scaling in ----------------------------------------------------------------------------


def test_scaling_in_removes_exactly_the_chosen_nodes(
    watched: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    nodegroup = group("prod-api", "default-worker")
    victims = _victims(2)
    response = operator_client.post(
        resize_url(nodegroup),
        {
            "node_count": "1",
            "nodes_to_remove": victims,
            "reason": "cost",
            "confirm_name": "default-worker",
        },
    )
    assert response.status_code == 302
    request = ResizeRequest.objects.get()
    assert request.nodes_to_remove == victims
    submit_resize(request.pk)
    assert posts(fake_nks)[0].body["nodes_to_remove"] == victims
    fake_nks.state.finish_all_resizes()
    assert follow(request.pk) == ResizeState.SUCCEEDED
    with fake_nks.state.lock:
        fake_group = fake_nks.state.find_cluster("prod-api").nodegroups[0]
        remaining = {node.uuid for node in fake_group.nodes}
    assert remaining.isdisjoint(victims) and len(remaining) == 1


def test_not_ready_nodes_are_preselected_for_removal(
    nks_account: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    with fake_nks.state.lock:
        legacy = fake_nks.state.find_cluster("legacy-batch")
        sick = legacy.nodegroups[0].nodes[2]
        sick.ready = False
        healthy = legacy.nodegroups[0].nodes[0]
    assert poll_account(nks_account.pk).ok
    nodes_like_the_fake(fake_nks, "legacy-batch")
    text = operator_client.get(page_url(group("legacy-batch", "default-worker"))).content.decode()
    checkbox = text.split(f'value="{sick.uuid}"', 1)[1].split(">", 1)[0]
    assert "checked" in checkbox
    assert f"{sick.name} (NotReady: KubeletNotReady) · {sick.uuid}" in text
    assert "checked" not in text.split(f'value="{healthy.uuid}"', 1)[1].split(">", 1)[0]


# --- NKS says no, or says nothing clear ----------------------------------------------------


def test_a_resize_nks_fails_is_failed_with_its_reason(
    polled: NksAccount, operator: Any, fake_nks: FakeNks
) -> None:
    request = make_request(group("staging-web", "gpu-worker"), operator, 2)
    assert submit_resize(request.pk) == ResizeState.SUBMITTED
    assert follow(request.pk) == ResizeState.IN_PROGRESS
    fake_nks.state.finish_all_resizes()
    assert follow(request.pk) == ResizeState.FAILED
    request.refresh_from_db()
    assert "Quota exceeded for instances" in request.error
    assert request.finished_at is not None


@pytest.mark.parametrize(("status", "text"), [(400, "Bad Request"), (409, "Conflict")])
def test_a_refused_call_fails_the_request_and_is_not_retried(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, status: int, text: str
) -> None:
    fake_nks.fail_next(RESIZE_POSTS, status, method="POST")
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    assert submit_resize(request.pk) == ResizeState.FAILED
    request.refresh_from_db()
    assert f"{status} {text}" in request.error
    assert request.error_status == status
    assert len(posts(fake_nks)) == 1


def test_a_server_error_leaves_the_outcome_unknown_until_nks_shows_nothing(
    polled: NksAccount, operator: Any, fake_nks: FakeNks
) -> None:
    fake_nks.fail_next(RESIZE_POSTS, 500, method="POST")
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    assert submit_resize(request.pk) == ResizeState.UNCERTAIN
    request.refresh_from_db()
    assert "may or may not have been applied" in request.error
    assert follow(request.pk) == ResizeState.UNCERTAIN, "no evidence yet either way"
    assert len(posts(fake_nks)) == 1, "never sent again"
    with time_machine.travel(timezone.now() + UNCERTAIN_GIVE_UP + timedelta(seconds=5)):
        assert follow(request.pk) == ResizeState.FAILED
    request.refresh_from_db()
    assert "most likely not applied" in request.error


def test_a_timed_out_call_that_nks_carried_out_is_found_and_followed(
    polled: NksAccount, operator: Any, fake_nks: FakeNks, settings: Any
) -> None:
    settings.NKS_HTTP_TIMEOUT = 1
    fake_nks.delay_next(RESIZE_POSTS, 1.3, method="POST")
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    assert submit_resize(request.pk) == ResizeState.UNCERTAIN
    request.refresh_from_db()
    assert request.error_kind == "timeout"
    deadline = time.monotonic() + 5
    while not posts(fake_nks) or posts(fake_nks)[0].status is None:
        assert time.monotonic() < deadline, "the fake never handled the delayed call"
        time.sleep(0.05)
    assert follow(request.pk) == ResizeState.IN_PROGRESS
    fake_nks.state.finish_all_resizes()
    assert follow(request.pk) == ResizeState.SUCCEEDED
    assert len(posts(fake_nks)) == 1


def test_an_accepted_resize_that_never_starts_fails_after_the_follow_window(
    polled: NksAccount, operator: Any, settings: Any
) -> None:
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    called = timezone.now() - timedelta(minutes=settings.NKS_RESIZE_FOLLOW_MINUTES + 1)
    ResizeRequest.objects.filter(pk=request.pk).update(
        state=ResizeState.SUBMITTED, nks_called_at=called
    )
    request = ResizeRequest.objects.select_related("nodegroup").get(pk=request.pk)
    assert advance_resize(request, timezone.now()) == ResizeState.FAILED
    request.refresh_from_db()
    assert "showed no sign of starting it" in request.error


def test_nothing_is_sent_when_the_nodegroup_changed_since_the_form(
    polled: NksAccount, operator: Any, fake_nks: FakeNks
) -> None:
    request = make_request(group("prod-api", "default-worker"), operator, 5)
    with fake_nks.state.lock:
        prod = fake_nks.state.find_cluster("prod-api")
        fake_nks.state.add_nodes(prod, prod.nodegroups[0], 1)
    assert submit_resize(request.pk) == ResizeState.FAILED
    request.refresh_from_db()
    assert "has 4 nodes in NKS now, not the 3" in request.error
    assert "Nothing was sent to NKS." in request.error
    assert posts(fake_nks) == []


def test_a_request_whose_worker_died_before_sending_is_failed_not_resent(
    polled: NksAccount, operator: Any, fake_nks: FakeNks
) -> None:
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    ResizeRequest.objects.filter(pk=request.pk).update(
        state=ResizeState.SUBMITTING, created_at=timezone.now() - timedelta(minutes=3)
    )
    request = ResizeRequest.objects.select_related("nodegroup").get(pk=request.pk)
    assert advance_resize(request, timezone.now()) == ResizeState.FAILED
    assert submit_resize(request.pk) is None
    assert posts(fake_nks) == []


def test_the_sweep_resends_lost_tasks_and_restarts_quiet_follow_ups(
    polled: NksAccount, operator: Any
) -> None:
    queued = make_request(group("prod-api", "default-worker"), operator, 4)
    followed = make_request(group("staging-web", "gpu-worker"), operator, 2)
    ResizeRequest.objects.filter(pk=followed.pk).update(state=ResizeState.SUBMITTED)
    now = timezone.now()
    assert sweep_resizes(now).resent == [], "a fresh request's task is still on its way"
    sweep = sweep_resizes(now + timedelta(minutes=1))
    assert sweep.resent == [queued.pk]
    assert sweep.followed == [followed.pk]


def test_the_regular_poll_advances_requests_in_flight(
    polled: NksAccount, operator: Any, fake_nks: FakeNks
) -> None:
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    submit_resize(request.pk)
    fake_nks.state.finish_all_resizes()
    assert poll_account(polled.pk).ok
    request.refresh_from_db()
    assert request.state == ResizeState.SUCCEEDED


# --- Pages ---------------------------------------------------------------------------------


def test_the_request_page_follows_the_request_until_it_is_done(
    polled: NksAccount, operator: Any, operator_client: Client, fake_nks: FakeNks
) -> None:
    request = make_request(group("prod-api", "default-worker"), operator, 4)
    url = f"/clusters/resizes/{request.pk}/"
    text = operator_client.get(url).content.decode()
    assert 'data-resize-state="pending"' in text and 'hx-trigger="every 2s"' in text
    submit_resize(request.pk)
    follow(request.pk)
    partial = operator_client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="resize-request")
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="resize-request"')
    assert 'data-resize-state="in_progress"' in body and "NODEGROUP_SCALE_OUT" in body
    fake_nks.state.finish_all_resizes()
    follow(request.pk)
    body = operator_client.get(
        url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="resize-request"
    ).content.decode()
    assert 'data-resize-state="succeeded"' in body
    assert "hx-trigger" not in body, "a finished request stops refreshing"
    progress = operator_client.get(
        page_url(group("prod-api", "default-worker")),
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="resize-progress",
    ).content.decode()
    assert progress.lstrip().startswith('<section id="resize-progress"')
    assert 'data-resize-state="succeeded"' in progress


def test_the_audit_page_filters_by_cluster_user_and_outcome(
    polled: NksAccount, operator: Any, engineer_client: Client, django_user_model: Any
) -> None:
    other = django_user_model.objects.create_user("sam")
    done = make_request(group("prod-api", "default-worker"), operator, 4)
    ResizeRequest.objects.filter(pk=done.pk).update(state=ResizeState.SUCCEEDED)
    make_request(group("staging-web", "gpu-worker"), other, 2, reason="GPU jobs queued")
    staging = NksCluster.objects.get(name="staging-web")

    def listed(query: str) -> list[str]:
        text = engineer_client.get(f"/clusters/resizes/?{query}").content.decode()
        return sorted(chunk.split('"', 1)[0] for chunk in text.split('data-resize="')[1:])

    assert listed("") == sorted([str(done.pk), str(done.pk + 1)])
    assert listed(f"cluster={staging.uuid}") == [str(done.pk + 1)]
    assert listed("user=olivia") == [str(done.pk)]
    assert listed("outcome=succeeded") == [str(done.pk)]
    assert listed("outcome=in_flight") == [str(done.pk + 1)]
    text = engineer_client.get("/clusters/resizes/").content.decode()
    assert "GPU jobs queued" in text
