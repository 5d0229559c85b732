"""Every rule opens and resolves, with the clock frozen and moved by hand."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from alerts import evaluation
from alerts.conditions import Condition
from alerts.models import AlertRule, Incident, IncidentEvent, IncidentState, Rule
from alerts.rules import load_rule_configs
from dashboard.flapping import FlapPolicy
from dashboard.locks import ExpiringLock
from leases.models import KubeCluster, Lease, LeaseTransition
from nks.models import Freshness, NksAccount, NksCluster, NksNodegroup, ResizeState
from tests.alerts.conftest import Clock, evaluate, keep_fresh
from tests.alerts.factories import (
    API_DOWN,
    HEALTHY,
    make_account,
    make_nks_cluster,
    make_nodegroup,
    make_resize,
    poll,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_many_leases

pytestmark = pytest.mark.django_db

# What the Leases page counts as flapping when no admin changed the lease_flapping rule.
FLAP_THRESHOLD, FLAP_WINDOW = FlapPolicy.configured().changes, FlapPolicy.configured().window


def renew(lease: Lease, holder: str | None = None) -> None:
    now = timezone.now()
    lease.holder = lease.holder if holder is None else holder
    lease.renew_time = now
    lease.expires_at = now + timedelta(seconds=lease.lease_duration_seconds or 0)
    lease.save()


def change_holder(lease: Lease, to: str) -> None:
    LeaseTransition.objects.create(
        lease=lease, from_holder=lease.holder, to_holder=to, observed_at=timezone.now()
    )
    renew(lease, to)


def only(rule: str) -> Incident:
    return Incident.objects.get(rule=rule)


# --- lease_expired ---------------------------------------------------------------------------


def test_lease_expired_opens_after_one_more_lease_duration(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=2, duration=15)

    clock.advance(27)  # expired 14 s ago: still within the grace of one more 15 s
    evaluate(cluster)
    assert not Incident.objects.exists()

    clock.advance(1)
    summary = evaluate(cluster)

    incident = only(Rule.LEASE_EXPIRED)
    assert summary.opened == [incident.pk]
    assert incident.state == IncidentState.FIRING
    assert incident.key == "lease_expired:prod/kube-system/kube-scheduler"
    assert incident.full_title == "prod: kube-system/kube-scheduler lease expired"
    assert incident.since == NOW + timedelta(seconds=13)  # the expiry, not the evaluation
    assert incident.opened_at == NOW + timedelta(seconds=28)
    assert incident.details["holder"] == "master-0_6f1c"


@pytest.mark.parametrize(
    ("change", "note"),
    [
        ("renew", "renewed by master-0"),
        ("takeover", "taken over by master-1"),
        ("release", "the lease was released (no holder)"),
        ("delete", "the lease was deleted"),
    ],
)
def test_lease_expired_resolves_when_renewed_taken_over_released_or_deleted(
    clock: Clock, change: str, note: str
) -> None:
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "kube-controller-manager", holder="master-0", duration=15)
    clock.advance(60)
    evaluate(cluster)
    incident = only(Rule.LEASE_EXPIRED)

    clock.advance(5)
    if change == "renew":
        renew(lease)
    elif change == "takeover":
        change_holder(lease, "master-1")
    elif change == "release":
        Lease.objects.filter(pk=lease.pk).update(holder="")
    else:
        Lease.objects.filter(pk=lease.pk).update(deleted_at=timezone.now())
    summary = evaluate(cluster)

    incident.refresh_from_db()
    assert summary.resolved == [incident.pk]
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolved_at == NOW + timedelta(seconds=65)
    assert incident.resolution == note
    # Expired at NOW-2+15, resolved at NOW+65.
    assert incident.duration() == timedelta(seconds=52)


def test_lease_expired_ignores_released_node_and_api_server_identity_leases(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "my-operator-leader", namespace="ops", holder="")
    make_lease(cluster, "apiserver-abc123", holder="kube-apiserver-abc123", duration=3600)
    make_lease(cluster, "node-1", namespace="kube-node-lease", holder="node-1", duration=40)
    clock.advance(10_000)

    evaluate(cluster)

    assert not Incident.objects.filter(rule=Rule.LEASE_EXPIRED).exists()


def test_lease_grace_comes_from_the_setting_and_an_admin_override_beats_it(
    clock: Clock, settings: Any
) -> None:
    settings.ALERT_LEASE_GRACE_SECONDS = 0
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", renewed_ago=2, duration=15)
    make_lease(cluster, "my-operator-leader", namespace="ops", renewed_ago=2, duration=15)

    clock.advance(13)  # both expire now: a grace of 0 opens at once
    evaluate(cluster)
    assert Incident.objects.filter(rule=Rule.LEASE_EXPIRED).count() == 2

    Incident.objects.all().delete()
    AlertRule.objects.filter(rule=Rule.LEASE_EXPIRED).update(grace_seconds=60)
    evaluate(cluster)
    assert not Incident.objects.exists()
    clock.advance(60)
    evaluate(cluster)
    assert Incident.objects.filter(rule=Rule.LEASE_EXPIRED).count() == 2


def test_a_disabled_rule_resolves_its_incidents_and_opens_none(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", duration=15)
    clock.advance(60)
    evaluate(cluster)
    incident = only(Rule.LEASE_EXPIRED)

    AlertRule.objects.filter(rule=Rule.LEASE_EXPIRED).update(enabled=False)
    make_lease(cluster, "kube-controller-manager", renewed_ago=120, duration=15)
    evaluate(cluster)

    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "the rule was disabled"
    assert Incident.objects.filter(rule=Rule.LEASE_EXPIRED).count() == 1


# --- lease_flapping --------------------------------------------------------------------------


def test_flapping_defaults_are_the_leases_page_definition() -> None:
    from django.conf import settings

    assert settings.ALERT_FLAP_CHANGES == FLAP_THRESHOLD
    assert FLAP_WINDOW.total_seconds() == settings.ALERT_FLAP_WINDOW_SECONDS


def test_flapping_lease_is_one_incident_that_resolves_after_a_quiet_window(clock: Clock) -> None:
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "my-operator-leader", namespace="ops", holder="pod-a")
    change_holder(lease, "pod-b")
    clock.advance(60)
    change_holder(lease, "pod-a")
    evaluate(cluster)
    assert not Incident.objects.exists(), "two changes are not flapping"

    clock.advance(60)
    change_holder(lease, "pod-b")
    evaluate(cluster)
    incident = only(Rule.LEASE_FLAPPING)
    assert incident.state == IncidentState.FIRING
    assert incident.since == NOW

    # It keeps changing for half an hour, at times fewer than 3 per window: still one
    # incident, never resolved and re-opened in between (hysteresis).
    for holder in ["pod-a", "pod-b", "pod-c", "pod-a", "pod-b", "pod-c", "pod-a"]:
        clock.advance(270)
        change_holder(lease, holder)
        evaluate(cluster)
        incident.refresh_from_db()
        assert incident.state == IncidentState.FIRING
    assert Incident.objects.filter(rule=Rule.LEASE_FLAPPING).count() == 1
    assert not IncidentEvent.objects.filter(kind=IncidentEvent.Kind.RESOLVED).exists()

    clock.advance(599)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.FIRING, "a change 599 s ago is within the window"
    clock.advance(2)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "no holder change for 10 min"


# --- node_heartbeats_expired -----------------------------------------------------------------


def test_500_expiring_node_leases_are_one_incident_updated_as_nodes_come_back(
    clock: Clock,
) -> None:
    cluster = make_cluster("prod")
    nodes = make_many_leases(cluster, 500)  # renewed 3 s before NOW, 40 s leases

    clock.advance(37)
    evaluate(cluster)
    incident = only(Rule.NODE_HEARTBEATS_EXPIRED)
    assert incident.key == "node_heartbeats_expired:prod"
    assert incident.title == "500 nodes stopped heart-beating"
    assert incident.details["items_total"] == 500
    assert incident.details["items"][:2] == ["node-0000", "node-0001"]

    clock.advance(5)
    Lease.objects.filter(pk__in=[lease.pk for lease in nodes[1:]]).update(
        renew_time=timezone.now(), expires_at=timezone.now() + timedelta(seconds=40)
    )
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.FIRING
    assert incident.title == "1 node stopped heart-beating"
    assert incident.details["items"] == ["node-0000"]
    update = IncidentEvent.objects.get(incident=incident, kind=IncidentEvent.Kind.UPDATED)
    assert update.text.startswith("Nodes whose lease in kube-node-lease expired: now 1; gone ")

    clock.advance(5)
    Lease.objects.filter(pk=nodes[0].pk).update(expires_at=timezone.now() + timedelta(seconds=40))
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "every node is heart-beating again"
    assert Incident.objects.count() == 1


# --- source_stale (watchers) and stale data --------------------------------------------------


def test_a_watcher_that_stops_writing_opens_source_stale_and_resolves_when_it_writes(
    clock: Clock,
) -> None:
    cluster = make_cluster("prod")  # data known as of 1 s before NOW
    clock.advance(18)
    evaluate()
    assert not Incident.objects.filter(state=IncidentState.FIRING).exists()

    clock.advance(1)  # 20 s (ALERT_WATCH_STALE_SECONDS) past the data's as-of moment
    evaluate()
    incident = only(Rule.SOURCE_STALE)
    assert incident.state == IncidentState.FIRING
    assert incident.key == "source_stale:watch:prod"
    assert incident.since == NOW - timedelta(seconds=1)

    clock.advance(30)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "the watcher is writing current data again"
    assert incident.duration() == timedelta(seconds=50)


def test_a_disconnected_watcher_is_pending_until_the_threshold_then_opens(clock: Clock) -> None:
    cluster = make_cluster("prod")

    def disconnected_tick(seconds: float) -> None:
        clock.advance(seconds)
        # The flush loop still writes while the stream is down and being retried, but
        # nothing proves the data current: its as-of moment stays where it was.
        KubeCluster.objects.filter(pk=cluster.pk).update(
            connected=False, last_flush_at=timezone.now()
        )
        evaluate()

    disconnected_tick(1)
    pending = Incident.objects.get(rule=Rule.SOURCE_STALE)
    assert pending.state == IncidentState.PENDING
    assert not Incident.objects.open().exists()

    disconnected_tick(17)  # 19 s past the data's as-of moment (1 s before NOW)
    assert Incident.objects.get(pk=pending.pk).state == IncidentState.PENDING
    disconnected_tick(1)
    assert Incident.objects.get(pk=pending.pk).state == IncidentState.FIRING


def test_a_short_disconnection_leaves_no_incident_behind(clock: Clock) -> None:
    cluster = make_cluster("prod")
    KubeCluster.objects.filter(pk=cluster.pk).update(connected=False)
    evaluate()
    assert Incident.objects.filter(state=IncidentState.PENDING).count() == 1

    clock.advance(5)
    evaluate(cluster)
    assert not Incident.objects.exists()


def test_while_a_watcher_is_stale_its_lease_incidents_neither_open_nor_resolve(
    clock: Clock,
) -> None:
    """Old data would say every lease expired (no renewals seen) and every flapping lease
    calmed down (no changes seen): neither may be mailed. source_stale is, once."""
    cluster = make_cluster("prod")
    flapper = make_lease(cluster, "my-operator-leader", namespace="ops", holder="a")
    for holder in ["b", "a", "b"]:
        change_holder(flapper, holder)
    make_lease(cluster, "kube-scheduler", renewed_ago=0, duration=15)
    evaluate(cluster)
    flapping = only(Rule.LEASE_FLAPPING)

    # The watcher dies. Twelve minutes later the flapping window has passed without a
    # recorded change, and the scheduler's lease is long past its expiry by the clock.
    clock.advance(720)
    evaluate()

    flapping.refresh_from_db()
    assert flapping.state == IncidentState.FIRING
    assert not Incident.objects.filter(rule=Rule.LEASE_EXPIRED).exists()
    assert only(Rule.SOURCE_STALE).state == IncidentState.FIRING

    # The watcher is back: a relist shows both leases renewed all along.
    Lease.objects.update(
        renew_time=timezone.now(), expires_at=timezone.now() + timedelta(seconds=15)
    )
    evaluate(cluster)
    flapping.refresh_from_db()
    assert flapping.state == IncidentState.RESOLVED
    assert not Incident.objects.filter(rule=Rule.LEASE_EXPIRED).exists()
    assert only(Rule.SOURCE_STALE).state == IncidentState.RESOLVED


def test_a_removed_cluster_resolves_its_incidents(clock: Clock) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler", duration=15)
    clock.advance(60)
    evaluate(cluster)
    incident = only(Rule.LEASE_EXPIRED)

    cluster.delete()
    evaluate()

    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "the cluster was removed from the dashboard"


# --- Two evaluations at once -----------------------------------------------------------------


def test_opening_a_key_someone_else_just_opened_updates_theirs(clock: Clock) -> None:
    config = load_rule_configs()[Rule.LEASE_EXPIRED]
    condition = Condition(
        key="lease_expired:prod/kube-system/kube-scheduler",
        title="kube-system/kube-scheduler lease expired",
        cluster="prod",
        details={"holder": "master-0"},
        since=NOW,
    )
    first, created = evaluation.open_incident(
        Rule.LEASE_EXPIRED, config, condition.key, condition, timezone.now()
    )
    assert created

    # A second evaluation that read "no incident yet" before the first committed:
    second, created = evaluation.open_incident(
        Rule.LEASE_EXPIRED, config, condition.key, condition, timezone.now()
    )

    assert not created
    assert second.pk == first.pk
    assert Incident.objects.count() == 1


def test_an_evaluation_while_another_holds_the_lock_does_nothing(clock: Clock) -> None:
    lock = ExpiringLock(evaluation.EVALUATION_LOCK, owner="someone-else", ttl=30)
    assert lock.acquire()
    try:
        assert evaluation.run_evaluation(dispatch=False) is None
    finally:
        lock.release()
    assert evaluation.run_evaluation(dispatch=False) is not None


@pytest.mark.django_db(transaction=True)
def test_two_processes_evaluating_at_once_open_one_incident() -> None:
    # Both skip the lock on purpose (evaluate_rules): the database alone must hold the line.
    cluster = make_cluster("prod", last_flush_at=timezone.now(), connected=True)
    renewed = timezone.now() - timedelta(seconds=100)
    Lease.objects.create(
        cluster=cluster,
        namespace="kube-system",
        name="kube-scheduler",
        lease_class="control_plane",
        holder="master-0",
        renew_time=renewed,
        lease_duration_seconds=15,
        expires_at=renewed + timedelta(seconds=15),
    )
    start = threading.Barrier(2)
    errors: list[BaseException] = []

    def evaluate_once() -> None:
        from django.db import connection

        try:
            start.wait()
            summary = evaluation.evaluate_rules(timezone.now())
            errors.extend(RuntimeError(error) for error in summary.errors)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=evaluate_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert Incident.objects.filter(key="lease_expired:prod/kube-system/kube-scheduler").count() == 1


# --- NKS -------------------------------------------------------------------------------------


def test_cluster_unhealthy_opens_after_two_polls_and_says_which(clock: Clock) -> None:
    cluster = make_nks_cluster(make_account(), "prod")
    poll(cluster, node_status="NOT_READY_NODE_EXIST", **API_DOWN)
    evaluate()
    assert not Incident.objects.open().exists()

    clock.advance(30)
    poll(cluster)
    evaluate()
    assert not Incident.objects.open().exists()

    clock.advance(30)  # two poll intervals (NKS_POLL_SECONDS=30) of a bad API
    poll(cluster)
    evaluate()
    incident = only(Rule.CLUSTER_UNHEALTHY)
    assert incident.state == IncidentState.FIRING
    assert incident.key == "cluster_unhealthy:kr1/prod"
    assert incident.title == (
        "NKS cluster unhealthy: API K8S_API_NOT_WORKING, nodes NOT_READY_NODE_EXIST"
    )
    assert incident.details["api_down"] is True
    assert incident.since == NOW

    clock.advance(30)
    poll(cluster, **HEALTHY)
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "API and nodes are NORMAL and the health data is fresh"


def test_a_blip_shorter_than_the_grace_leaves_no_incident(clock: Clock) -> None:
    cluster = make_nks_cluster(make_account(), "prod")
    poll(cluster, freshness=Freshness.ROTTEN, health_status="ROTTEN")
    evaluate()
    clock.advance(30)
    poll(cluster, freshness=Freshness.FRESH, health_status="FRESH")
    evaluate()
    assert not Incident.objects.exists()


def test_stale_health_data_from_nks_is_unhealthy(clock: Clock) -> None:
    cluster = make_nks_cluster(make_account(), "prod")
    for _ in range(3):
        poll(cluster, freshness=Freshness.STALE, health_status="STALE")
        evaluate()
        clock.advance(30)
    assert only(Rule.CLUSTER_UNHEALTHY).title == "NKS cluster unhealthy: health data STALE"


def test_nodegroup_not_ready_opens_resolves_and_is_not_judged_while_updating(
    clock: Clock,
) -> None:
    # Not watched: the node's name comes from NKS's per-node "<node>.Ready" keys.
    cluster = make_nks_cluster(
        make_account(), "prod", node_readiness={"prod-pool-a-1": True, "prod-pool-a-2": False}
    )
    group = make_nodegroup(
        cluster, "pool-a", ready=2, not_ready=1, node_status="NOT_READY_NODE_EXIST"
    )
    for _ in range(3):
        poll(cluster)
        evaluate()
        clock.advance(30)
    incident = only(Rule.NODEGROUP_NOT_READY)
    assert incident.title == "nodegroup pool-a: 1 node not ready"
    assert incident.details["items"] == ["prod-pool-a-2"]

    # A resize is in progress: new nodes are not ready while they join. Not judged.
    NksNodegroup.objects.filter(pk=group.pk).update(status="UPDATE_IN_PROGRESS", not_ready=0)
    poll(cluster)
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.FIRING

    NksNodegroup.objects.filter(pk=group.pk).update(status="UPDATE_COMPLETE", ready=3)
    NksNodegroup.objects.filter(pk=group.pk).update(node_status="NORMAL")
    poll(cluster)
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED


def test_resize_failed_stays_open_until_a_later_resize_succeeds(clock: Clock) -> None:
    group = make_nodegroup(make_nks_cluster(make_account(), "prod"), "pool-a")
    failed = make_resize(group, ResizeState.FAILED, error="quota exceeded: 5 instances max")
    evaluate()
    incident = only(Rule.RESIZE_FAILED)
    assert incident.key == "resize_failed:kr1/prod/pool-a"
    assert incident.title == "resize of nodegroup pool-a to 5 nodes failed"
    assert incident.since == failed.finished_at
    assert {"label": "Error", "text": "quota exceeded: 5 instances max"} in incident.details[
        "facts"
    ]

    clock.advance(600)
    make_resize(group, ResizeState.SUCCEEDED, to_count=4)
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution.endswith("to 4 nodes succeeded")


def test_resize_failed_resolves_after_its_window(clock: Clock) -> None:
    make_resize(make_nodegroup(make_nks_cluster(make_account(), "prod")), ResizeState.FAILED)
    evaluate()
    incident = only(Rule.RESIZE_FAILED)
    clock.advance(24 * 3600 + 1)
    poll(NksCluster.objects.get())
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "no successful resize since; the failure is older than 24 h"


def test_failing_nks_polls_open_source_stale_and_freeze_the_cluster_rules(clock: Clock) -> None:
    account = make_account(created_at=NOW - timedelta(days=1))
    cluster = make_nks_cluster(account, "prod")
    for _ in range(3):
        poll(cluster, **API_DOWN)
        evaluate()
        clock.advance(30)
    unhealthy = only(Rule.CLUSTER_UNHEALTHY)

    # Polls fail from now on: the last good data said "API down"; nothing new is known.
    NksAccount.objects.filter(pk=account.pk).update(last_error="NKS answered 503")
    clock.advance(91)
    evaluate()
    stale = only(Rule.SOURCE_STALE)
    assert stale.key == "source_stale:nks:kr1"
    assert stale.state == IncidentState.FIRING
    unhealthy.refresh_from_db()
    assert unhealthy.state == IncidentState.FIRING, "stale data neither resolves nor updates"

    poll(cluster, **HEALTHY)
    evaluate()
    stale.refresh_from_db()
    unhealthy.refresh_from_db()
    assert stale.state == IncidentState.RESOLVED
    assert unhealthy.state == IncidentState.RESOLVED


def test_kube_clusters_keep_fresh_helper_only_touches_watcher_fields() -> None:
    cluster = make_cluster("prod", fresh=False)
    keep_fresh(cluster)
    cluster.refresh_from_db()
    assert cluster.connected
    assert not cluster.is_stale()


def test_a_cluster_whose_refresh_keeps_failing_opens_source_stale_of_its_own(
    clock: Clock,
) -> None:
    account = make_account()
    cluster = make_nks_cluster(account, "prod")
    evaluate()
    # The account's polls succeed, but this cluster's details fail every time.
    NksCluster.objects.filter(pk=cluster.pk).update(last_error="health endpoint: 500")
    for _ in range(4):
        clock.advance(30)
        NksAccount.objects.filter(pk=account.pk).update(last_success_at=timezone.now())
        NksCluster.objects.filter(pk=cluster.pk).update(polled_at=timezone.now())
        evaluate()

    stale = only(Rule.SOURCE_STALE)
    assert stale.key == "source_stale:nks-cluster:kr1/prod"
    assert stale.title == "NKS data about cluster prod is not refreshed"
    assert {"label": "Last error", "text": "health endpoint: 500"} in stale.details["facts"]

    poll(cluster, last_error="")
    evaluate()
    stale.refresh_from_db()
    assert stale.state == IncidentState.RESOLVED


def test_a_graceful_handover_is_one_change_not_two_for_flapping(clock: Clock) -> None:
    """Seen against a real kube-apiserver: a failover then one release-and-takeover (client-go's
    ReleaseOnCancel) opened lease_flapping, the release counting as a change of its own. A
    rolling restart of a two-replica controller would page on-call every time."""
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "my-operator-leader", namespace="ops", holder="a")
    change_holder(lease, "b")  # a failover
    change_holder(lease, "")  # b releases it
    change_holder(lease, "c")  # c takes over at once
    evaluate(cluster)
    assert not Incident.objects.filter(rule=Rule.LEASE_FLAPPING).exists()
    change_holder(lease, "a")  # the third holder change within the window
    evaluate(cluster)
    assert only(Rule.LEASE_FLAPPING).state == IncidentState.FIRING
