"""The poller over real HTTP against the fake NKS: what it stores, and how it survives faults."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from dashboard.retention import PLANS, prune
from fakes.nks import FakeNks
from nks.health import nodegroup_of_node
from nks.models import (
    EventState,
    Freshness,
    Health,
    HealthSample,
    NksAccount,
    NksCluster,
    NksEvent,
    NksNodegroup,
    stale_after,
)
from nks.poller import claim_due_accounts, poll_account, poll_lock

pytestmark = pytest.mark.django_db


def cluster(name: str) -> NksCluster:
    return NksCluster.objects.get(name=name)


def nodegroup(cluster_name: str, name: str) -> NksNodegroup:
    return NksNodegroup.objects.get(cluster__name=cluster_name, name=name)


def poll(account: NksAccount) -> Any:
    result = poll_account(account.pk)
    account.refresh_from_db()
    return result


# --- What a poll stores ----------------------------------------------------------------------


def test_poll_stores_every_cluster_nodegroup_event_and_one_sample_each(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    assert sorted(NksCluster.objects.values_list("name", flat=True)) == [
        "legacy-batch",
        "prod-api",
        "staging-web",
    ]
    assert NksNodegroup.objects.count() == 5
    assert NksEvent.objects.count() == 9
    assert HealthSample.objects.count() == 3
    prod = cluster("prod-api")
    assert (prod.status, prod.health, prod.freshness) == ("CREATE_COMPLETE", "healthy", "FRESH")
    assert (prod.api_status, prod.node_status, prod.api_ok) == ("NORMAL", "NORMAL", True)
    assert (prod.nodes_ready, prod.nodes_not_ready, prod.node_count) == (5, 0, 5)
    assert prod.kube_version == "v1.30.3" and prod.platform_version == "1.202511.0"
    assert prod.refreshed_at == prod.polled_at and prod.last_error == ""
    assert len(prod.node_addresses) == 5
    batch = nodegroup("prod-api", "batch-worker")
    assert batch.autoscaler_enabled is True and (batch.autoscaler_min, batch.autoscaler_max) == (
        1,
        6,
    )
    assert (batch.ready, batch.not_ready, batch.node_status) == (2, 0, "NORMAL")
    # NKS names no node of a nodegroup, only addresses: nodes come from the cluster's Nodes.
    fake_group = fake_nks.state.find_nodegroup(
        fake_nks.state.find_cluster("prod-api"), "batch-worker"
    )
    assert batch.node_addresses == [node.address for node in fake_group.nodes]
    assert polled.last_success_at is not None and polled.consecutive_failures == 0
    # A token, the list, per cluster its detail, nodegroups and events, each nodegroup detail.
    assert polled.last_poll_calls == 1 + 1 + 3 * 3 + 5


def test_quirks_of_the_guide_are_stored_sensibly(polled: NksAccount) -> None:
    # staging-web: nested objects in health_status_reason, a NotReady node.
    staging = cluster("staging-web")
    assert (staging.health, staging.node_status) == ("degraded", "NOT_READY_NODE_EXIST")
    default = nodegroup("staging-web", "default-worker")
    assert (default.ready, default.not_ready) == (2, 1)
    gpu = nodegroup("staging-web", "gpu-worker")
    assert gpu.max_node_count is None and gpu.status == "UPDATE_FAILED"
    assert gpu.status_reason == "" and gpu.autoscaler_enabled is False  # null reason, "false"
    # legacy-batch: "HEALTHY" (not a documented value), per-node keys, counts as strings, the
    # list's reason JSON-encoded in a string.
    legacy = cluster("legacy-batch")
    assert legacy.health_status == "HEALTHY"
    assert legacy.freshness == Freshness.UNKNOWN
    assert legacy.health == Health.UNKNOWN, "HEALTHY must never be shown as healthy"
    assert (legacy.nodes_ready, legacy.nodes_not_ready) == (4, 0)
    assert len(legacy.node_readiness) == 4 and all(legacy.node_readiness.values())
    legacy_default = nodegroup("legacy-batch", "default-worker")
    assert (legacy_default.node_count, legacy_default.ready, legacy_default.not_ready) == (4, 4, 0)


def test_the_client_and_the_models_share_one_freshness_and_one_event_state(
    polled: NksAccount,
) -> None:
    from nks import client

    assert client.Freshness is Freshness and client.EventState is EventState
    stored = cluster("prod-api")
    assert Freshness(stored.freshness).label == "fresh"
    event = NksEvent.objects.filter(cluster=stored).first()
    assert event is not None
    assert event.get_state_display() == EventState(event.state).label


def test_unreadable_health_reason_is_unknown_with_the_reason_why(
    nks_account: NksAccount, fake_nks: FakeNks
) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster(
            "prod-api"
        ).health_reason_override = (
            '{ {"test-k8s-default-w-bnga636xulqk-node-0.Ready": "True", "api": "ok"} }'
        )
    poll(nks_account)
    prod = cluster("prod-api")
    assert prod.freshness == Freshness.FRESH and prod.health == Health.UNKNOWN
    assert "not a JSON object" in prod.health_problem
    assert prod.nodes_ready is None


@pytest.mark.parametrize(
    ("seconds", "freshness"), [(200, Freshness.STALE), (500, Freshness.ROTTEN)]
)
def test_stale_or_rotten_health_data_is_unknown(
    nks_account: NksAccount, fake_nks: FakeNks, seconds: int, freshness: Freshness
) -> None:
    with fake_nks.state.lock:
        legacy = fake_nks.state.find_cluster("legacy-batch")
        legacy.fresh_health_status = "FRESH"
    with time_machine.travel(timezone.now() + timedelta(seconds=seconds), tick=False):
        poll(nks_account)
    stored = cluster("legacy-batch")
    assert stored.freshness == freshness
    assert stored.health == Health.UNKNOWN
    sample = HealthSample.objects.get(cluster=stored)
    assert (sample.freshness, sample.health) == (freshness, Health.UNKNOWN)


def test_api_not_working_is_down(nks_account: NksAccount, fake_nks: FakeNks) -> None:
    with fake_nks.state.lock:
        fake_nks.state.find_cluster("prod-api").api_working = False
    poll(nks_account)
    prod = cluster("prod-api")
    assert (prod.api_status, prod.api_ok, prod.health) == ("K8S_API_NOT_WORKING", False, "down")


def test_a_second_poll_updates_in_place_and_writes_only_changed_events(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    ids = dict(NksCluster.objects.values_list("uuid", "pk"))
    first_seen = cluster("prod-api").first_seen_at
    with fake_nks.state.lock:
        state = fake_nks.state
        prod = state.find_cluster("prod-api")
        state.add_event(prod, event_type="NODEGROUP_SCALE_IN", state="IN_PROGRESS")
    result = poll(polled)
    assert result.store.events_written == 1
    assert dict(NksCluster.objects.values_list("uuid", "pk")) == ids
    assert NksNodegroup.objects.count() == 5 and NksEvent.objects.count() == 10
    assert cluster("prod-api").first_seen_at == first_seen
    assert HealthSample.objects.count() == 6
    newest = NksEvent.objects.filter(cluster__name="prod-api").first()
    assert (newest.type, newest.state) == ("NODEGROUP_SCALE_IN", EventState.IN_PROGRESS)


# --- Things that disappear -------------------------------------------------------------------


def test_a_cluster_nks_stops_listing_is_marked_gone_not_deleted(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    with fake_nks.state.lock:
        del fake_nks.state.clusters[fake_nks.state.find_cluster("legacy-batch").uuid]
    result = poll(polled)
    assert result.store.gone == 1
    legacy = cluster("legacy-batch")
    assert legacy.gone_at is not None
    assert legacy.nodegroups.count() == 1 and legacy.events.count() == 2, "history is kept"
    assert legacy.effective_health() == Health.UNKNOWN


def test_a_cluster_deleted_between_the_list_and_its_detail_is_gone(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    fake_nks.remove_cluster_after_list("staging-web")
    result = poll(polled)
    assert result.ok
    staging = cluster("staging-web")
    assert staging.gone_at is not None
    assert NksNodegroup.objects.filter(cluster=staging).count() == 2
    assert polled.consecutive_failures == 0, "one vanished cluster is not an account failure"
    # It comes back: no longer gone.
    assert cluster("prod-api").gone_at is None


def test_a_nodegroup_that_disappears_is_gone_and_a_returning_cluster_is_not(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    with fake_nks.state.lock:
        staging = fake_nks.state.find_cluster("staging-web")
        gpu = staging.nodegroups.pop()
    poll(polled)
    assert nodegroup("staging-web", "gpu-worker").gone_at is not None
    assert nodegroup("staging-web", "default-worker").gone_at is None
    with fake_nks.state.lock:
        staging.nodegroups.append(gpu)
    poll(polled)
    assert nodegroup("staging-web", "gpu-worker").gone_at is None


# --- Faults ----------------------------------------------------------------------------------


def test_an_account_failure_keeps_the_last_data_and_records_the_error(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    before = cluster("prod-api")
    fake_nks.fail_next(r"/v1/clusters", 500, times=10)
    result = poll(polled)
    assert result.polled and not result.ok
    assert "500 Internal Server Error" in polled.last_error
    assert (polled.last_error_kind, polled.consecutive_failures) == ("server", 1)
    after = cluster("prod-api")
    assert (after.polled_at, after.health) == (before.polled_at, "healthy"), "last data stays"
    # Three missed polls later the data is stale: shown as unknown, never as healthy.
    later = timezone.now() + stale_after() + timedelta(seconds=1)
    assert after.effective_health(later) == Health.UNKNOWN
    assert polled.is_stale(later)


def test_a_cluster_failure_is_recorded_on_its_row_and_the_rest_is_stored(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    uuid = cluster("staging-web").uuid
    refreshed = cluster("staging-web").refreshed_at
    fake_nks.fail_next(rf"/v1/clusters/{uuid}/nodegroups", 503, times=10)
    result = poll(polled)
    assert result.ok and result.store.cluster_errors == 1
    staging = cluster("staging-web")
    assert "503 Service Unavailable" in staging.last_error
    assert staging.last_error_kind == "server"
    assert staging.refreshed_at == refreshed and staging.is_stale()
    assert staging.polled_at > refreshed, "the health from the detail is still current"
    assert NksNodegroup.objects.filter(cluster=staging, gone_at__isnull=True).count() == 2
    assert cluster("prod-api").last_error == ""
    fake_nks.clear_faults()
    poll(polled)
    assert cluster("staging-web").last_error == "", "a clean poll clears the error"


def test_a_truncated_body_is_retried(polled: NksAccount, fake_nks: FakeNks) -> None:
    fake_nks.truncate_next(r"/v1/clusters")
    assert poll(polled).ok
    fake_nks.truncate_next(r"/v1/clusters", times=5)
    result = poll(polled)
    assert "not valid JSON (truncated or garbled)" in result.error
    assert polled.last_error_kind == "bad_response"


def test_a_200_with_an_html_error_page_is_an_account_error(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    fake_nks.html_next(r"/v1/clusters", times=5)
    result = poll(polled)
    assert "an HTML page instead of JSON" in result.error
    assert "Service maintenance" in result.error


def test_an_expired_token_is_renewed_once(polled: NksAccount, fake_nks: FakeNks) -> None:
    fake_nks.clear_requests()
    fake_nks.expire_all_tokens()
    assert poll(polled).ok
    assert len(fake_nks.requests_seen(r"/identity/v2\.0/tokens", method="POST")) == 1


def test_a_token_rejected_even_after_renewal_is_an_account_error(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    fake_nks.clear_requests()
    fake_nks.fail_next(r"/v1/clusters", 401, times=5)
    result = poll(polled)
    assert "401 Unauthorized" in result.error and "check the account's access" in result.error
    assert polled.last_error_kind == "auth"
    assert len(fake_nks.requests_seen(r"/identity/v2\.0/tokens", method="POST")) == 1
    assert len(fake_nks.requests_seen(r"/v1/clusters", method="GET")) == 2, "renewed once"


def test_forbidden_is_an_account_error_without_retries(
    polled: NksAccount, fake_nks: FakeNks
) -> None:
    fake_nks.clear_requests()
    fake_nks.fail_next(r"/v1/clusters", 403, times=5)
    result = poll(polled)
    assert "403 Forbidden" in result.error and "not allowed" in result.error
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_rate_limits_and_server_errors_are_retried_with_backoff(
    polled: NksAccount, fake_nks: FakeNks, status: int
) -> None:
    fake_nks.clear_requests()
    fake_nks.fail_next(r"/v1/clusters", status, times=2, retry_after=0 if status == 429 else None)
    assert poll(polled).ok
    assert len(fake_nks.requests_seen(r"/v1/clusters")) == 3


def test_a_timeout_is_recorded_on_the_cluster(
    polled: NksAccount, fake_nks: FakeNks, settings: Any
) -> None:
    settings.NKS_HTTP_TIMEOUT = 1
    settings.NKS_HTTP_RETRIES = 0
    uuid = cluster("prod-api").uuid
    fake_nks.delay_next(rf"/v1/clusters/{uuid}/events", 1.5)
    result = poll(polled)
    assert result.ok
    prod = cluster("prod-api")
    assert prod.last_error_kind == "timeout"
    assert "timed out waiting for the answer" in prod.last_error


def test_credentials_never_appear_in_recorded_errors(
    nks_account: NksAccount, fake_nks: FakeNks
) -> None:
    body = json.dumps({"error": {"message": f"bad password {fake_nks.password}"}})
    fake_nks.fail_next(r"/identity/v2\.0/tokens", 401, body=body)
    result = poll(nks_account)
    assert result.error and fake_nks.password not in result.error
    assert fake_nks.password not in nks_account.last_error


def test_an_account_without_usable_credentials_records_why(nks_account: NksAccount) -> None:
    NksAccount.objects.filter(pk=nks_account.pk).update(password="")
    nks_account.refresh_from_db()
    result = poll(nks_account)
    assert "The account cannot be used: NksClient needs either token=" in result.error
    assert nks_account.consecutive_failures == 1


# --- Running twice ---------------------------------------------------------------------------


def test_a_poll_of_an_account_being_polled_is_skipped(nks_account: NksAccount) -> None:
    running = poll_lock(nks_account.pk)
    assert running.acquire()
    try:
        assert poll_account(nks_account.pk).polled is False
        assert NksCluster.objects.count() == 0
    finally:
        running.release()
    assert poll_account(nks_account.pk).polled is True


def test_each_due_account_is_claimed_once_per_interval(
    nks_account: NksAccount, settings: Any
) -> None:
    now = timezone.now()
    assert claim_due_accounts(now) == [nks_account.pk]
    assert claim_due_accounts(now) == [], "beat running twice dispatches one poll"
    later = now + timedelta(seconds=settings.NKS_POLL_SECONDS)
    assert claim_due_accounts(later) == [nks_account.pk]
    NksAccount.objects.filter(pk=nks_account.pk).update(enabled=False)
    assert claim_due_accounts(later + timedelta(hours=1)) == []


def test_old_health_samples_are_pruned(polled: NksAccount, settings: Any) -> None:
    old = timezone.now() - timedelta(days=settings.NKS_HEALTH_HISTORY_DAYS, seconds=1)
    HealthSample.objects.filter(cluster__name="prod-api").update(taken_at=old)
    plan = [plan for plan in PLANS if plan.model is HealthSample]
    assert prune(timezone.now(), plans=plan).deleted == {HealthSample._meta.db_table: 1}
    assert HealthSample.objects.count() == 2


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("prod-default-worker-w-abc-node-0", "default-worker"),
        ("prod-default-w-abc-node-0", "default"),
        ("prod-pool-a-w-abc-node-3", "pool-a"),
        ("somewhere-else-node-1", None),
    ],
)
def test_per_node_keys_are_mapped_to_nodegroups_by_name(node: str, expected: str | None) -> None:
    groups = ["default", "default-worker", "pool-a"]
    assert nodegroup_of_node(node, "prod", groups) == expected
    assert nodegroup_of_node(node, "prod", ["only"]) == "only"
