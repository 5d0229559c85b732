"""E-mail: content, grouping, inhibition, reminders, acknowledge and silence, recipients."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from alerts import delivery, incident_actions, notifications
from alerts.models import (
    AlertRule,
    AlertSubscription,
    DeliveryState,
    Hold,
    Incident,
    IncidentEvent,
    IncidentState,
    Notice,
    Notification,
    NotificationKind,
    Rule,
    Severity,
)
from dashboard.celery import app
from leases.models import Lease, LeaseTransition, schedule_expiry
from tests.alerts.conftest import ONCALL, Clock, evaluate
from tests.alerts.factories import (
    API_DOWN,
    HEALTHY,
    make_account,
    make_incident,
    make_nks_cluster,
    poll,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_many_leases

pytestmark = pytest.mark.django_db


def subjects(outbox: list[mail.EmailMessage]) -> list[str]:
    return [message.subject for message in outbox]


def expire_scheduler(clock: Clock, holder: str = "master-0_6f1c") -> Lease:
    """kube-scheduler in prod, expired 15 s ago (plus its 15 s grace): firing from now."""
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "kube-scheduler", holder=holder, renewed_ago=30, duration=15)
    evaluate(cluster)
    return lease


# --- Content ---------------------------------------------------------------------------------


def test_opened_mail_says_what_since_when_who_holds_it_and_links_the_page(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    expire_scheduler(clock)

    [message] = mailoutbox
    incident = Incident.objects.get()
    assert message.subject == "[FIRING] prod: kube-system/kube-scheduler lease expired"
    assert message.to == [ONCALL]
    assert message.from_email == "Lease dashboard <alerts@dash.example.org>"
    assert "Since: 2026-11-29 07:59:45 UTC (15 s so far)" in message.body
    assert "Holder (last renewed by): master-0_6f1c" in message.body
    assert f"Incident page: https://dash.example.org/alerts/{incident.pk}/" in message.body
    assert "https://dash.example.org/leases/prod/kube-system/kube-scheduler/" in message.body
    html, mimetype = message.alternatives[0]
    assert mimetype == "text/html"
    assert f'href="https://dash.example.org/alerts/{incident.pk}/"' in html
    assert message.extra_headers["Message-ID"].endswith("@dash.example.org>")

    notification = Notification.objects.get()
    assert notification.kind == NotificationKind.OPENED
    assert notification.state == DeliveryState.SENT
    assert notification.attempts == 1
    assert notification.sent_at == NOW
    assert list(notification.incidents.all()) == [incident]


def test_resolve_mail_says_how_long_it_lasted_and_threads_under_the_opened_mail(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    lease = expire_scheduler(clock)
    clock.advance(107)
    lease.renew_time = timezone.now()
    lease.expires_at = timezone.now() + timedelta(seconds=15)
    lease.save()
    evaluate(lease.cluster)

    opened, resolved = mailoutbox
    assert resolved.subject == (
        "[RESOLVED] prod: kube-system/kube-scheduler lease expired (lasted 2 min)"
    )
    assert "Resolved: 2026-11-29 08:01:47 UTC - renewed by master-0_6f1c" in resolved.body
    assert "Lasted: 2 min (since 2026-11-29 07:59:45 UTC)" in resolved.body
    assert resolved.extra_headers["In-Reply-To"] == opened.extra_headers["Message-ID"]
    assert Incident.objects.get().resolve_notice == Notice.MAILED


def test_untrusted_holder_and_name_cannot_inject_headers_and_are_escaped(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster("prod")
    evil = "x\r\nBcc: attacker@evil.example\r\n\r\n<script>alert(1)</script>\u2028"
    make_lease(cluster, f"lead{evil}", namespace="ops", holder=evil, renewed_ago=60)
    evaluate(cluster)

    [message] = mailoutbox
    assert "\n" not in message.subject and "\r" not in message.subject
    assert "\u2028" not in message.subject
    raw = message.message()
    assert raw["Bcc"] is None
    assert set(raw.keys()) == {
        "Content-Type",
        "MIME-Version",
        "Subject",
        "From",
        "To",
        "Date",
        "Message-ID",
        "Auto-Submitted",
        "X-Auto-Response-Suppress",
        # The language the mail is written in: one of LANGUAGES, never a value from a cluster.
        "Content-Language",
    }
    assert message.recipients() == [ONCALL]
    assert "Holder (last renewed by): x\\x0d\\x0aBcc: attacker@evil.example" in message.body
    html = message.alternatives[0][0]
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- Grouping --------------------------------------------------------------------------------


def test_incidents_of_a_cluster_opened_within_the_group_window_share_one_mail(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod, staging = make_cluster("prod"), make_cluster("staging")
    for name, renewed_ago in [("a-leader", 30), ("b-leader", 25), ("c-leader", 20)]:
        make_lease(prod, name, namespace="ops", renewed_ago=renewed_ago, duration=15)
    make_lease(staging, "d-leader", namespace="ops", renewed_ago=25, duration=15)

    evaluate(prod, staging)  # a fires: the first word of trouble goes out at once
    clock.advance(5)
    evaluate(prod, staging)  # b waits for prod's window; d is another cluster's first
    clock.advance(5)
    evaluate(prod, staging)  # c waits too
    clock.advance(19)
    evaluate(prod, staging)
    assert len(mailoutbox) == 2
    clock.advance(1)  # 30 s after prod's first mail
    evaluate(prod, staging)

    assert subjects(mailoutbox) == [
        "[FIRING] prod: ops/a-leader lease expired",
        "[FIRING] staging: ops/d-leader lease expired",
        "[FIRING] prod: ops/b-leader lease expired (+1 more)",
    ]
    assert "2 new incidents" in mailoutbox[2].body
    assert "ops/c-leader lease expired" in mailoutbox[2].body


def test_an_incident_that_resolves_while_waiting_for_its_group_gets_one_resolve_mail(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    prod = make_cluster("prod")
    make_lease(prod, "a-leader", namespace="ops", renewed_ago=30, duration=15)
    b = make_lease(prod, "b-leader", namespace="ops", renewed_ago=25, duration=15)
    evaluate(prod)
    clock.advance(5)
    evaluate(prod)  # b is open, waiting for the window
    clock.advance(5)
    Lease.objects.filter(pk=b.pk).update(expires_at=timezone.now() + timedelta(hours=1))
    evaluate(prod)
    clock.advance(30)
    evaluate(prod)

    assert subjects(mailoutbox) == [
        "[FIRING] prod: ops/a-leader lease expired",
        "[RESOLVED] prod: ops/b-leader lease expired (lasted 20 s)",
    ]
    b_incident = Incident.objects.get(key="lease_expired:prod/ops/b-leader")
    assert b_incident.open_notice == Notice.SKIPPED
    assert b_incident.resolve_notice == Notice.MAILED


def test_a_storm_of_500_expiring_node_leases_is_one_mail(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster("prod")
    leases = make_many_leases(cluster, 500)
    # They stop heart-beating over 20 s, as a rack losing power does node by node: half
    # are gone when the storm is first seen, the rest follow during the next evaluations.
    for index, lease in enumerate(leases):
        lease.expires_at = NOW + timedelta(milliseconds=index * 40 - 10_000)
    Lease.objects.bulk_update(leases, ["expires_at"])
    # bulk_update skips Lease.save: the expiry schedule is written as the ingest writes it.
    schedule_expiry(leases)
    for _ in range(12):
        evaluate(cluster)
        clock.advance(5)

    [message] = mailoutbox
    assert message.subject == "[FIRING] prod: 251 nodes stopped heart-beating"
    assert "node-0000, node-0001," in message.body
    assert "and 201 more" in message.body
    incident = Incident.objects.get()
    assert incident.title == "500 nodes stopped heart-beating"
    assert incident.details["items_total"] == 500


def test_a_flapping_lease_is_one_incident_and_one_mail(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    cluster = make_cluster("prod")
    lease = make_lease(cluster, "my-operator-leader", namespace="ops", holder="pod-0")
    for step in range(1, 40):
        clock.advance(30)
        to = f"pod-{step % 3}"
        LeaseTransition.objects.create(
            lease=lease, from_holder=lease.holder, to_holder=to, observed_at=timezone.now()
        )
        Lease.objects.filter(pk=lease.pk).update(
            holder=to, renew_time=timezone.now(), expires_at=timezone.now() + timedelta(seconds=15)
        )
        lease.holder = to
        evaluate(cluster)

    assert Incident.objects.filter(rule=Rule.LEASE_FLAPPING).count() == 1
    assert subjects(mailoutbox) == ["[FIRING] prod: ops/my-operator-leader lease is flapping"]


# --- Inhibition ------------------------------------------------------------------------------


def api_down_for(clock: Clock, kube: Any, nks: Any, seconds: int) -> None:
    for _ in range(seconds // 20 + 1):
        poll(nks, **API_DOWN)
        evaluate(kube)
        clock.advance(20)


def test_while_a_clusters_api_is_down_its_node_incident_is_not_mailed_separately(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    kube = make_cluster("prod")
    make_many_leases(kube, 3)  # they expire at NOW + 37 s
    nks = make_nks_cluster(make_account(), "prod")
    api_down_for(clock, kube, nks, 60)  # the API incident opens after its 60 s grace

    assert subjects(mailoutbox) == ["[FIRING] prod: NKS cluster unhealthy: API K8S_API_NOT_WORKING"]
    nodes = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED)
    assert nodes.state == IncidentState.FIRING
    assert nodes.hold == Hold.INHIBITED
    held = IncidentEvent.objects.get(incident=nodes, kind=IncidentEvent.Kind.HELD)
    assert "the cluster's API is down" in held.text

    # The API comes back but the nodes stay gone: now they are news of their own.
    clock.advance(10)
    poll(nks, **HEALTHY)
    evaluate(kube)
    assert subjects(mailoutbox)[1:] == [
        "[RESOLVED] prod: NKS cluster unhealthy: API K8S_API_NOT_WORKING (lasted 90 s)",
        "[FIRING] prod: 3 nodes stopped heart-beating",
    ]


def test_a_node_incident_that_ends_while_inhibited_is_never_mailed(
    clock: Clock, mailoutbox: list[mail.EmailMessage]
) -> None:
    kube = make_cluster("prod")
    nodes = make_many_leases(kube, 3)
    nks = make_nks_cluster(make_account(), "prod")
    api_down_for(clock, kube, nks, 60)
    Lease.objects.filter(pk__in=[lease.pk for lease in nodes]).update(
        expires_at=timezone.now() + timedelta(seconds=40)
    )
    poll(nks, **API_DOWN)
    evaluate(kube)

    node_incident = Incident.objects.get(rule=Rule.NODE_HEARTBEATS_EXPIRED)
    assert node_incident.state == IncidentState.RESOLVED
    assert node_incident.resolve_notice == Notice.SKIPPED
    assert len(mailoutbox) == 1


# --- Reminders, acknowledge, silence ---------------------------------------------------------


def test_reminders_are_a_digest_and_skip_acknowledged_incidents(
    clock: Clock, mailoutbox: list[mail.EmailMessage], django_user_model: Any
) -> None:
    erin = django_user_model.objects.create_user("erin")
    prod, staging = make_cluster("prod"), make_cluster("staging")
    make_lease(prod, "kube-scheduler", renewed_ago=30, duration=15)
    make_lease(staging, "kube-scheduler", renewed_ago=30, duration=15)
    make_lease(prod, "a-leader", namespace="ops", renewed_ago=30, duration=15)
    evaluate(prod, staging)
    assert len(mailoutbox) == 2  # one per cluster
    acknowledged = Incident.objects.get(key="lease_expired:staging/kube-system/kube-scheduler")
    assert incident_actions.acknowledge_incident(acknowledged.pk, erin)

    clock.advance(4 * 3600 - 1)
    evaluate(prod, staging)
    assert len(mailoutbox) == 2
    clock.advance(1)
    evaluate(prod, staging)

    reminder = mailoutbox[2]
    assert reminder.subject == (
        "[REMINDER] 2 incidents still open: prod: kube-system/kube-scheduler lease expired "
        "(+1 more)"
    )
    assert "staging" not in reminder.body
    assert "Still open and not acknowledged: 2 incidents" in reminder.body

    clock.advance(4 * 3600)
    evaluate(prod, staging)
    assert [m.subject.split("]")[0] for m in mailoutbox] == [
        "[FIRING",
        "[FIRING",
        "[REMINDER",
        "[REMINDER",
    ]


def test_a_silence_stops_all_mail_for_its_key_including_a_new_incident(
    clock: Clock, mailoutbox: list[mail.EmailMessage], django_user_model: Any
) -> None:
    erin = django_user_model.objects.create_user("erin")
    lease = expire_scheduler(clock)
    first = Incident.objects.get()
    incident_actions.silence_incident(first.pk, erin, timedelta(hours=1), "upgrading the masters")

    clock.advance(60)  # renewed: resolved, but silenced, so no mail
    Lease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() + timedelta(seconds=15))
    evaluate(lease.cluster)
    first.refresh_from_db()
    assert first.state == IncidentState.RESOLVED
    assert first.resolve_notice == Notice.SKIPPED

    clock.advance(60)  # expired again: a new incident, same key, still silenced
    evaluate(lease.cluster)
    second = Incident.objects.get(state=IncidentState.FIRING)
    assert second.hold == Hold.SILENCED
    clock.advance(1800)
    evaluate(lease.cluster)
    assert len(mailoutbox) == 1

    clock.advance(1800)  # the silence is over and the incident is still open
    evaluate(lease.cluster)
    assert len(mailoutbox) == 2
    assert mailoutbox[1].subject == "[FIRING] prod: kube-system/kube-scheduler lease expired"
    silenced = IncidentEvent.objects.get(incident=first, kind=IncidentEvent.Kind.SILENCED)
    assert silenced.user == erin
    assert silenced.text.endswith(": upgrading the masters")


def test_mail_planned_before_a_silence_is_cancelled_not_sent(
    clock: Clock, mailoutbox: list[mail.EmailMessage], django_user_model: Any
) -> None:
    incident = make_incident()
    [notification_id] = notifications.plan_notifications(timezone.now(), dispatch=False)
    incident_actions.silence_incident(
        incident.pk, django_user_model.objects.create_user("erin"), timedelta(hours=4)
    )

    assert delivery.deliver_notification(notification_id) == DeliveryState.CANCELLED
    assert mailoutbox == []


def test_ending_a_silence_early_lets_mail_through_again(
    clock: Clock, mailoutbox: list[mail.EmailMessage], django_user_model: Any
) -> None:
    erin = django_user_model.objects.create_user("erin")
    incident = make_incident()
    incident_actions.silence_incident(incident.pk, erin, timedelta(hours=4))
    notifications.plan_notifications(timezone.now(), dispatch=False)
    assert mailoutbox == []
    assert incident_actions.end_silence(incident.pk, erin)
    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()
    assert len(mailoutbox) == 1


# --- Recipients ------------------------------------------------------------------------------


def test_each_recipient_gets_one_mail_with_exactly_their_incidents(
    clock: Clock, mailoutbox: list[mail.EmailMessage], django_user_model: Any
) -> None:
    AlertRule.objects.filter(rule=Rule.LEASE_FLAPPING).update(
        recipients="platform-leads@example.org", mail_default_recipients=False
    )
    critical_only = django_user_model.objects.create_user("erin", email="erin@example.org")
    everything = django_user_model.objects.create_user("sam", email="sam@example.org")
    AlertSubscription.objects.create(
        user=critical_only, min_severity=Severity.CRITICAL, confirmed_email=critical_only.email
    )
    AlertSubscription.objects.create(
        user=everything, min_severity=Severity.WARNING, confirmed_email=everything.email
    )
    make_incident("lease_expired:prod/kube-system/kube-scheduler")
    make_incident(
        "lease_flapping:prod/ops/op-leader",
        title="ops/op-leader lease is flapping",
        rule=Rule.LEASE_FLAPPING,
        severity=Severity.WARNING,
    )

    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()

    received = {
        address: sorted(m.subject for m in mailoutbox if address in m.to)
        for address in [ONCALL, "erin@example.org", "sam@example.org", "platform-leads@example.org"]
    }
    both = "[FIRING] prod: kube-system/kube-scheduler lease expired (+1 more)"
    expired = "[FIRING] prod: kube-system/kube-scheduler lease expired"
    flapping = "[FIRING] prod: ops/op-leader lease is flapping"
    assert received == {
        ONCALL: [expired],
        "erin@example.org": [expired],
        "sam@example.org": [both],
        "platform-leads@example.org": [flapping],
    }


def test_without_any_recipient_nothing_is_queued_and_the_page_says_why(
    clock: Clock, mailoutbox: list[mail.EmailMessage], settings: Any
) -> None:
    settings.ALERT_EMAIL_TO = []
    incident = make_incident()
    notifications.plan_notifications(timezone.now(), dispatch=False)

    incident.refresh_from_db()
    assert incident.open_notice == Notice.SKIPPED
    assert not Notification.objects.exists()
    event = IncidentEvent.objects.get(incident=incident)
    assert event.text.startswith("no opened mail: no recipients")


# --- The beat path ---------------------------------------------------------------------------


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Tasks run where they are sent. Celery still takes a producer from its pool when it
    runs one eagerly; forget that producer pool afterwards, so a later test that points the
    app at a broker folder of its own (and closes the old pool) builds a new one."""
    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = saved
        app.amqp._producer_pool = None


def test_the_beat_task_queues_a_send_task_once_the_plan_is_committed(
    clock: Clock,
    mailoutbox: list[mail.EmailMessage],
    django_capture_on_commit_callbacks: Any,
    eager_tasks: None,
) -> None:
    from alerts.tasks import evaluate_alerts

    # Due (expiry plus one lease duration) 10 s before the data's as-of moment.
    make_lease(make_cluster("prod"), "kube-scheduler", renewed_ago=40, duration=15)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        evaluate_alerts.delay()

    assert len(callbacks) == 1
    assert subjects(mailoutbox) == ["[FIRING] prod: kube-system/kube-scheduler lease expired"]


def test_the_sweep_queues_every_due_notification(clock: Clock) -> None:
    make_incident()
    [due] = notifications.plan_notifications(timezone.now(), dispatch=False)
    Notification.objects.create(
        kind=NotificationKind.OPENED,
        subject="later",
        body_text="",
        body_html="",
        created_at=timezone.now(),
        next_attempt_at=timezone.now() + timedelta(minutes=1),
    )
    assert delivery.due_notification_ids() == [due]
