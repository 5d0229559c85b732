"""Fixtures for the NKS client tests: a fake NKS over real HTTP on a free port.

Backoff and timeouts are tiny so retries cost milliseconds, not seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nks.client import NksClient, Timeouts
from nks.fake_api import FakeNks

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
