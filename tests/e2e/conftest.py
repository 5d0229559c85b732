"""Fixtures for the browser tests: the fake Kubernetes API a live watcher reads, and the demo
NKS account the pages show."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from fakes.kube import FakeApiServer
from fakes.nks import FakeNks
from nks.accounts import forget_clients
from nks.poller import poll_account
from nks.services import register_nks_account
from tests.leases.test_watcher import TOKEN


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A fake Kubernetes API server that accepts the clusters `register` makes."""
    server = FakeApiServer(token=TOKEN, bookmark_interval=0.5).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def demo_nks(settings: Any) -> Iterator[FakeNks]:
    """The demo fake NKS, registered as account `demo` and polled once."""
    settings.NKS_HTTP_TIMEOUT = 5
    settings.NKS_HTTP_BACKOFF = 0.05
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"e2e-{uuid.uuid4().hex}"},
    }
    forget_clients()
    with FakeNks(scenario="demo") as fake:
        account, _ = register_nks_account("demo", api_url=fake.url, **fake.credentials())
        assert poll_account(account.pk).ok
        yield fake
    forget_clients()
