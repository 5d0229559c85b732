"""Fixtures for the NKS client tests: a fake NKS over real HTTP on a free port.

Backoff and timeouts are tiny so retries cost milliseconds, not seconds.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from fakes.nks import FakeNks
from nks.client import NksClient, Timeouts

FAST_TIMEOUTS = Timeouts(connect=2.0, read=2.0, write=2.0, pool=2.0)


@pytest.fixture
def fake_nks() -> Iterator[FakeNks]:
    with FakeNks(scenario="demo", resize_delay=0.2) as fake:
        yield fake


@pytest.fixture
def make_client(fake_nks: FakeNks) -> Iterator[Callable[..., NksClient]]:
    """Build clients for ``fake_nks``; keyword arguments override the fast test defaults."""
    clients: list[NksClient] = []

    def make(**overrides: Any) -> NksClient:
        options: dict[str, Any] = {
            **fake_nks.credentials(),
            "timeout": FAST_TIMEOUTS,
            "retries": 3,
            "backoff": 0.01,
            "max_backoff": 0.05,
        }
        options.update(overrides)
        api_url = options.pop("api_url", fake_nks.url)
        client = NksClient(api_url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def nks_client(make_client: Callable[..., NksClient]) -> NksClient:
    return make_client()


# --- The dashboard side: accounts, polls and resizes over real HTTP -----------------------------


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    """olivia, who may resize. Without a password, unlike the top conftest's operator: hashing
    one costs time, and force_login needs none."""
    user = django_user_model.objects.create_user("olivia")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def operator_client(client: Client, operator: Any) -> Client:
    client.force_login(operator)
    return client


@pytest.fixture
def nks_settings(settings: Any) -> Iterator[Any]:
    """Fast HTTP settings for the poller and resize tasks; forgets cached clients afterwards."""
    from nks.accounts import forget_clients

    # Locks of parallel test runs must not meet in a shared Redis.
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"test-nks-{uuid.uuid4().hex}"},
    }
    settings.NKS_HTTP_TIMEOUT = 2
    settings.NKS_HTTP_RETRIES = 2
    settings.NKS_HTTP_BACKOFF = 0.01
    settings.NKS_POLL_WORKERS = 8
    settings.NKS_RESIZE_FOLLOW_SECONDS = 1
    forget_clients()
    yield settings
    forget_clients()


@pytest.fixture
def nks_account(fake_nks: FakeNks, nks_settings: Any, db: None) -> Any:
    """The fake's demo account, registered with identity credentials (not polled yet)."""
    from nks.services import register_nks_account

    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    return account


@pytest.fixture
def polled(nks_account: Any) -> Any:
    """The demo account, polled once."""
    from nks.poller import poll_account

    result = poll_account(nks_account.pk)
    assert result.ok, result.error
    nks_account.refresh_from_db()
    return nks_account
