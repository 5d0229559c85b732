"""The NKS JSON API: cluster health for scripts, and resizes for automation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Group
from django.test import Client

from dashboard.models import ApiToken
from fakes.nks import FakeNks
from nks.models import NksAccount, NksNodegroup, ResizeRequest
from nks.resizes import submit_resize
from tests.nks.nodes import nodes_like_the_fake

pytestmark = pytest.mark.django_db

CLUSTER_KEYS = {
    "account",
    "uuid",
    "name",
    "status",
    "health",
    "health_status",
    "api_status",
    "node_status",
    "health_timestamp",
    "stale",
    "gone",
    "polled_at",
    "last_error",
    "nodegroups",
}
NODEGROUP_KEYS = {
    "uuid",
    "name",
    "role",
    "status",
    "node_count",
    "min_node_count",
    "max_node_count",
    "ready",
    "not_ready",
    "node_status",
    "autoscaler_enabled",
    "gone",
}


def token_client(user: Any, scope: str = ApiToken.Scope.READ) -> Client:
    _, token = ApiToken.issue(user, name="tests", scope=scope)
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.fixture
def automation(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("autoscaler-bot")
    user.groups.add(Group.objects.get(name="operators"))
    return token_client(user, ApiToken.Scope.WRITE)


@pytest.fixture
def reader(django_user_model: Any) -> Client:
    return token_client(django_user_model.objects.create_user("grafana"))


def resize_path(nodegroup: NksNodegroup) -> str:
    return f"/api/v1/nks/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/resize"


def default_worker() -> NksNodegroup:
    return NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )


def post(client: Client, path: str, body: Any, status: int) -> Any:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    response = client.post(path, raw, content_type="application/json")
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    return orjson.loads(response.content)


def test_clusters_returns_the_documented_shape(polled: NksAccount, reader: Client) -> None:
    response = reader.get("/api/v1/nks/clusters")
    assert response.status_code == 200
    results = orjson.loads(response.content)["results"]
    assert [cluster["name"] for cluster in results] == ["legacy-batch", "prod-api", "staging-web"]
    for cluster in results:
        assert set(cluster) == CLUSTER_KEYS
        for group in cluster["nodegroups"]:
            assert set(group) == NODEGROUP_KEYS
    legacy, prod, staging = results
    assert (legacy["health_status"], legacy["health"]) == ("HEALTHY", "unknown")
    assert (prod["health"], prod["stale"], prod["account"]) == ("healthy", False, "demo")
    assert prod["health_timestamp"].endswith("Z")
    gpu = next(group for group in staging["nodegroups"] if group["name"] == "gpu-worker")
    assert gpu["max_node_count"] is None and gpu["autoscaler_enabled"] is False
    default = next(group for group in staging["nodegroups"] if group["name"] == "default-worker")
    assert (default["ready"], default["not_ready"], default["node_status"]) == (
        2,
        1,
        "NOT_READY_NODE_EXIST",
    )


def test_the_api_needs_a_token(polled: NksAccount) -> None:
    assert Client().get("/api/v1/nks/clusters").status_code == 401
    assert (
        Client().post(resize_path(default_worker()), b"{}", "application/json").status_code == 401
    )


def test_a_resize_is_accepted_with_the_request_url_and_audited(
    polled: NksAccount,
    automation: Client,
    fake_nks: FakeNks,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        body = post(
            automation,
            resize_path(default_worker()),
            {"node_count": 4, "reason": "queue depth above 1000"},
            202,
        )
    request = ResizeRequest.objects.get()
    assert len(callbacks) == 1
    assert body["id"] == request.pk and body["state"] == "pending" and body["in_flight"]
    assert body["url"] == f"http://testserver/clusters/resizes/{request.pk}/"
    assert body["api_url"] == f"http://testserver/api/v1/nks/resize-requests/{request.pk}"
    assert (request.source, request.username, request.to_count) == ("api", "autoscaler-bot", 4)

    submit_resize(request.pk)
    state = orjson.loads(automation.get(f"/api/v1/nks/resize-requests/{request.pk}").content)
    assert state["state"] == "submitted" and state["nks_called_at"] is not None
    assert state["from_count"] == 3 and state["nodegroup"] == "default-worker"
    assert len(fake_nks.requests_seen(r"/v1/clusters/[^/]+/actions/resize", method="POST")) == 1


@pytest.fixture
def watched(polled: NksAccount, fake_nks: FakeNks) -> NksAccount:
    nodes_like_the_fake(fake_nks, "prod-api")
    return polled


def test_scaling_in_through_the_api_needs_no_typed_confirmation(
    watched: NksAccount, automation: Client, fake_nks: FakeNks
) -> None:
    nodegroup = default_worker()
    with fake_nks.state.lock:
        victim = fake_nks.state.find_cluster("prod-api").nodegroups[0].nodes[0].uuid
    post(
        automation,
        resize_path(nodegroup),
        {"node_count": 2, "nodes_to_remove": [victim], "reason": "cost"},
        202,
    )
    assert ResizeRequest.objects.get().nodes_to_remove == [victim]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (b"not json", None, "the body must be JSON"),
        ([4], None, "must be a JSON object"),
        ({"node_count": "4", "reason": "x"}, "node_count", "JSON integer"),
        ({"node_count": True, "reason": "x"}, "node_count", "JSON integer"),
        ({"node_count": 4, "reason": "x", "nodes_to_remove": "abc"}, "nodes_to_remove", "list"),
        ({"node_count": 4, "reason": "x", "force": True}, "__all__", "Unknown fields: force."),
        ({"node_count": 3, "reason": "x"}, "node_count", "already has 3 nodes"),
        ({"node_count": 11, "reason": "x"}, "node_count", "less than or equal to 10"),
        ({"node_count": 4}, "reason", "Say why"),
        ({"node_count": 2, "reason": "x"}, "nodes_to_remove", "choose exactly 1"),
        (
            {"node_count": 4, "reason": "x", "nodes_to_remove": ["nope"]},
            "nodes_to_remove",
            "nope is not a node of nodegroup default-worker.",
        ),
    ],
)
def test_invalid_resizes_answer_400_with_field_errors(
    watched: NksAccount, automation: Client, body: Any, field: str | None, message: str
) -> None:
    answer = post(automation, resize_path(default_worker()), body, 400)
    if field is None:
        assert message in answer["error"]
    else:
        assert message in " ".join(answer["fields"][field])
    assert ResizeRequest.objects.count() == 0


def test_a_resize_without_the_permission_is_forbidden(
    polled: NksAccount, django_user_model: Any
) -> None:
    # A write token, so that the user's missing permission is what refuses the resize.
    client = token_client(django_user_model.objects.create_user("grafana"), ApiToken.Scope.WRITE)
    answer = post(client, resize_path(default_worker()), {"node_count": 4, "reason": "x"}, 403)
    assert "operators" in answer["error"]
    assert ResizeRequest.objects.count() == 0


def test_an_unknown_nodegroup_is_404(polled: NksAccount, automation: Client) -> None:
    uuid = default_worker().cluster.uuid
    path = f"/api/v1/nks/clusters/{uuid}/nodegroups/nope/resize"
    post(automation, path, {"node_count": 4, "reason": "x"}, 404)
    assert automation.get("/api/v1/nks/resize-requests/999").status_code == 404


def test_a_resize_in_flight_answers_409_with_that_request(
    polled: NksAccount, automation: Client
) -> None:
    first = post(automation, resize_path(default_worker()), {"node_count": 4, "reason": "a"}, 202)
    answer = post(automation, resize_path(default_worker()), {"node_count": 5, "reason": "b"}, 409)
    assert "already in flight" in answer["error"]
    assert answer["request"]["id"] == first["id"]
    assert ResizeRequest.objects.count() == 1


def test_a_browser_session_must_send_the_csrf_token(
    polled: NksAccount, django_user_model: Any
) -> None:
    user = django_user_model.objects.create_user("olivia")
    user.groups.add(Group.objects.get(name="operators"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    post(client, resize_path(default_worker()), {"node_count": 4, "reason": "x"}, 403)
    assert ResizeRequest.objects.count() == 0
