"""NksClient against the fake NKS over real HTTP: parsing, tokens, retries, errors, snapshot."""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import time_machine

from fakes.nks import FakeNks
from nks.client import (
    ErrorKind,
    EventState,
    Freshness,
    NksClient,
    NksError,
    OperationPhase,
    Timeouts,
    fetch_snapshot,
    parse_health,
)

RESIZE_PATH = r"/v1/clusters/[^/]+/actions/resize"
TOKENS_PATH = r"/identity/v2\.0/tokens"


def wait_for(check: Callable[[], bool], *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


# ---- requests on the wire ----------------------------------------------------------------


def test_every_api_call_carries_the_documented_headers(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    nks_client.list_clusters()
    nks_client.get_cluster("prod-api")
    api_requests = fake_nks.requests_seen(r"/v1/.*")
    assert len(api_requests) == 2
    for request in api_requests:
        assert request.headers["Accept"] == "application/json"
        assert request.headers["Content-Type"] == "application/json"
        assert request.headers["OpenStack-API-Version"] == "container-infra latest"
        assert request.headers["X-Auth-Token"] == "present"


def test_token_is_issued_once_and_reused(fake_nks: FakeNks, nks_client: NksClient) -> None:
    for _ in range(3):
        nks_client.list_clusters()
    assert len(fake_nks.requests_seen(TOKENS_PATH)) == 1
    assert nks_client.request_count == 4


def test_token_is_renewed_shortly_before_it_expires(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    nks_client.list_clusters()
    # The fake's tokens live 60 s; 57 s later the client must renew before using it again.
    with time_machine.travel(time.time() + 57, tick=True):
        nks_client.list_clusters()
    assert len(fake_nks.requests_seen(TOKENS_PATH)) == 2
    assert [r.status for r in fake_nks.requests_seen(r"/v1/clusters")] == [200, 200]


def test_rejected_token_is_renewed_once_and_the_call_succeeds(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    nks_client.list_clusters()
    fake_nks.expire_all_tokens()
    clusters = nks_client.list_clusters()
    assert {cluster.name for cluster in clusters} == {"prod-api", "staging-web", "legacy-batch"}
    assert [r.status for r in fake_nks.requests_seen(r"/v1/clusters")] == [200, 401, 200]
    assert len(fake_nks.requests_seen(TOKENS_PATH)) == 2


def test_401_that_persists_after_renewal_is_an_auth_error(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.fail_next(r"/v1/clusters", 401, times=5)
    with pytest.raises(NksError) as caught:
        nks_client.list_clusters()
    assert caught.value.kind == ErrorKind.AUTH
    assert caught.value.status == 401
    assert not caught.value.retryable
    assert "NKS answered 401 Unauthorized for GET /v1/clusters" in str(caught.value)
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 2


def test_fixed_token_is_used_as_is_and_a_401_is_an_auth_error(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(
        token="minted-by-the-user", identity_url=None, tenant_id=None, username=None, password=None
    )
    with pytest.raises(NksError) as caught:
        client.list_clusters()
    assert caught.value.kind == ErrorKind.AUTH
    assert "configured NKS token was rejected" in str(caught.value)
    assert fake_nks.requests_seen(TOKENS_PATH) == []
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 1


def test_wrong_password_is_an_auth_error_from_the_identity_service(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(password="not-the-password")
    with pytest.raises(NksError) as caught:
        client.list_clusters()
    assert caught.value.kind == ErrorKind.AUTH
    assert not caught.value.retryable
    assert "identity service" in str(caught.value)
    assert "refused the NKS credentials" in str(caught.value)
    assert len(fake_nks.requests_seen(TOKENS_PATH)) == 1


def test_client_needs_a_token_or_credentials() -> None:
    with pytest.raises(ValueError, match="token= or all of"):
        NksClient("http://127.0.0.1:9", identity_url="http://127.0.0.1:9", username="u")


# ---- errors and retries ------------------------------------------------------------------


def test_403_is_forbidden_and_not_retried(fake_nks: FakeNks, nks_client: NksClient) -> None:
    fake_nks.fail_next(r"/v1/clusters", 403)
    with pytest.raises(NksError) as caught:
        nks_client.list_clusters()
    error = caught.value
    assert (error.kind, error.status, error.retryable) == (ErrorKind.FORBIDDEN, 403, False)
    assert str(error).startswith("NKS answered 403 Forbidden for GET /v1/clusters: Policy")
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 1


def test_unknown_cluster_is_not_found(nks_client: NksClient) -> None:
    with pytest.raises(NksError) as caught:
        nks_client.get_cluster("no-such-cluster")
    assert caught.value.kind == ErrorKind.NOT_FOUND
    assert "Cluster no-such-cluster could not be found" in str(caught.value)


def test_429_with_a_short_retry_after_is_honoured(fake_nks: FakeNks, nks_client: NksClient) -> None:
    fake_nks.fail_next(r"/v1/clusters", 429, retry_after=1)
    started = time.monotonic()
    assert len(nks_client.list_clusters()) == 3
    assert time.monotonic() - started >= 0.95
    assert [r.status for r in fake_nks.requests_seen(r"/v1/clusters")] == [429, 200]


def test_429_with_a_long_retry_after_is_raised_at_once_for_the_caller_to_wait(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.fail_next(r"/v1/clusters", 429, retry_after=3600)
    with pytest.raises(NksError) as caught:
        nks_client.list_clusters()
    error = caught.value
    assert (error.kind, error.retryable, error.retry_after) == (ErrorKind.RATE_LIMITED, True, 3600)
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried_with_backoff_then_succeed(
    fake_nks: FakeNks, nks_client: NksClient, status: int
) -> None:
    fake_nks.fail_next(r"/v1/clusters", status, times=2)
    assert len(nks_client.list_clusters()) == 3
    assert [r.status for r in fake_nks.requests_seen(r"/v1/clusters")] == [status, status, 200]


def test_server_errors_that_persist_raise_a_retryable_error(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(retries=2)
    fake_nks.fail_next(r"/v1/clusters", 502, times=10)
    with pytest.raises(NksError) as caught:
        client.list_clusters()
    error = caught.value
    assert (error.kind, error.status, error.retryable) == (ErrorKind.SERVER, 502, True)
    # nginx's HTML error page is reduced to its title.
    assert str(error) == "NKS answered 502 Bad Gateway for GET /v1/clusters: 502 Bad Gateway"
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 3


def test_retries_back_off_exponentially(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(retries=3, backoff=0.1, max_backoff=10)
    fake_nks.fail_next(r"/v1/clusters", 503, times=3)
    started = time.monotonic()
    client.list_clusters()
    # Delays are at least half of 0.1, 0.2 and 0.4 s (jitter fills the other half).
    assert time.monotonic() - started >= 0.35


def test_a_plain_text_error_body_appears_as_a_short_excerpt(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.fail_next(
        r"/v1/clusters/prod-api",
        400,
        body="upstream said no\n\x1b[31m" + "x" * 5000,
        content_type="text/plain",
    )
    with pytest.raises(NksError) as caught:
        nks_client.get_cluster("prod-api")
    message = str(caught.value)
    assert message.startswith("NKS answered 400 Bad Request for GET /v1/clusters/prod-api: ")
    assert "upstream said no" in message
    assert "\x1b" not in message
    assert len(message) < 300
    assert caught.value.kind == ErrorKind.CLIENT


def test_a_read_that_times_out_raises_a_timeout_error(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(timeout=Timeouts(connect=1, read=0.3, write=1, pool=1), retries=1)
    fake_nks.delay_next(r"/v1/clusters", 3.0, times=2)
    started = time.monotonic()
    with pytest.raises(NksError) as caught:
        client.list_clusters()
    assert time.monotonic() - started < 2.0
    error = caught.value
    assert (error.kind, error.retryable, error.status) == (ErrorKind.TIMEOUT, True, None)
    assert "timed out waiting for the answer for GET /v1/clusters (limit 0.3 s)" in str(error)


def test_a_single_timeout_is_retried(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(timeout=Timeouts(connect=1, read=0.3, write=1, pool=1))
    fake_nks.delay_next(r"/v1/clusters", 3.0)
    assert len(client.list_clusters()) == 3


def test_a_dropped_connection_is_retried(fake_nks: FakeNks, nks_client: NksClient) -> None:
    fake_nks.drop_next(r"/v1/clusters", times=2)
    assert len(nks_client.list_clusters()) == 3


def test_an_unreachable_api_is_a_retryable_connection_error(
    make_client: Callable[..., NksClient],
) -> None:
    stopped = FakeNks(scenario="empty").start()
    url = stopped.url
    stopped.stop()
    client = make_client(
        api_url=url,
        token="fixed-token-value",
        identity_url=None,
        tenant_id=None,
        username=None,
        password=None,
        retries=1,
    )
    with pytest.raises(NksError) as caught:
        client.list_clusters()
    assert (caught.value.kind, caught.value.retryable) == (ErrorKind.CONNECTION, True)
    assert str(caught.value).startswith("Could not talk to NKS at 127.0.0.1:")


def test_a_200_html_page_is_a_bad_response_that_can_be_retried(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.html_next(r"/v1/clusters", times=10)
    with pytest.raises(NksError) as caught:
        nks_client.list_clusters()
    error = caught.value
    assert (error.kind, error.status, error.retryable) == (ErrorKind.BAD_RESPONSE, 200, True)
    assert "with an HTML page instead of JSON (NHN Cloud - Service maintenance)" in str(error)


def test_a_single_html_page_is_retried_away(fake_nks: FakeNks, nks_client: NksClient) -> None:
    fake_nks.html_next(r"/v1/clusters")
    assert len(nks_client.list_clusters()) == 3


def test_truncated_json_is_a_bad_response(fake_nks: FakeNks, nks_client: NksClient) -> None:
    fake_nks.truncate_next(r"/v1/clusters/[^/]+", times=10)
    with pytest.raises(NksError) as caught:
        nks_client.get_cluster("prod-api")
    assert caught.value.kind == ErrorKind.BAD_RESPONSE
    assert caught.value.retryable
    assert "not valid JSON (truncated or garbled)" in str(caught.value)


def test_json_that_is_not_an_object_is_a_bad_response(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").detail_overrides["uuid"] = None
    with pytest.raises(NksError) as caught:
        nks_client.get_cluster("prod-api")
    assert caught.value.kind == ErrorKind.BAD_RESPONSE
    assert "a cluster without a uuid" in str(caught.value)


def test_nks_error_survives_pickling() -> None:
    error = NksError("boom", retryable=True, status=503, kind="server", retry_after=2.0)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.message, copy.retryable, copy.status, copy.kind, copy.retry_after) == (
        "boom",
        True,
        503,
        ErrorKind.SERVER,
        2.0,
    )


# ---- the guide's quirks ------------------------------------------------------------------


def test_healthy_instead_of_fresh_is_kept_raw_and_never_classified_healthy(
    nks_client: NksClient,
) -> None:
    legacy = nks_client.get_cluster("legacy-batch")
    assert legacy.health.health_status == "HEALTHY"
    assert legacy.health.freshness is Freshness.UNKNOWN


def test_flat_dotted_keys_and_nested_objects_read_the_same(nks_client: NksClient) -> None:
    flat = nks_client.get_cluster("prod-api").health  # flat dotted keys
    nested = nks_client.get_cluster("staging-web").health  # nested objects
    assert flat.freshness is nested.freshness is Freshness.FRESH
    assert (flat.api_status, flat.api, flat.api_ok) == ("NORMAL", "OK", True)
    assert (nested.api_status, nested.api, nested.api_ok) == ("NORMAL", "OK", True)
    assert flat.node_status == "NORMAL"
    assert flat.all_nodes_ready is True
    assert flat.nodegroups["default-worker"].ready == 3
    assert nested.node_status == "NOT_READY_NODE_EXIST"
    assert nested.all_nodes_ready is False
    worker = nested.nodegroups["default-worker"]
    assert (worker.node_status, worker.ready, worker.not_ready) == ("NOT_READY_NODE_EXIST", 2, 1)
    assert nested.timestamp is not None and flat.timestamp is not None
    assert nested.timestamp.tzinfo is not None


def test_per_node_ready_keys_and_lower_case_api_ok(nks_client: NksClient) -> None:
    health = nks_client.get_cluster("legacy-batch").health
    assert health.api == "ok"
    assert health.api_ok is True
    assert len(health.nodes_ready) == 4
    assert all(health.nodes_ready.values())
    assert all(name.startswith("legacy-batch-default-worker-w-") for name in health.nodes_ready)


def test_reason_sent_as_a_json_string_is_decoded(nks_client: NksClient) -> None:
    listed = {cluster.name: cluster for cluster in nks_client.list_clusters()}
    health = listed["legacy-batch"].health
    assert health.problem is None
    assert health.api_ok is True
    assert len(health.nodes_ready) == 4


@pytest.mark.parametrize(
    "reason",
    [
        # The guide's own single-cluster example, which is not valid JSON.
        '{ {"test-k8s-default-w-bnga636xulqk-node-0.Ready": "True", "api": "ok"} }',
        "garbage",
        42,
        ["api", "ok"],
        None,
    ],
)
def test_unreadable_health_reason_is_unknown_not_a_crash(
    fake_nks: FakeNks, nks_client: NksClient, reason: object
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").health_reason_override = reason
    health = nks_client.get_cluster("prod-api").health
    assert health.problem is not None
    assert health.freshness is Freshness.FRESH
    assert (health.api_ok, health.node_status, health.timestamp) == (None, None, None)
    assert health.all_nodes_ready is None
    assert health.nodegroups == {} and health.nodes_ready == {}


def test_api_not_ok_and_broken_api_status_are_classified_broken(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").api_working = False
    health = nks_client.get_cluster("prod-api").health
    assert (health.api, health.api_status, health.api_ok) == (
        "NOT_OK",
        "K8S_API_NOT_WORKING",
        False,
    )


def test_unknown_health_values_are_kept_raw() -> None:
    health = parse_health(
        "SOMETHING_NEW",
        {"api": "MAYBE", "cluster.node_status": "NEW_STATE", "nodegroup-stats.a": "three:one"},
    )
    assert health.freshness is Freshness.UNKNOWN
    assert health.health_status == "SOMETHING_NEW"
    assert (health.api, health.api_ok) == ("MAYBE", None)
    assert health.node_status == "NEW_STATE"
    assert health.all_nodes_ready is None
    assert (health.nodegroups["a"].ready, health.nodegroups["a"].not_ready) == (None, None)


def test_booleans_and_numbers_as_strings_or_natives_coerce_alike(nks_client: NksClient) -> None:
    # Labels say "True"/"true"/"6"; the guide's autoscale example says true/6.
    from_labels = nks_client.get_nodegroup("prod-api", "batch-worker").autoscale
    assert (from_labels.enabled, from_labels.min_node_count, from_labels.max_node_count) == (
        True,
        1,
        6,
    )
    assert from_labels.scale_down_enabled is True
    gpu = nks_client.get_nodegroup("staging-web", "gpu-worker")
    assert gpu.autoscale.enabled is False  # "false" in lower case


def test_counts_as_strings_null_max_and_null_status_reason(nks_client: NksClient) -> None:
    legacy_groups = nks_client.list_nodegroups("legacy-batch")  # counts are strings here
    assert [(g.node_count, g.min_node_count, g.max_node_count) for g in legacy_groups] == [
        (4, 1, 10)
    ]
    gpu = nks_client.get_nodegroup("staging-web", "gpu-worker")
    assert gpu.max_node_count is None
    assert gpu.status_reason is None
    assert gpu.phase is OperationPhase.FAILED


def test_timestamps_with_offset_with_z_and_garbage(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").detail_overrides.update(
            {"created_at": "2021-08-05T01:48:39+00:00", "updated_at": "yesterday-ish"}
        )
        fake_nks.state.find_cluster("staging-web").detail_overrides.update(
            {"created_at": "2021-08-05T01:48:39Z", "updated_at": "2021-08-05T10:48:39+09:00"}
        )
    prod = nks_client.get_cluster("prod-api")
    staging = nks_client.get_cluster("staging-web")
    moment = datetime(2021, 8, 5, 1, 48, 39, tzinfo=UTC)
    assert prod.created_at == moment
    assert prod.updated_at is None
    assert staging.created_at == moment
    assert staging.updated_at == moment


def test_unknown_fields_are_ignored_and_unknown_enums_are_kept_raw(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    state = fake_nks.state
    with state.lock:
        prod = state.find_cluster("prod-api")
        prod.detail_overrides.update(
            {"status": "MIGRATING", "brand_new_field": {"nested": [1, 2]}, "node_count": "5"}
        )
        state.add_event(prod, event_type="CLUSTER_TELEPORT", state="PAUSED", contents=None)
    cluster = nks_client.get_cluster("prod-api")
    assert (cluster.status, cluster.phase) == ("MIGRATING", OperationPhase.UNKNOWN)
    assert cluster.node_count == 5
    newest = nks_client.list_events(cluster.uuid)[0]
    assert (newest.type, newest.raw_state, newest.state) == (
        "CLUSTER_TELEPORT",
        "PAUSED",
        EventState.UNKNOWN,
    )
    assert newest.contents is None


def test_a_malformed_entry_in_a_list_is_skipped_not_fatal(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("staging-web").list_overrides["uuid"] = None
    assert [c.name for c in nks_client.list_clusters()] == ["prod-api", "legacy-batch"]


def test_list_and_detail_fields(nks_client: NksClient) -> None:
    listed = {cluster.name: cluster for cluster in nks_client.list_clusters()}["prod-api"]
    assert not listed.detailed
    assert listed.api_address is None
    detail = nks_client.get_cluster(listed.uuid)
    assert detail.detailed
    assert detail.uuid == listed.uuid
    assert detail.node_count == 5
    assert len(detail.node_addresses) == 5
    assert detail.kube_tag == "v1.30.3"
    assert detail.platform_version == "1.202511.0"
    assert detail.api_address and detail.api_address.startswith("https://")
    groups = nks_client.list_nodegroups("prod-api")
    assert [(g.name, g.is_default, g.detailed) for g in groups] == [
        ("default-worker", True, False),
        ("batch-worker", False, False),
    ]
    group = nks_client.get_nodegroup("prod-api", groups[0].uuid)
    assert group.detailed and group.cluster_uuid == detail.uuid
    assert len(group.node_addresses) == group.node_count == 3
    assert group.is_worker
    assert group.created_at is not None


def test_events_come_newest_first(nks_client: NksClient) -> None:
    cluster = nks_client.get_cluster("prod-api")
    events = nks_client.list_events(cluster.uuid)
    assert len(events) == 4
    created = [event.created_at for event in events]
    assert created == sorted(created, reverse=True)  # type: ignore[type-var]
    assert events[-1].type == "CLUSTER_CREATE"


def test_kubeconfig(fake_nks: FakeNks, nks_client: NksClient) -> None:
    assert "kind: Config" in nks_client.get_kubeconfig("prod-api")
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").kubeconfig = "apiVersion: v1\nkind: Config\n"
    assert nks_client.get_kubeconfig("prod-api") == "apiVersion: v1\nkind: Config\n"


def test_names_with_slashes_stay_one_path_segment(fake_nks: FakeNks, nks_client: NksClient) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").name = "team a/../b"
    assert nks_client.get_cluster("team a/../b").name == "team a/../b"
    assert fake_nks.requests_seen(r"/v1/clusters/team%20a%2F\.\.%2Fb")


# ---- resize ------------------------------------------------------------------------------


def test_resize_goes_in_progress_then_succeeds_with_an_event(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    accepted = nks_client.resize("prod-api", "default-worker", 4)
    cluster = nks_client.get_cluster("prod-api")
    assert accepted.cluster_uuid == cluster.uuid
    group = nks_client.get_nodegroup("prod-api", "default-worker")
    assert (group.status, group.in_progress) == ("UPDATE_IN_PROGRESS", True)
    event = nks_client.list_events(cluster.uuid)[0]
    assert (event.type, event.state, event.resource_name) == (
        "NODEGROUP_SCALE_OUT",
        EventState.IN_PROGRESS,
        "default-worker",
    )
    wait_for(lambda: not nks_client.get_nodegroup("prod-api", "default-worker").in_progress)
    group = nks_client.get_nodegroup("prod-api", "default-worker")
    assert (group.status, group.node_count, len(group.node_addresses)) == ("UPDATE_COMPLETE", 4, 4)
    done = next(e for e in nks_client.list_events(cluster.uuid) if e.uuid == event.uuid)
    assert (done.state, done.contents) == (EventState.SUCCESS, None)
    assert len(fake_nks.requests_seen(RESIZE_PATH, method="POST")) == 1
    assert fake_nks.requests_seen(RESIZE_PATH)[0].body == {
        "nodegroup": "default-worker",
        "node_count": 4,
    }


def test_scale_in_removes_the_chosen_nodes(fake_nks: FakeNks, nks_client: NksClient) -> None:
    with fake_nks.state.lock:
        group = fake_nks.state.find_nodegroup(
            fake_nks.state.find_cluster("prod-api"), "default-worker"
        )
        victim = group.nodes[0]
    nks_client.resize("prod-api", "default-worker", 2, nodes_to_remove=[victim.uuid])
    fake_nks.state.finish_all_resizes()
    group_after = nks_client.get_nodegroup("prod-api", "default-worker")
    assert group_after.node_count == 2
    assert victim.address not in group_after.node_addresses
    event = nks_client.list_events(nks_client.get_cluster("prod-api").uuid)[0]
    assert (event.type, event.state) == ("NODEGROUP_SCALE_IN", EventState.SUCCESS)


def test_resize_of_a_failing_nodegroup_ends_with_a_fail_event(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    nks_client.resize("staging-web", "gpu-worker", 2)
    fake_nks.state.finish_all_resizes()
    group = nks_client.get_nodegroup("staging-web", "gpu-worker")
    assert (group.status, group.node_count) == ("UPDATE_FAILED", 1)
    assert group.status_reason and "Quota exceeded" in group.status_reason
    event = nks_client.list_events(nks_client.get_cluster("staging-web").uuid)[0]
    assert (event.type, event.state) == ("NODEGROUP_SCALE_OUT", EventState.FAIL)
    assert event.contents and "Quota exceeded" in event.contents


@pytest.mark.parametrize(
    ("nodegroup", "node_count", "remove", "kind", "status", "server_says"),
    [
        ("default-worker", 11, None, ErrorKind.CLIENT, 400, "between 1 and 10, not 11"),
        ("default-worker", 0, None, ErrorKind.CLIENT, 400, "between 1 and 10, not 0"),
        ("no-such-group", 2, None, ErrorKind.NOT_FOUND, 404, "Nodegroup no-such-group could"),
        ("default-worker", 2, ["not-a-member"], ErrorKind.CLIENT, 400, "do not belong"),
        ("default-worker", 3, None, ErrorKind.CLIENT, 400, "already has 3 nodes"),
    ],
)
def test_resize_validation_errors_carry_the_servers_message(
    fake_nks: FakeNks,
    nks_client: NksClient,
    nodegroup: str,
    node_count: int,
    remove: list[str] | None,
    kind: ErrorKind,
    status: int,
    server_says: str,
) -> None:
    with pytest.raises(NksError) as caught:
        nks_client.resize("prod-api", nodegroup, node_count, nodes_to_remove=remove)
    error = caught.value
    assert (error.kind, error.status, error.retryable) == (kind, status, False)
    assert server_says in str(error)
    assert str(error).startswith(f"NKS answered {status} ")


def test_resize_while_one_is_running_is_a_conflict(nks_client: NksClient) -> None:
    nks_client.resize("prod-api", "default-worker", 4)
    with pytest.raises(NksError) as caught:
        nks_client.resize("prod-api", "default-worker", 5)
    assert (caught.value.kind, caught.value.status) == (ErrorKind.CONFLICT, 409)
    assert "is being updated (UPDATE_IN_PROGRESS)" in str(caught.value)


def test_resize_is_never_retried_on_a_server_error(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.fail_next(RESIZE_PATH, 503, times=5, method="POST")
    with pytest.raises(NksError) as caught:
        nks_client.resize("prod-api", "default-worker", 4)
    error = caught.value
    assert (error.kind, error.status, error.retryable) == (ErrorKind.SERVER, 503, False)
    assert "may or may not have been applied" in str(error)
    assert len(fake_nks.requests_seen(RESIZE_PATH, method="POST")) == 1


def test_resize_that_times_out_is_not_retried(
    fake_nks: FakeNks, make_client: Callable[..., NksClient]
) -> None:
    client = make_client(timeout=Timeouts(connect=1, read=0.3, write=1, pool=1))
    client.list_clusters()  # get the token first
    fake_nks.delay_next(RESIZE_PATH, 0.8, method="POST")
    with pytest.raises(NksError) as caught:
        client.resize("prod-api", "default-worker", 4)
    assert (caught.value.kind, caught.value.retryable) == (ErrorKind.TIMEOUT, False)
    assert "may or may not have been applied" in str(caught.value)
    # The fake records a request when it answers, after the delay.
    wait_for(lambda: len(fake_nks.requests_seen(RESIZE_PATH, method="POST")) == 1)
    time.sleep(0.2)
    assert len(fake_nks.requests_seen(RESIZE_PATH, method="POST")) == 1


def test_resize_with_an_expired_token_is_applied_exactly_once(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    cluster_uuid = nks_client.get_cluster("prod-api").uuid
    events_before = len(nks_client.list_events(cluster_uuid))
    fake_nks.expire_all_tokens()
    nks_client.resize("prod-api", "default-worker", 4)
    # The 401 was decided before NKS acted, so the one retry with a new token is safe.
    assert [r.status for r in fake_nks.requests_seen(RESIZE_PATH)] == [401, 202]
    assert len(nks_client.list_events(cluster_uuid)) == events_before + 1


def test_resize_checks_the_type_of_node_count(nks_client: NksClient) -> None:
    with pytest.raises(TypeError):
        nks_client.resize("prod-api", "default-worker", "3")  # type: ignore[arg-type]


# ---- secrets -----------------------------------------------------------------------------

SECRET_PASSWORD = "s3cret-Pa55word-never-shown"


@pytest.fixture
def secret_fake() -> Iterator[FakeNks]:
    with FakeNks(scenario="demo", password=SECRET_PASSWORD) as fake:
        yield fake


def _provocations(fake: FakeNks, token: str) -> list[tuple[str, Callable[[], None]]]:
    """Ways to make a call fail, some with a server that echoes the secrets back."""
    echo = f"Bad token {token} for password {SECRET_PASSWORD}; X-Auth-Token: {token}"
    echo_json = json.dumps({"errors": [{"detail": echo}]})

    def identity_fails(status: int) -> Callable[[], None]:
        def provoke() -> None:
            fake.expire_all_tokens()
            fake.fail_next(TOKENS_PATH, status, times=9, body=echo)

        return provoke

    return [
        ("401 persisting", lambda: fake.fail_next(r"/v1/clusters", 401, times=5)),
        ("403", lambda: fake.fail_next(r"/v1/clusters", 403)),
        ("429 long", lambda: fake.fail_next(r"/v1/clusters", 429, retry_after=999)),
        ("500 echo", lambda: fake.fail_next(r"/v1/clusters", 500, times=9, body=echo)),
        ("400 echo json", lambda: fake.fail_next(r"/v1/clusters", 400, body=echo_json)),
        ("html", lambda: fake.html_next(r"/v1/clusters", times=9)),
        ("truncated", lambda: fake.truncate_next(r"/v1/clusters", times=9)),
        ("timeout", lambda: fake.delay_next(r"/v1/clusters", 2.0, times=9)),
        ("dropped", lambda: fake.drop_next(r"/v1/clusters", times=9)),
        ("identity 500 echo", identity_fails(500)),
        ("identity 401 echo", identity_fails(401)),
    ]


def test_secrets_never_appear_in_errors_or_logs(
    secret_fake: FakeNks, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = NksClient(
        secret_fake.url,
        **secret_fake.credentials(),
        timeout=Timeouts(connect=1, read=0.2, write=1, pool=1),
        retries=1,
        backoff=0.01,
    )
    with client:
        client.list_clusters()
        with secret_fake.state.lock:
            token = next(iter(secret_fake.state.tokens))
        assert SECRET_PASSWORD not in repr(client)
        for name, provoke in _provocations(secret_fake, token):
            secret_fake.clear_faults()
            provoke()
            with pytest.raises(NksError) as caught:
                client.list_clusters()
            error = caught.value
            for secret in (token, SECRET_PASSWORD):
                assert secret not in str(error), name
                assert secret not in repr(error), name
            assert error.message, name
        secret_fake.clear_faults()
    for secret in (token, SECRET_PASSWORD):
        assert secret not in caplog.text
    assert "Retrying GET /v1/clusters" in caplog.text  # the logs were really captured


# ---- snapshot ----------------------------------------------------------------------------


def test_snapshot_of_the_demo_account(fake_nks: FakeNks, nks_client: NksClient) -> None:
    snapshot = fetch_snapshot(nks_client)
    by_name = {entry.cluster.name: entry for entry in snapshot.clusters}
    assert list(by_name) == ["prod-api", "staging-web", "legacy-batch"]
    assert snapshot.failed == ()
    for entry in snapshot.clusters:
        assert entry.complete and not entry.gone
        assert entry.cluster.detailed
        assert entry.nodegroups and all(group.detailed for group in entry.nodegroups)
        assert entry.events
    assert [g.name for g in by_name["staging-web"].nodegroups or ()] == [
        "default-worker",
        "gpu-worker",
    ]
    # identity + list + 3 x (detail, nodegroups, events) + 5 nodegroup details
    assert snapshot.http_calls == 1 + 1 + 9 + 5
    assert len(fake_nks.requests_seen()) == snapshot.http_calls


def test_snapshot_reports_a_cluster_deleted_during_the_poll_as_gone(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.remove_cluster_after_list("staging-web")
    snapshot = fetch_snapshot(nks_client)
    by_name = {entry.cluster.name: entry for entry in snapshot.clusters}
    gone = by_name["staging-web"]
    assert gone.gone
    assert gone.error is not None and gone.error.kind == ErrorKind.NOT_FOUND
    assert gone.nodegroups is None and gone.events is None
    assert not gone.cluster.detailed  # what the list said
    assert by_name["prod-api"].complete and by_name["legacy-batch"].complete
    assert [entry.cluster.name for entry in snapshot.failed] == ["staging-web"]


def test_snapshot_keeps_going_when_one_cluster_fails(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    staging_uuid = fake_nks.state.find_cluster("staging-web").uuid
    fake_nks.fail_next(rf"/v1/clusters/{staging_uuid}/nodegroups", 403)
    fake_nks.fail_next(r"/v1/clusters/[^/]+/nodegroups/batch-worker|.*/events", 500, times=99)
    snapshot = fetch_snapshot(nks_client)
    by_name = {entry.cluster.name: entry for entry in snapshot.clusters}
    staging = by_name["staging-web"]
    assert staging.cluster.detailed
    assert staging.nodegroups is None
    assert staging.error is not None and staging.error.kind == ErrorKind.FORBIDDEN
    assert not staging.gone
    for entry in snapshot.clusters:
        assert entry.events is None  # every events call failed
    assert by_name["prod-api"].nodegroups is not None
    assert all(group.detailed for group in by_name["prod-api"].nodegroups)


def test_snapshot_raises_when_the_cluster_list_fails(
    fake_nks: FakeNks, nks_client: NksClient
) -> None:
    fake_nks.fail_next(r"/v1/clusters", 403)
    with pytest.raises(NksError):
        fetch_snapshot(nks_client)


def test_snapshot_fetches_concurrently() -> None:
    latency = 0.05
    with FakeNks(scenario="clusters:20", latency=latency) as fake:
        client = NksClient(fake.url, **fake.credentials(), backoff=0.01)
        with client:
            snapshot = fetch_snapshot(client, max_workers=16)
    assert len(snapshot.clusters) == 20
    assert snapshot.failed == ()
    assert all(len(entry.nodegroups or ()) == 3 for entry in snapshot.clusters)
    # identity + list + 20 x (detail, nodegroup list, 3 nodegroup details, events)
    assert snapshot.http_calls == 2 + 20 * 6
    serial_seconds = snapshot.http_calls * latency
    assert snapshot.duration_seconds < serial_seconds / 3, (
        snapshot.duration_seconds,
        serial_seconds,
    )


def test_client_refuses_a_token_and_credentials_together() -> None:
    with pytest.raises(ValueError, match="not both"):
        NksClient(
            "http://127.0.0.1:9",
            token="t",
            identity_url="http://127.0.0.1:9",
            tenant_id="x",
            username="u",
            password="p",
        )
