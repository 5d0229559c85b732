"""Fault campaign fixtures: a fake API server that answers as slowly (bookmarks once a
minute) as a real kube-apiserver, and alert mail with a recipient, so a false alarm would
be a notification row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from dashboard.models import ApiToken
from fakes.kube import FakeApiServer
from tests.faults.harness import TOKEN


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    # A real kube-apiserver sends bookmarks about once a minute: nothing here may rely on
    # faster ones.
    server = FakeApiServer(token=TOKEN, bookmark_interval=60.0).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def alert_mail(settings: Any) -> None:
    settings.ALERT_EMAIL_TO = ["oncall@example.com"]


@pytest.fixture
def api(client: Client, django_user_model: Any) -> Client:
    """A script's client: a bearer token, no session."""
    user = django_user_model.objects.create_user("script")
    _, token = ApiToken.issue(user, name="faults")
    client.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client
