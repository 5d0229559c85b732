"""leader_group_unstaffed, leader_group_degraded and fencing_token_reused: opening, resolving,
stale sources, inhibition, and the mail they send with a hostile identity."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from alerts import evaluation
from alerts.models import Hold, Incident, IncidentState, Rule
from leases.models import KubeCluster, LeaderGroup, Lease, LeaseTransition
from tests.alerts.conftest import Clock, evaluate
from tests.alerts.factories import API_DOWN, make_account, make_nks_cluster, poll
from tests.leases.factories import NOW, make_cluster
from tests.leases.group_factories import make_leader_k8s_lease, make_slot, token

pytestmark = pytest.mark.django_db

HOSTILE = "<img src=x onerror=alert(1)>\r\nBcc: evil@example.com"


def only(rule: str) -> Incident:
    return Incident.objects.get(rule=rule)


def renew(lease: Lease, seconds: int = 15) -> None:
    now = timezone.now()
    Lease.objects.filter(pk=lease.pk).update(
        renew_time=now, expires_at=now + timedelta(seconds=seconds)
    )


# --- leader_group_unstaffed ------------------------------------------------------------------


def test_unstaffed_opens_one_lease_duration_after_the_last_slot_expired(clock: Clock) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=7, duration=15)  # expires NOW + 8 s
    second = make_slot(cluster, "orders", 1, renewed_ago=2, duration=15)  # NOW + 13 s

    clock.advance(27)
    evaluate(cluster)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED, state="firing").exists()

    clock.advance(1)
    evaluate(cluster)
    incident = only(Rule.LEADER_GROUP_UNSTAFFED)
    assert incident.state == IncidentState.FIRING
    assert incident.severity == "critical"
    assert incident.key == "leader_group_unstaffed:prod/apps/orders"
    assert incident.full_title == "prod: leader group apps/orders: no slot held"
    assert incident.since == NOW + timedelta(seconds=13)
    assert incident.link == "/leases/clusters/prod/groups/apps/orders/"
    assert incident.details["items"][1].startswith("slot 1: expired, last held by node-1")

    renew(second)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "1 of ≥ 2 slots (highest slot seen) held again"


def test_a_slot_whose_expiry_the_data_does_not_vouch_for_leaves_the_group_unjudged(
    clock: Clock,
) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=7, duration=15)  # expires NOW + 8 s
    make_slot(cluster, "orders", 1, renewed_ago=2, duration=15)  # NOW + 13 s
    clock.advance(28)
    # The data is current (2 s old) but known only up to NOW + 12 s: slot 1's renewal may be
    # on its way, so the group is not known unstaffed.
    KubeCluster.objects.filter(pk=cluster.pk).update(
        connected=True, leases_as_of=NOW + timedelta(seconds=12), last_flush_at=timezone.now()
    )
    evaluation.run_evaluation(dispatch=False)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED).exists()
    # Observed again after a stall that ended at NOW + 20 s: its holders get one lease
    # duration to renew before the group is judged.
    KubeCluster.objects.filter(pk=cluster.pk).update(
        leases_as_of=timezone.now(), leases_observed_since=NOW + timedelta(seconds=20)
    )
    evaluation.run_evaluation(dispatch=False)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED).exists()
    clock.advance(8)  # NOW + 36 s: a lease duration (15 s) after observation resumed
    evaluate(cluster)
    assert only(Rule.LEADER_GROUP_UNSTAFFED).state == IncidentState.FIRING


def test_a_group_with_one_slot_held_is_not_unstaffed(clock: Clock) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, duration=None)
    make_slot(cluster, "orders", 1, renewed_ago=300)
    make_slot(cluster, "orders", 2, holder="")
    clock.advance(600)
    evaluate(cluster)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED).exists()
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_DEGRADED).exists()


def test_a_released_group_is_unstaffed_since_its_release_was_seen(clock: Clock) -> None:
    cluster = make_cluster()
    released = make_slot(cluster, "orders", 0, holder="", observed_at=NOW - timedelta(seconds=5))
    clock.advance(60)
    evaluate(cluster)
    incident = only(Rule.LEADER_GROUP_UNSTAFFED)
    assert incident.state == IncidentState.FIRING
    assert incident.since == released.observed_at


def test_lease_of_another_library_named_like_a_slot_opens_nothing(clock: Clock) -> None:
    cluster = make_cluster()
    make_leader_k8s_lease(cluster, "orders-slot-0", holder="pod-1", managed=False, renewed_ago=60)
    clock.advance(60)
    evaluate(cluster)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_UNSTAFFED).exists()


def test_while_the_watcher_is_stale_group_incidents_neither_open_nor_resolve(clock: Clock) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=60)
    other = make_slot(cluster, "billing", 0, renewed_ago=60)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=2)
    evaluate(cluster)
    orders = Incident.objects.get(key="leader_group_unstaffed:prod/apps/orders")
    assert orders.state == IncidentState.FIRING

    # The watcher dies; the data about orders cannot be trusted, and billing stays unjudged.
    Lease.objects.filter(group_name="orders").update(expires_at=None)
    Incident.objects.filter(key="leader_group_unstaffed:prod/apps/billing").delete()
    renew(other, seconds=-1)  # still expired by the clock
    clock.advance(120)
    evaluate()
    orders.refresh_from_db()
    assert orders.state == IncidentState.FIRING
    assert not Incident.objects.filter(key="leader_group_unstaffed:prod/apps/billing").exists()
    assert only(Rule.SOURCE_STALE).state == IncidentState.FIRING

    evaluate(cluster)  # the watcher is back: orders' slot is held
    orders.refresh_from_db()
    assert orders.state == IncidentState.RESOLVED
    assert Incident.objects.get(key="leader_group_unstaffed:prod/apps/billing").state == (
        IncidentState.FIRING
    )


def test_a_disabled_cluster_resolves_its_group_incidents(clock: Clock) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=60)
    evaluate(cluster)
    incident = only(Rule.LEADER_GROUP_UNSTAFFED)
    KubeCluster.objects.filter(pk=cluster.pk).update(enabled=False)
    evaluate()
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "the cluster was disabled: its leases are no longer watched"


def test_unstaffed_mail_is_held_back_while_the_clusters_api_is_down(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    kube = make_cluster("prod")
    make_slot(kube, "orders", 0, renewed_ago=2, duration=15)
    nks = make_nks_cluster(make_account(), "prod")
    for _ in range(4):
        poll(nks, **API_DOWN)
        evaluate(kube)
        clock.advance(20)
    incident = only(Rule.LEADER_GROUP_UNSTAFFED)
    assert incident.state == IncidentState.FIRING
    assert incident.hold == Hold.INHIBITED
    assert not [m for m in mailoutbox if "no slot held" in m.subject]


# --- leader_group_degraded -------------------------------------------------------------------


def test_degraded_needs_an_expected_size_and_opens_after_the_grace(clock: Clock) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, duration=None)
    make_slot(cluster, "orders", 1, duration=None)
    third = make_slot(cluster, "orders", 2, renewed_ago=20, duration=15)  # expired NOW - 5 s
    evaluate(cluster)
    assert not Incident.objects.filter(rule=Rule.LEADER_GROUP_DEGRADED).exists()

    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=3)
    evaluate(cluster)
    assert only(Rule.LEADER_GROUP_DEGRADED).state == IncidentState.PENDING
    clock.advance(10)
    evaluate(cluster)
    incident = only(Rule.LEADER_GROUP_DEGRADED)
    assert incident.state == IncidentState.FIRING
    assert incident.severity == "warning"
    assert incident.full_title == "prod: leader group apps/orders: 2 of 3 slots held"
    assert incident.since == NOW - timedelta(seconds=5)

    renew(third)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "3 of 3 expected held again"


def test_a_never_seen_expected_slot_starts_the_clock_at_the_first_evaluation(
    clock: Clock,
) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=0, duration=15)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=2)
    evaluate(cluster)
    incident = only(Rule.LEADER_GROUP_DEGRADED)
    assert (incident.state, incident.since) == (IncidentState.PENDING, NOW)
    assert "slot 1: never seen" in incident.details["items"]


def test_degraded_hands_over_to_unstaffed_when_no_slot_is_left(clock: Clock) -> None:
    cluster = make_cluster()
    first = make_slot(cluster, "orders", 0, renewed_ago=0, duration=15)
    make_slot(cluster, "orders", 1, renewed_ago=60, duration=15)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=2)
    evaluate(cluster)
    assert only(Rule.LEADER_GROUP_DEGRADED).state == IncidentState.FIRING
    clock.advance(16)
    evaluate(cluster)
    degraded = only(Rule.LEADER_GROUP_DEGRADED)
    assert degraded.state == IncidentState.RESOLVED
    assert degraded.resolution == "no slot is held any more: see leader_group_unstaffed"
    assert only(Rule.LEADER_GROUP_UNSTAFFED).since == first.expires_at


# --- fencing_token_reused --------------------------------------------------------------------


def reuse_history(lease: Lease, reused_identity: str = "node-a") -> LeaseTransition:
    """Token A held the lease, token B took it over, then token A wrote again."""
    a, b = token(101), token(202)
    LeaseTransition.objects.create(
        lease=lease,
        from_holder="",
        to_holder=a,
        to_identity=reused_identity,
        observed_at=NOW - timedelta(minutes=10),
        acquire_time=NOW - timedelta(minutes=10),
    )
    LeaseTransition.objects.create(
        lease=lease,
        from_holder=a,
        to_holder=b,
        from_identity=reused_identity,
        to_identity="node-b",
        observed_at=NOW - timedelta(minutes=5),
        acquire_time=NOW - timedelta(minutes=5),
    )
    reuse = LeaseTransition.objects.create(
        lease=lease,
        from_holder=b,
        to_holder=a,
        from_identity="node-b",
        to_identity=reused_identity,
        observed_at=NOW,
        fencing_reused=True,
    )
    Lease.objects.filter(pk=lease.pk).update(fencing_reused_at=NOW)
    return reuse


def test_a_reused_token_opens_a_critical_incident_naming_both_holders(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster()
    lease = make_slot(cluster, "orders", 0, seed=101, node_id="node-a")
    reuse_history(lease)
    evaluate(cluster)

    incident = only(Rule.FENCING_TOKEN_REUSED)
    assert incident.state == IncidentState.FIRING
    assert incident.severity == "critical"
    assert incident.key == "fencing_token_reused:prod/apps/orders-slot-0"
    assert incident.full_title == "prod: apps/orders-slot-0: fencing token reused"
    facts = {item["label"]: item for item in incident.details["facts"]}
    assert facts["Reused token's holder (node id)"] == {
        "label": "Reused token's holder (node id)",
        "text": "node-a",
        "token": token(101),
    }
    assert facts["Holder in between (node id)"]["text"] == "node-b"
    assert facts["Holder in between (node id)"]["token"] == token(202)
    assert facts["That token first held the lease"]["at"] == "2026-11-29T07:50:00Z"
    assert facts["The holder in between took over"]["at"] == "2026-11-29T07:55:00Z"
    assert facts["The old token was seen again"]["at"] == "2026-11-29T08:00:00Z"

    [message] = [m for m in mailoutbox if "fencing" in m.subject]
    assert message.subject == "[FIRING] prod: apps/orders-slot-0: fencing token reused"
    assert f"Reused token's holder (node id): node-a (token {token(101)})" in message.body
    assert f"Holder in between (node id): node-b (token {token(202)})" in message.body

    # It stays open for the rule's window after the last reuse, then resolves.
    clock.advance(24 * 3600 - 1)
    evaluate(cluster)
    assert only(Rule.FENCING_TOKEN_REUSED).state == IncidentState.FIRING
    clock.advance(1)
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.state == IncidentState.RESOLVED
    assert incident.resolution == "no fencing token came back for 24 h"


def test_a_reused_token_on_a_stale_cluster_opens_nothing(clock: Clock) -> None:
    cluster = make_cluster(fresh=False)
    lease = make_slot(cluster, "orders", 0, seed=101)
    reuse_history(lease)
    evaluate()
    assert not Incident.objects.filter(rule=Rule.FENCING_TOKEN_REUSED).exists()
    evaluate(cluster)
    assert only(Rule.FENCING_TOKEN_REUSED).state == IncidentState.FIRING


def test_mail_keeps_a_hostile_identity_out_of_headers_and_escaped(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster()
    lease = make_slot(cluster, "orders", 0, seed=101, node_id=HOSTILE)
    reuse_history(lease, reused_identity=HOSTILE)
    evaluate(cluster)

    [message] = [m for m in mailoutbox if "fencing" in m.subject]
    headers = message.message().as_string().split("\n\n", 1)[0]
    assert "evil@example.com" not in headers
    assert "onerror" not in message.subject
    assert message.bcc == []
    html = message.alternatives[0][0]
    assert "<img" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;\\x0d\\x0aBcc: evil@example.com" in html
    assert "<img src=x onerror=alert(1)>\\x0d\\x0aBcc: evil@example.com" in message.body


def test_lease_expired_mail_shows_the_identity_with_the_token_beside_it(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster()
    make_slot(cluster, "scheduler", 0, seed=7, node_id="pod-7", renewed_ago=60)
    evaluate(cluster)
    [message] = mailoutbox
    assert f"Holder (last renewed by): pod-7 (token {token(7)})" in message.body
    html = message.alternatives[0][0]
    assert "pod-7" in html
    assert f'font-size: 12px;">{token(7)}</span>' in html


def test_a_leader_k8s_lease_taken_over_resolves_naming_the_new_node(clock: Clock) -> None:
    cluster = make_cluster()
    lease = make_slot(cluster, "scheduler", 0, seed=7, node_id="pod-7", renewed_ago=60)
    evaluate(cluster)
    incident = only(Rule.LEASE_EXPIRED)
    Lease.objects.filter(pk=lease.pk).update(
        holder=token(8),
        token=token(8),
        identity="pod-8",
        renew_time=timezone.now(),
        expires_at=timezone.now() + timedelta(seconds=15),
    )
    evaluate(cluster)
    incident.refresh_from_db()
    assert incident.resolution == f"taken over by pod-8 (token {token(8)})"
