"""Fixtures for channel tests: a real HTTP receiver (fakes.chat_receiver) and channels on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from alerts.models import AlertChannel, ChannelKind
from fakes.chat_receiver import ChatReceiver

# The secret part of a webhook URL, as Slack's and Dooray!'s URLs carry a token in the path.
HOOK_TOKEN = "T0KEN-s3cr3t-9f8e7d"
SIGNING_SECRET = "whsec-test-6b1d2c"


@pytest.fixture(name="receiver")
def receiver_fixture() -> Iterator[ChatReceiver]:
    """A chat/webhook endpoint on 127.0.0.1, on a free port, over real HTTP."""
    receiver = ChatReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture(name="second_receiver")
def second_receiver_fixture() -> Iterator[ChatReceiver]:
    receiver = ChatReceiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


def hook_path(kind: str) -> str:
    return f"/services/{kind}/{HOOK_TOKEN}"


def make_channel(
    receiver: ChatReceiver, kind: str = ChannelKind.DOORAY, **fields: Any
) -> AlertChannel:
    values: dict[str, Any] = {
        "name": f"{kind}-oncall",
        "kind": kind,
        "url": receiver.url(hook_path(kind)),
        "signing_secret": SIGNING_SECRET if kind == ChannelKind.WEBHOOK else "",
    }
    values.update(fields)
    return AlertChannel.objects.create(**values)


@pytest.fixture(name="channels_only")
def channels_only_fixture(settings: Any) -> Any:
    """No ALERT_EMAIL_TO: the outbox holds only channel messages (sweep counts are theirs)."""
    settings.ALERT_EMAIL_TO = []
    return settings
