"""Which incidents reach each channel, and when: filters, grouping, holds, storms, reminders."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from alerts import delivery, incident_actions, notifications
from alerts.models import ChannelKind, DeliveryState, Incident, Notification, Rule, Severity
from fakes.chat_receiver import ChatReceiver
from leases.models import Lease
from tests.alerts.channel_receiver import (
    make_channel,
    receiver_fixture,  # noqa: F401 - the fixture
    second_receiver_fixture,  # noqa: F401 - the fixture
)
from tests.alerts.conftest import Clock, evaluate
from tests.alerts.factories import make_incident
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db


def texts(receiver: ChatReceiver) -> list[str]:
    return [post.json["text"] for post in receiver.received]


def test_a_500_lease_storm_over_many_clusters_is_one_message_per_channel(
    clock: Clock,
    receiver: ChatReceiver,
    second_receiver: ChatReceiver,
    mailoutbox: list[mail.EmailMessage],
) -> None:
    dooray = make_channel(receiver, ChannelKind.DOORAY)
    make_channel(second_receiver, ChannelKind.WEBHOOK)
    clusters = [make_cluster(f"edge-{number:02d}") for number in range(25)]
    for cluster in clusters:
        for index in range(20):
            make_lease(cluster, f"leader-{index:02d}", namespace="ops", renewed_ago=30)

    evaluate(*clusters)
    clock.advance(5)
    evaluate(*clusters)

    # 25 messages planned per channel (one per cluster, as the mail), posted as one each.
    assert Notification.objects.filter(channel=dooray).count() == 25
    assert len(mailoutbox) == 25
    [message] = receiver.received
    assert message.json["text"] == (
        "Alert summary: 25 messages folded into one\n500 incidents opened"
    )
    assert len(message.json["attachments"]) == 6  # the first five titles and the rest, linked
    assert message.json["attachments"][-1]["title"] == (
        "…and 495 more incidents: see the alerts page."
    )
    [posted] = second_receiver.received
    summary = posted.json
    assert (summary["kind"], summary["messages"], summary["incidents_total"]) == (
        "summary",
        25,
        500,
    )
    assert summary["counts"] == {"opened": 500, "resolved": 0, "reminder": 0}
    assert {entry["event"] for entry in summary["incidents"]} == {"opened"}

    rows = Notification.objects.filter(channel=dooray)
    first = rows.get(folded_into__isnull=True)
    assert first.state == DeliveryState.SENT
    assert first.payload == message.json
    assert set(rows.exclude(pk=first.pk).values_list("state", "folded_into")) == {
        (DeliveryState.SENT, first.pk)
    }


def test_the_channel_filter_picks_rules_severity_and_clusters(
    clock: Clock, receiver: ChatReceiver
) -> None:
    channel = make_channel(
        receiver,
        ChannelKind.DOORAY,
        rules=[Rule.LEASE_EXPIRED],
        min_severity=Severity.CRITICAL,
        clusters=["prod"],
    )
    wanted = make_incident("lease_expired:prod/ops/a", cluster="prod")
    make_incident("lease_expired:prod/ops/b", cluster="prod", severity=Severity.WARNING)
    make_incident("lease_expired:staging/ops/c", cluster="staging")
    make_incident("lease_flapping:prod/ops/d", cluster="prod", rule=Rule.LEASE_FLAPPING)

    notifications.plan_notifications(timezone.now(), dispatch=False)

    [row] = Notification.objects.filter(channel=channel)
    assert list(row.incidents.all()) == [wanted]


def test_grouping_waits_for_the_channels_own_window(clock: Clock, receiver: ChatReceiver) -> None:
    prod = make_cluster("prod")
    make_lease(prod, "a-leader", namespace="ops", renewed_ago=30, duration=15)
    make_lease(prod, "b-leader", namespace="ops", renewed_ago=25, duration=15)
    make_lease(prod, "c-leader", namespace="ops", renewed_ago=20, duration=15)
    evaluate(prod)  # a fires, and is mailed: no channel yet
    make_channel(receiver, ChannelKind.SLACK)

    clock.advance(5)
    evaluate(prod)  # the channel's first word: a and b at once, though the mail's window runs
    clock.advance(5)
    evaluate(prod)  # c waits for the channel's window
    clock.advance(24)
    evaluate(prod)
    assert texts(receiver) == ["2 new incidents: prod: ops/a-leader lease expired"]
    clock.advance(1)  # 30 s after the channel's first message
    evaluate(prod)

    assert texts(receiver) == [
        "2 new incidents: prod: ops/a-leader lease expired",
        "1 new incident: prod: ops/c-leader lease expired",
    ]


def test_a_silenced_incident_sends_nothing_to_a_channel_and_its_resolution_neither(
    clock: Clock, receiver: ChatReceiver, django_user_model: Any
) -> None:
    make_channel(receiver, ChannelKind.DOORAY)
    prod = make_cluster("prod")
    lease = make_lease(prod, "kube-scheduler", renewed_ago=30, duration=15)
    erin = django_user_model.objects.create_user("erin")
    evaluate(prod)
    assert len(receiver.received) == 1

    first = Incident.objects.get()
    incident_actions.silence_incident(first.pk, erin, timedelta(hours=1))
    clock.advance(60)  # renewed: resolved while silenced, so no resolved message
    Lease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() + timedelta(seconds=15))
    evaluate(prod)
    clock.advance(60)  # expired again: a new incident under the same silenced key
    evaluate(prod)
    clock.advance(600)
    evaluate(prod)

    assert len(receiver.received) == 1
    assert not Notification.objects.filter(kind="resolved", channel__isnull=False).exists()


def test_a_message_planned_before_a_silence_is_cancelled_not_posted(
    clock: Clock, receiver: ChatReceiver, django_user_model: Any
) -> None:
    channel = make_channel(receiver, ChannelKind.WEBHOOK)
    incident = make_incident()
    notifications.plan_notifications(timezone.now(), dispatch=False)
    incident_actions.silence_incident(
        incident.pk, django_user_model.objects.create_user("erin"), timedelta(hours=4)
    )

    row = Notification.objects.get(channel=channel)
    assert delivery.deliver_notification(row.pk) == DeliveryState.CANCELLED
    assert receiver.received == []


def test_a_resolution_is_posted_to_the_channel_that_announced_it(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.DOORAY)
    prod = make_cluster("prod")
    lease = make_lease(prod, "kube-scheduler", renewed_ago=30, duration=15)
    evaluate(prod)
    clock.advance(60)
    Lease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() + timedelta(seconds=15))
    evaluate(prod)

    assert texts(receiver) == ["1 new incident", "1 incident resolved"]
    assert receiver.received[1].json["attachments"][0]["color"] == "#1e8e3e"


def test_channel_reminders_are_a_digest_and_skip_acknowledged_incidents(
    clock: Clock, receiver: ChatReceiver, django_user_model: Any
) -> None:
    make_channel(receiver, ChannelKind.DOORAY)
    erin = django_user_model.objects.create_user("erin")
    prod, staging = make_cluster("prod"), make_cluster("staging")
    make_lease(prod, "kube-scheduler", renewed_ago=30, duration=15)
    make_lease(staging, "kube-scheduler", renewed_ago=30, duration=15)
    evaluate(prod, staging)
    acknowledged = Incident.objects.get(key="lease_expired:staging/kube-system/kube-scheduler")
    assert incident_actions.acknowledge_incident(acknowledged.pk, erin)
    assert len(receiver.received) == 1  # both clusters' first messages, folded into one

    clock.advance(4 * 3600)
    evaluate(prod, staging)

    reminder = receiver.received[-1].json
    assert reminder["text"] == "1 incident still open and not acknowledged"
    [attachment] = reminder["attachments"]
    assert attachment["title"] == "[critical] prod: kube-system/kube-scheduler lease expired"


def test_a_firing_and_a_resolved_alert_arrive_in_korean_in_a_dooray_channel(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.DOORAY, language="ko", time_zone="Asia/Seoul")
    prod = make_cluster("prod")
    lease = make_lease(prod, "kube-scheduler", holder="master-0<b>", renewed_ago=30, duration=15)
    evaluate(prod)
    clock.advance(60)
    Lease.objects.filter(pk=lease.pk).update(expires_at=timezone.now() + timedelta(seconds=15))
    evaluate(prod)

    firing, resolved = (post.json for post in receiver.received)
    assert (firing["botName"], firing["text"]) == ("Lease 대시보드", "새 인시던트 1건")
    assert resolved["text"] == "인시던트 1건 해결됨"
    [opened] = firing["attachments"]
    [closed] = resolved["attachments"]
    for attachment in (opened, closed):
        assert attachment["title"].startswith("[심각] prod: ")
        assert "kube-system/kube-scheduler" in attachment["title"]
        assert "lease expired" not in attachment["title"]
    assert "부터 발생 중입니다" in opened["text"]
    # The holder as written: Dooray! renders markdown, so its `<` and `>` carry a backslash.
    assert "master-0\\<b\\>" in opened["text"]
    assert "2026-11-29 17:01:00 KST에 해결되었습니다" in closed["text"]
