"""Fixtures for the browser tests that need a live watcher: the fake Kubernetes API it reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.kube import FakeApiServer
from tests.leases.test_watcher import TOKEN


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    """A fake Kubernetes API server that accepts the clusters `register` makes."""
    server = FakeApiServer(token=TOKEN, bookmark_interval=0.5).start()
    try:
        yield server
    finally:
        server.stop()
