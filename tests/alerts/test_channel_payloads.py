"""Each channel format as it arrives over real HTTP: Dooray!, Slack, and the signed webhook."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

import pytest
from django.utils import timezone

from alerts import delivery, notifications
from alerts.models import ChannelKind, Notification
from fakes.chat_receiver import ChatReceiver
from tests.alerts.channel_receiver import (
    SIGNING_SECRET,
    channels_only_fixture,  # noqa: F401 - the fixture
    hook_path,
    make_channel,
    receiver_fixture,  # noqa: F401 - the fixture
)
from tests.alerts.conftest import Clock
from tests.alerts.factories import make_incident

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("channels_only")]

HOSTILE = "evil<!channel> & <https://phish.example|click> *bold*"


def plan_and_send() -> None:
    notifications.plan_notifications(timezone.now(), dispatch=False)
    delivery.send_due_notifications()


def hostile_incident() -> Any:
    return make_incident(
        f"lease_expired:prod/ops/{HOSTILE}",
        title=f"ops/{HOSTILE} lease expired",
        details={"facts": [{"label": "Holder", "text": "master-0\u202eevil"}]},
    )


def test_dooray_message_has_bot_name_text_and_one_attachment_per_incident(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.DOORAY)
    incident = make_incident()

    plan_and_send()

    [post] = receiver.received
    assert post.path == hook_path("dooray")
    assert post.headers["Content-Type"] == "application/json; charset=utf-8"
    body = post.json
    assert set(body) == {"botName", "text", "attachments"}
    assert body["botName"] == "Lease dashboard"
    assert body["text"] == "1 new incident"
    [attachment] = body["attachments"]
    assert attachment["title"] == "[critical] prod: kube-system/kube-scheduler lease expired"
    assert attachment["titleLink"] == f"https://dash.example.org/alerts/{incident.pk}/"
    assert attachment["color"] == "#d93025"
    assert "Holder: master-0" in attachment["text"]
    assert "Since 2026-" in attachment["text"]


def test_dooray_shows_cluster_data_as_written_with_control_characters_visible(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.DOORAY)
    hostile_incident()

    plan_and_send()

    [attachment] = receiver.received[0].json["attachments"]
    # Markdown's characters carry a backslash, so Dooray! shows them as written.
    escaped = r"evil\<!channel\> & \<https://phish.example|click\> \*bold\*"
    assert attachment["title"] == f"[critical] prod: ops/{escaped} lease expired"
    assert "Holder: master-0\\\\u202eevil" in attachment["text"]


MARKDOWN_LINKS = ("[click](https://evil.example)", "<https://evil|x>")


@pytest.mark.parametrize("kind", [ChannelKind.DOORAY, ChannelKind.SLACK])
def test_a_lease_named_like_a_markdown_link_is_never_a_link_in_chat(
    clock: Clock, receiver: ChatReceiver, kind: str
) -> None:
    make_channel(receiver, kind)
    for name in MARKDOWN_LINKS:
        make_incident(
            f"lease_expired:prod/ops/{name}",
            title=f"ops/{name} lease expired",
            details={"facts": [{"label": "Holder", "text": name}]},
        )

    plan_and_send()

    body = receiver.received[0].json
    if kind == ChannelKind.DOORAY:
        texts = [part for item in body["attachments"] for part in (item["title"], item["text"])]
        # Every markdown character from the data carries a backslash: shown, never a link.
        for text in texts:
            assert not re.search(r"(?<!\\)\[click|(?<!\\)\]\(|(?<!\\)<https", text)
        assert r"ops/\[click\](https://evil.example) lease expired" in texts[0] + texts[2]
        assert r"Holder: \<https://evil|x\>" in texts[1] + texts[3]
    else:
        # Slack links only by <url|text>: every < and > of the data is an entity. Markdown's
        # [text](url) is not Slack syntax and shows as written, its URL visible.
        posted = json.dumps(body)
        assert "<https://evil" not in posted
        assert "&lt;https://evil|x&gt;" in posted


def test_slack_message_has_text_and_blocks_with_data_escaped_for_mrkdwn(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.SLACK)
    incident = hostile_incident()

    plan_and_send()

    body = receiver.received[0].json
    assert set(body) == {"text", "blocks"}
    escaped = "evil&lt;!channel&gt; &amp; &lt;https://phish.example|click&gt; *bold*"
    assert body["text"] == f"1 new incident: prod: ops/{escaped} lease expired"
    header, section, footer = body["blocks"]
    assert header == {"type": "header", "text": {"type": "plain_text", "text": "1 new incident"}}
    text = section["text"]["text"]
    assert section["text"]["type"] == "mrkdwn"
    assert text.startswith(
        f"*<https://dash.example.org/alerts/{incident.pk}/|[critical] prod: ops/{escaped} "
        "lease expired>*"
    )
    assert "<!channel>" not in json.dumps(body)
    assert "Holder: master-0\\u202eevil" in text
    assert footer["elements"][0]["text"] == (
        "<https://dash.example.org/alerts/|Open the alerts page>"
    )


def test_webhook_payload_is_versioned_and_signed_over_timestamp_and_body(
    clock: Clock, receiver: ChatReceiver
) -> None:
    channel = make_channel(receiver, ChannelKind.WEBHOOK)
    incident = hostile_incident()

    plan_and_send()

    [post] = receiver.received
    timestamp = post.headers["X-Dashboard-Timestamp"]
    assert timestamp == str(int(timezone.now().timestamp()))
    # Verified as a receiver would, from the raw body, with nothing of ours.
    expected = hmac.new(
        SIGNING_SECRET.encode(), timestamp.encode() + b"." + post.body, hashlib.sha256
    ).hexdigest()
    assert hmac.compare_digest(post.headers["X-Dashboard-Signature"], f"sha256={expected}")
    # A tampered body or a replayed one under another timestamp does not verify.
    forged = hmac.new(SIGNING_SECRET.encode(), b"1." + post.body, hashlib.sha256).hexdigest()
    assert post.headers["X-Dashboard-Signature"] != f"sha256={forged}"
    # Cluster data never reaches a header.
    assert not any(HOSTILE in value for value in post.headers.values())

    body = post.json
    notification = Notification.objects.get(channel=channel)
    assert body["id"] == notification.pk
    assert body["version"] == 1
    assert body["kind"] == "opened"
    assert body["generated_at"] == "2026-11-29T08:00:00Z"
    assert body["language"] == "en"
    assert body["alerts_url"] == "https://dash.example.org/alerts/"
    assert body["incidents_total"] == 1
    [entry] = body["incidents"]
    assert entry == {
        "id": incident.pk,
        "key": f"lease_expired:prod/ops/{HOSTILE}",
        "rule": "lease_expired",
        "severity": "critical",
        "state": "firing",
        "title": f"ops/{HOSTILE} lease expired",
        "display_title": f"prod: ops/{HOSTILE} lease expired",
        "cluster": "prod",
        "since": "2026-11-29T08:00:00Z",
        "opened": "2026-11-29T08:00:00Z",
        "resolved": None,
        "acknowledged": False,
        "url": f"https://dash.example.org/alerts/{incident.pk}/",
        "link": "",
        "facts": [{"label": "Holder", "text": "master-0\u202eevil"}],
    }


def test_a_korean_channel_gets_its_messages_in_korean_with_names_as_written(
    clock: Clock, receiver: ChatReceiver
) -> None:
    make_channel(receiver, ChannelKind.DOORAY, language="ko", time_zone="Asia/Seoul")
    make_incident()

    plan_and_send()

    body = receiver.received[0].json
    assert body["botName"] == "Lease 대시보드"
    assert body["text"] == "새 인시던트 1건"
    [attachment] = body["attachments"]
    assert attachment["title"] == "[심각] prod: kube-system/kube-scheduler lease expired"
    # The channel's zone: 08:00 UTC is 17:00 in Seoul.
    assert "2026-11-29 17:00:00 KST" in attachment["text"]
    notification = Notification.objects.get()
    assert (notification.language, notification.time_zone) == ("ko", "Asia/Seoul")
