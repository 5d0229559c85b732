"""Fixtures for talking to the fake kube-apiserver over real HTTP on a free port.

Watches bookmark every 0.2 s here so bookmark behaviour is testable in well under a second.
Clients come from a written kubeconfig through `kubernetes.config.load_kube_config`, the
same path the dashboard uses, but into their own Configuration (never the global default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from fakes.kube import FakeApiServer

TEST_BOOKMARK_INTERVAL = 0.2


@pytest.fixture
def make_fake_apiserver() -> Iterator[Callable[..., FakeApiServer]]:
    """Start fake API servers with custom options; all are stopped after the test."""
    servers: list[FakeApiServer] = []

    def make(**options: Any) -> FakeApiServer:
        options.setdefault("bookmark_interval", TEST_BOOKMARK_INTERVAL)
        server = FakeApiServer(**options).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def apiserver(
    request: pytest.FixtureRequest, make_fake_apiserver: Callable[..., FakeApiServer]
) -> FakeApiServer:
    """The watcher tests' fake API server: it asks for test_watcher's bearer token, and
    bookmarks every APISERVER_BOOKMARK_INTERVAL seconds of the test module (0.5 s unless the
    module sets it; bookmark tests want them sooner)."""
    from tests.leases.test_watcher import TOKEN  # a test module: imported when used, not at load

    interval = getattr(request.module, "APISERVER_BOOKMARK_INTERVAL", 0.5)
    return make_fake_apiserver(token=TOKEN, bookmark_interval=interval)


@pytest.fixture
def fake_apiserver(make_fake_apiserver: Callable[..., FakeApiServer]) -> FakeApiServer:
    """An empty fake API server serving Leases (v1) and LeaseCandidates (v1beta1)."""
    return make_fake_apiserver()


@pytest.fixture
def make_api_client(tmp_path: Path) -> Iterator[Callable[[FakeApiServer], client.ApiClient]]:
    """ApiClients configured from a kubeconfig the server wrote (token included)."""
    api_clients: list[client.ApiClient] = []

    def make(server: FakeApiServer) -> client.ApiClient:
        kubeconfig = server.write_kubeconfig(tmp_path / f"kubeconfig-{server.port}")
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        api_client = client.ApiClient(configuration)
        api_clients.append(api_client)
        return api_client

    yield make
    for api_client in api_clients:
        api_client.close()


@pytest.fixture
def coordination_api(
    fake_apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], client.ApiClient]
) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(make_api_client(fake_apiserver))


@pytest.fixture
def candidates_api(
    fake_apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], client.ApiClient]
) -> client.CoordinationV1beta1Api:
    return client.CoordinationV1beta1Api(make_api_client(fake_apiserver))


# --- Nodes: the official client's core API against the fake (fakes.kube.add_node,
# remove_node and the store's set_node_ready / cordon_node change the cluster's Nodes) ---


@pytest.fixture
def core_api(
    fake_apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], client.ApiClient]
) -> client.CoreV1Api:
    return client.CoreV1Api(make_api_client(fake_apiserver))
