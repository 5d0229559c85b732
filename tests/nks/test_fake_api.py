"""The fake NKS itself, spoken to with plain HTTP: its shapes, rules, faults and lifecycle.

The dashboard's demo mode and every NKS test rely on the fake behaving like the guide says,
so its contract is tested here without the client in between.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
import time_machine

from fakes.nks import FakeNks
from fakes.nks.scenarios import validate_scenario

REPO_ROOT = Path(__file__).resolve().parents[2]

# Field lists from the NKS API v2 guide (the tables, not the examples).
GUIDE_CLUSTER_LIST_FIELDS = {
    "uuid", "name", "flavor_id", "keypair", "node_count", "stack_id", "status", "status_reason",
    "health_status", "health_status_reason", "labels",
}  # fmt: skip
GUIDE_CLUSTER_DETAIL_FIELDS = GUIDE_CLUSTER_LIST_FIELDS | {
    "api_address", "project_id", "fixed_network", "fixed_subnet", "node_addresses",
    "created_at", "updated_at",
}  # fmt: skip
GUIDE_NODEGROUP_LIST_FIELDS = {
    "uuid", "flavor_id", "image_id", "max_node_count", "min_node_count", "name", "node_count",
    "role", "stack_id", "status",
}  # fmt: skip
GUIDE_NODEGROUP_DETAIL_FIELDS = GUIDE_NODEGROUP_LIST_FIELDS | {
    "cluster_id", "labels", "node_addresses", "project_id", "status_reason", "created_at",
    "updated_at",
}  # fmt: skip
GUIDE_EVENT_FIELDS = {
    "id", "uuid", "project_id", "cluster_uuid", "cluster_name", "resource_uuid",
    "resource_name", "resource_type", "type", "state", "contents", "created_at", "updated_at",
}  # fmt: skip


def call(
    fake: FakeNks,
    method: str,
    path: str,
    *,
    body: Any = None,
    token: str | None = None,
    timeout: float = 5.0,
) -> tuple[int, Any, Message]:
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    if token is not None:
        headers["X-Auth-Token"] = token
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(fake.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, _decoded(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, _decoded(error.read()), error.headers


def _decoded(raw: bytes) -> Any:
    """JSON when the body is JSON, else its text (gateway pages are HTML)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def issue_token(fake: FakeNks) -> str:
    status, answer, _ = call(
        fake,
        "POST",
        "/identity/v2.0/tokens",
        body={
            "auth": {
                "tenantId": fake.tenant_id,
                "passwordCredentials": {"username": fake.username, "password": fake.password},
            }
        },
    )
    assert status == 200, answer
    return answer["access"]["token"]["id"]


@pytest.fixture
def token(fake_nks: FakeNks) -> str:
    return issue_token(fake_nks)


# ---- identity and tokens -----------------------------------------------------------------


def test_identity_issues_expiring_tokens_in_keystone_shape(fake_nks: FakeNks) -> None:
    before = time.time()
    status, answer, _ = call(
        fake_nks,
        "POST",
        "/identity/v2.0/tokens",
        body={
            "auth": {
                "tenantId": fake_nks.tenant_id,
                "passwordCredentials": {
                    "username": fake_nks.username,
                    "password": fake_nks.password,
                },
            }
        },
    )
    assert status == 200
    token = answer["access"]["token"]
    assert token["id"]
    expires = datetime.fromisoformat(token["expires"]).timestamp()
    assert before + 58 <= expires <= time.time() + 61
    assert token["tenant"]["id"] == fake_nks.tenant_id


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"auth": {"tenantId": "x", "passwordCredentials": {"username": "u", "password": "p"}}},
         401),
        ({"auth": {"tenantId": "x"}}, 400),
        ("not an object", 400),
    ],
)  # fmt: skip
def test_identity_refuses_wrong_or_malformed_credentials(
    fake_nks: FakeNks, body: Any, status: int
) -> None:
    answer_status, answer, _ = call(fake_nks, "POST", "/identity/v2.0/tokens", body=body)
    assert answer_status == status
    assert answer["error"]["code"] == status
    assert answer["error"]["message"]


def test_api_calls_need_a_valid_token(fake_nks: FakeNks, token: str) -> None:
    assert call(fake_nks, "GET", "/v1/clusters")[0] == 401
    assert call(fake_nks, "GET", "/v1/clusters", token="made-up")[0] == 401
    status, answer, headers = call(fake_nks, "GET", "/v1/clusters", token=token)
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert len(answer["clusters"]) == 3


def test_tokens_expire_after_their_ttl(fake_nks: FakeNks, token: str) -> None:
    with time_machine.travel(time.time() + 61, tick=True):
        status, answer, _ = call(fake_nks, "GET", "/v1/clusters", token=token)
    assert status == 401
    assert answer["error"]["title"] == "Unauthorized"


def test_expire_all_tokens(fake_nks: FakeNks, token: str) -> None:
    fake_nks.expire_all_tokens()
    assert call(fake_nks, "GET", "/v1/supports", token=token)[0] == 401
    assert call(fake_nks, "GET", "/v1/supports", token=issue_token(fake_nks))[0] == 200


# ---- shapes ------------------------------------------------------------------------------


def test_clusters_have_the_guides_fields(fake_nks: FakeNks, token: str) -> None:
    _, listing, _ = call(fake_nks, "GET", "/v1/clusters", token=token)
    for cluster in listing["clusters"]:
        assert cluster.keys() >= GUIDE_CLUSTER_LIST_FIELDS
        _, detail, _ = call(fake_nks, "GET", f"/v1/clusters/{cluster['uuid']}", token=token)
        assert detail.keys() >= GUIDE_CLUSTER_DETAIL_FIELDS
        assert detail["created_at"].endswith("+00:00")
        assert "platform_version" in detail["labels"]
    by_name = {cluster["name"]: cluster for cluster in listing["clusters"]}
    # The demo's quirks, as promised in the scenario's description.
    assert isinstance(by_name["legacy-batch"]["health_status_reason"], str)
    assert by_name["legacy-batch"]["health_status"] == "HEALTHY"
    assert "cluster.api_status" in by_name["prod-api"]["health_status_reason"]
    assert by_name["staging-web"]["health_status_reason"]["cluster"]["node_status"] == (
        "NOT_READY_NODE_EXIST"
    )


def test_clusters_can_be_named_or_identified(fake_nks: FakeNks, token: str) -> None:
    _, by_name, _ = call(fake_nks, "GET", "/v1/clusters/prod-api", token=token)
    _, by_uuid, _ = call(fake_nks, "GET", f"/v1/clusters/{by_name['uuid']}", token=token)
    assert by_name["uuid"] == by_uuid["uuid"]
    status, answer, _ = call(fake_nks, "GET", "/v1/clusters/nope", token=token)
    assert status == 404
    assert answer["errors"][0]["detail"] == "Cluster nope could not be found."


def test_nodegroups_have_the_guides_fields(fake_nks: FakeNks, token: str) -> None:
    _, listing, _ = call(fake_nks, "GET", "/v1/clusters/staging-web/nodegroups", token=token)
    for group in listing["nodegroups"]:
        assert group.keys() >= GUIDE_NODEGROUP_LIST_FIELDS
        path = f"/v1/clusters/staging-web/nodegroups/{group['name']}"
        _, detail, _ = call(fake_nks, "GET", path, token=token)
        assert detail.keys() >= GUIDE_NODEGROUP_DETAIL_FIELDS
        assert len(detail["node_addresses"]) == detail["node_count"]
    gpu = {group["name"]: group for group in listing["nodegroups"]}["gpu-worker"]
    assert gpu["max_node_count"] is None


def test_events_are_addressed_by_cluster_uuid_only(fake_nks: FakeNks, token: str) -> None:
    uuid = fake_nks.state.find_cluster("prod-api").uuid
    assert call(fake_nks, "GET", "/v1/clusters/prod-api/events", token=token)[0] == 404
    _, answer, _ = call(fake_nks, "GET", f"/v1/clusters/{uuid}/events", token=token)
    assert all(event.keys() >= GUIDE_EVENT_FIELDS for event in answer["events"])
    first = answer["events"][0]
    _, one, _ = call(fake_nks, "GET", f"/v1/clusters/{uuid}/events/{first['uuid']}", token=token)
    assert one == first


def test_supports_and_kubeconfig(fake_nks: FakeNks, token: str) -> None:
    _, supports, _ = call(fake_nks, "GET", "/v1/supports", token=token)
    assert supports["supported_k8s"]["v1.30.3"] is True
    assert "NODEGROUP_SCALE_IN" in supports["supported_event_type"]
    _, config, _ = call(fake_nks, "GET", "/v1/clusters/prod-api/config", token=token)
    assert config["config"].startswith("apiVersion: v1\n")


def test_kubeconfigs_can_point_at_a_kubernetes_api_server() -> None:
    custom = "apiVersion: v1\nkind: Config\n# staging\n"
    with FakeNks(
        kube_server_url="http://127.0.0.1:8001", kubeconfigs={"staging-web": custom}
    ) as fake:
        token = issue_token(fake)
        _, prod, _ = call(fake, "GET", "/v1/clusters/prod-api/config", token=token)
        _, staging, _ = call(fake, "GET", "/v1/clusters/staging-web/config", token=token)
    assert "    server: http://127.0.0.1:8001\n" in prod["config"]
    assert staging["config"] == custom


def test_unknown_paths_and_methods(fake_nks: FakeNks, token: str) -> None:
    status, answer, _ = call(fake_nks, "GET", "/v1/teapots", token=token)
    assert (status, answer["errors"][0]["status"]) == (404, 404)
    status, answer, _ = call(fake_nks, "DELETE", "/v1/clusters/prod-api", token=token)
    assert status == 405
    assert call(fake_nks, "GET", "/elsewhere")[0] == 404


# ---- resize ------------------------------------------------------------------------------


def test_resize_runs_through_in_progress_to_complete(fake_nks: FakeNks, token: str) -> None:
    uuid = fake_nks.state.find_cluster("prod-api").uuid
    status, answer, _ = call(
        fake_nks,
        "POST",
        "/v1/clusters/prod-api/actions/resize",
        body={"nodegroup": "batch-worker", "node_count": 3},
        token=token,
    )
    assert (status, answer) == (202, {"uuid": uuid})
    group_path = "/v1/clusters/prod-api/nodegroups/batch-worker"
    _, group, _ = call(fake_nks, "GET", group_path, token=token)
    assert group["status"] == "UPDATE_IN_PROGRESS"
    _, events, _ = call(fake_nks, "GET", f"/v1/clusters/{uuid}/events", token=token)
    newest = events["events"][-1]
    assert (newest["type"], newest["state"]) == ("NODEGROUP_SCALE_OUT", "IN_PROGRESS")

    with time_machine.travel(time.time() + 1, tick=True):
        _, group, _ = call(fake_nks, "GET", group_path, token=token)
        _, events, _ = call(fake_nks, "GET", f"/v1/clusters/{uuid}/events", token=token)
    assert (group["status"], group["node_count"]) == ("UPDATE_COMPLETE", 3)
    assert (events["events"][-1]["state"], events["events"][-1]["contents"]) == ("SUCCESS", None)


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"node_count": 3}, 400, "Mandatory field missing: nodegroup."),
        ({"nodegroup": "default-worker", "node_count": "3"}, 400, "Expected 'int'"),
        ({"nodegroup": "default-worker", "node_count": True}, 400, "Expected 'int'"),
        ({"nodegroup": "default-worker", "node_count": 11}, 400, "between 1 and 10"),
        ({"nodegroup": "ghost", "node_count": 2}, 404, "Nodegroup ghost could not be found"),
        ({"nodegroup": "default-worker", "node_count": 4, "nodes_to_remove": ["x"]}, 400,
         "only be given when scaling in"),
        ({"nodegroup": "default-worker", "node_count": 1, "nodes_to_remove": "x"}, 400,
         "must be a list"),
    ],
)  # fmt: skip
def test_resize_validation_errors_use_the_magnum_error_shape(
    fake_nks: FakeNks, token: str, body: dict[str, Any], status: int, detail: str
) -> None:
    answer_status, answer, _ = call(
        fake_nks, "POST", "/v1/clusters/prod-api/actions/resize", body=body, token=token
    )
    assert answer_status == status
    error = answer["errors"][0]
    assert error["status"] == status
    assert detail in error["detail"]


def test_too_many_nodes_to_remove_is_refused(fake_nks: FakeNks, token: str) -> None:
    state = fake_nks.state
    nodes = state.find_nodegroup(state.find_cluster("prod-api"), "default-worker").nodes
    status, answer, _ = call(
        fake_nks,
        "POST",
        "/v1/clusters/prod-api/actions/resize",
        body={
            "nodegroup": "default-worker",
            "node_count": 2,
            "nodes_to_remove": [nodes[0].uuid, nodes[1].uuid],
        },
        token=token,
    )
    assert status == 400
    assert "removes 1" in answer["errors"][0]["detail"]


def test_a_second_resize_during_the_first_is_a_conflict(fake_nks: FakeNks, token: str) -> None:
    path = "/v1/clusters/prod-api/actions/resize"
    body = {"nodegroup": "default-worker", "node_count": 4}
    assert call(fake_nks, "POST", path, body=body, token=token)[0] == 202
    status, answer, _ = call(fake_nks, "POST", path, body={**body, "node_count": 5}, token=token)
    assert status == 409
    assert answer["errors"][0]["title"] == "Conflict"


# ---- health over time --------------------------------------------------------------------


def test_legacy_cluster_health_goes_stale_then_rotten(fake_nks: FakeNks, token: str) -> None:
    def legacy_health() -> tuple[str, dict[str, Any]]:
        _, answer, _ = call(fake_nks, "GET", "/v1/clusters/legacy-batch", token=token)
        return answer["health_status"], answer["health_status_reason"]

    status, reason = legacy_health()
    assert status == "HEALTHY"
    first_timestamp = reason["timestamp"]
    with time_machine.travel(time.time() + 150, tick=True):
        token_later = issue_token(fake_nks)
        _, answer, _ = call(fake_nks, "GET", "/v1/clusters/legacy-batch", token=token_later)
    assert answer["health_status"] == "STALE"
    assert answer["health_status_reason"]["cluster.api_status"] == "STALED_DATA"
    assert answer["health_status_reason"]["timestamp"] >= first_timestamp
    with time_machine.travel(time.time() + 400, tick=True):
        token_later = issue_token(fake_nks)
        _, answer, _ = call(fake_nks, "GET", "/v1/clusters/legacy-batch", token=token_later)
        _, prod, _ = call(fake_nks, "GET", "/v1/clusters/prod-api", token=token_later)
    assert answer["health_status"] == "ROTTEN"
    assert answer["health_status_reason"]["cluster.node_status"] == "ROTTEN_DATA"
    assert prod["health_status"] == "FRESH"  # the healthy cluster keeps refreshing


def test_health_speed_makes_the_decay_faster() -> None:
    with FakeNks(health_speed=100) as fake:
        token = issue_token(fake)
        with time_machine.travel(time.time() + 4, tick=True):
            _, answer, _ = call(fake, "GET", "/v1/clusters/legacy-batch", token=token)
    assert answer["health_status"] == "ROTTEN"


# ---- scenarios ---------------------------------------------------------------------------


def test_generated_scenario_has_n_clusters_of_three_nodegroups() -> None:
    with FakeNks(scenario="clusters:5") as fake:
        token = issue_token(fake)
        _, answer, _ = call(fake, "GET", "/v1/clusters", token=token)
        assert len(answer["clusters"]) == 5
        uuid = answer["clusters"][0]["uuid"]
        _, groups, _ = call(fake, "GET", f"/v1/clusters/{uuid}/nodegroups", token=token)
    assert [group["name"] for group in groups["nodegroups"]] == [
        "default-worker",
        "pool-a",
        "pool-b",
    ]


@pytest.mark.parametrize("scenario", ["nope", "clusters:", "clusters:x", "demo:3", "clusters:9999"])
def test_unknown_scenarios_are_refused(scenario: str) -> None:
    with pytest.raises(ValueError, match=r"scenario|clusters:N"):
        validate_scenario(scenario)
    with pytest.raises(ValueError):
        FakeNks(scenario=scenario)


def test_demo_ids_are_the_same_on_every_start() -> None:
    first = FakeNks()
    second = FakeNks()
    assert list(first.state.clusters) == list(second.state.clusters)


# ---- faults and lifecycle ----------------------------------------------------------------


def test_faults_hit_only_matching_requests_and_run_out(fake_nks: FakeNks, token: str) -> None:
    fake_nks.fail_next(r"/v1/clusters", 503, times=2, method="GET", retry_after=7)
    status, _, headers = call(fake_nks, "GET", "/v1/clusters/prod-api", token=token)
    assert status == 200  # the pattern must match the whole path
    status, _, headers = call(fake_nks, "GET", "/v1/clusters", token=token)
    assert (status, headers["Retry-After"], headers["Content-Type"]) == (503, "7", "text/html")
    assert call(fake_nks, "GET", "/v1/clusters", token=token)[0] == 503
    assert call(fake_nks, "GET", "/v1/clusters", token=token)[0] == 200
    assert [r.status for r in fake_nks.requests_seen(r"/v1/clusters")] == [503, 503, 200]


def test_truncated_answers_keep_a_consistent_length(fake_nks: FakeNks, token: str) -> None:
    fake_nks.truncate_next(r"/v1/supports")
    request = urllib.request.Request(fake_nks.url + "/v1/supports", headers={"X-Auth-Token": token})
    with urllib.request.urlopen(request, timeout=5) as response:
        raw = response.read()
    assert int(response.headers["Content-Length"]) == len(raw)
    with pytest.raises(ValueError):
        json.loads(raw)


def test_stop_does_not_wait_for_a_delayed_answer(token: str, fake_nks: FakeNks) -> None:
    fake_nks.delay_next(r"/v1/supports", 30)
    outcome: list[object] = []

    def slow_call() -> None:
        try:
            outcome.append(call(fake_nks, "GET", "/v1/supports", token=token, timeout=10)[0])
        except (OSError, http.client.HTTPException) as exc:
            # Cut off mid-answer (IncompleteRead) or before it (RemoteDisconnected).
            outcome.append(exc)

    caller = threading.Thread(target=slow_call)
    caller.start()
    time.sleep(0.2)
    started = time.monotonic()
    fake_nks.stop()
    assert time.monotonic() - started < 2
    caller.join(timeout=5)
    assert outcome  # the waiting request ended one way or another


def test_management_command_serves_until_sigterm(tmp_path: Path) -> None:
    environment = {**os.environ, "DASHBOARD_VAR_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "fake_nks", "--port", "0", "--scenario", "clusters:2"],
        cwd=REPO_ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        lines: list[str] = []
        while not any("Press Ctrl-C" in line for line in lines):
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        printed = "".join(lines)
        api_url = next(line.split()[-1] for line in lines if "API URL:" in line)
        assert "Identity URL:" in printed
        assert "Password:     demo-password" in printed
        request = urllib.request.Request(f"{api_url}/v1/clusters")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 401
        process.send_signal(signal.SIGTERM)
        remaining, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "Fake NKS stopped." in remaining
