"""The "Watch this cluster" button sends the watchers only to the cluster NKS reports.

The fake NKS (over real HTTP) hands out a kubeconfig whose server is loopback, the cloud's
metadata address, a private address, plain http, or a host other than the cluster's API
address: each is refused by the button with the rule it breaks, and nothing is registered.
A name that resolves to loopback is refused when the watcher connects, before any request.
Until the watcher has listed once, an NKS-sourced source's errors never carry the server's
words nor tell refused from answered. The demo's allowance (settings) still works.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group
from django.test import Client

from fakes.kube import FakeApiServer, kubeconfig_document
from fakes.nks import FakeNks
from leases import kube
from leases.egress_status import untrusted_failure_text
from leases.models import KubeCluster, ResourceWatchState
from leases.services import register_kube_cluster
from nks.models import NksCluster
from nks.poller import poll_account
from tests.leases.test_watcher import RunningWatcher, eventually
from tests.nks.conftest import fake_nks, nks_account, nks_settings, polled

__all__ = ["fake_nks", "nks_account", "nks_settings", "polled"]

CLUSTER = "prod-api"
BANNER = "banner-of-the-service-that-answered"


def kubeconfig_for(server: str) -> str:
    document = kubeconfig_document(server, token="nks-token", context_name="default")
    return yaml.safe_dump(document)


def nks_reports(fake_nks: FakeNks, account: Any, *, api_address: str, server: str) -> None:
    """NKS reports `api_address` for the cluster and hands out a kubeconfig for `server`."""
    cluster = fake_nks.state.find_cluster(CLUSTER)
    cluster.detail_overrides["api_address"] = api_address
    cluster.kubeconfig = kubeconfig_for(server)
    assert poll_account(account.pk).ok
    assert NksCluster.objects.get(name=CLUSTER).api_address == api_address


def press_watch(client: Client, django_user_model: Any) -> str:
    operator = django_user_model.objects.create_user("olivia")
    operator.groups.add(Group.objects.get(name="operators"))
    client.force_login(operator)
    url = f"/clusters/{NksCluster.objects.get(name=CLUSTER).uuid}/watch-leases/"
    return client.post(url, follow=True).content.decode().replace("&#x27;", "'")


@pytest.fixture
def allow_demo(settings: Any) -> Any:
    """What `make run` sets for the demo: its fake API server is plain http on loopback."""
    settings.NKS_KUBECONFIG_ALLOW_PRIVATE = ["127.0.0.0/8"]
    settings.NKS_KUBECONFIG_ALLOW_HTTP = True
    return settings


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer(bookmark_interval=0.5).start()
    try:
        yield server
    finally:
        server.stop()


# --- The button refuses, naming the rule ----------------------------------------------------

FAKE_HOST = "https://c0ffee00-kr1-k8s.fake-nks.invalid:6443"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("api_address", "server", "rule"),
    [
        ("https://127.0.0.1:6443", "https://127.0.0.1:6443", "leads to a loopback address"),
        ("https://169.254.169.254", "https://169.254.169.254", "leads to a link-local address"),
        ("https://10.1.2.3:6443", "https://10.1.2.3:6443", "leads to a private address"),
        ("https://[::1]:6443", "https://[::1]:6443", "leads to a loopback address"),
        ("https://0.0.0.0:6443", "https://0.0.0.0:6443", "leads to an unspecified address"),
        (FAKE_HOST, FAKE_HOST.replace("https", "http"), "is plain http"),
        (
            FAKE_HOST,
            "https://metadata.fake-nks.invalid:6443",
            "is not the cluster's API address that NKS reports",
        ),
        (FAKE_HOST, FAKE_HOST.replace("6443", "10250"), "is not the cluster's API address"),
        # A name is resolved too: here, at once (it resolves); later, at every connection.
        ("https://localhost:6443", "https://localhost:6443", "leads to a loopback address"),
    ],
)
def test_the_button_refuses_a_kubeconfig_that_leads_elsewhere(
    polled: Any,
    fake_nks: FakeNks,
    client: Client,
    django_user_model: Any,
    api_address: str,
    server: str,
    rule: str,
) -> None:
    nks_reports(fake_nks, polled, api_address=api_address, server=server)
    text = press_watch(client, django_user_model)
    assert "The kubeconfig from NKS cannot be used:" in text
    assert f"clusters[default].cluster.server {rule}" in text, text
    assert not KubeCluster.objects.exists()
    assert NksCluster.objects.get(name=CLUSTER).kube_cluster is None


@pytest.mark.django_db
def test_private_addresses_pass_only_with_the_operators_allowance(
    polled: Any, fake_nks: FakeNks, client: Client, django_user_model: Any, settings: Any
) -> None:
    settings.NKS_KUBECONFIG_ALLOW_PRIVATE = ["10.0.0.0/8"]
    nks_reports(
        fake_nks, polled, api_address="https://10.1.2.3:6443", server="https://10.1.2.3:6443"
    )
    assert "is now watched" in press_watch(client, django_user_model)
    assert KubeCluster.objects.get().nks_api_address == "https://10.1.2.3:6443"


@pytest.mark.django_db
def test_the_cluster_nks_reports_is_accepted_and_marked_as_nks(
    polled: Any, fake_nks: FakeNks, client: Client, django_user_model: Any
) -> None:
    # The fake's own answer: the kubeconfig names the API address NKS reports, over https.
    text = press_watch(client, django_user_model)
    assert "prod-api is now watched for Leases and Nodes" in text
    cluster = NksCluster.objects.get(name=CLUSTER)
    assert cluster.kube_cluster.nks_api_address == cluster.api_address
    assert cluster.api_address.startswith("https://")


@pytest.mark.django_db
def test_the_button_refuses_a_kubeconfig_nested_thousands_deep(
    polled: Any, fake_nks: FakeNks, client: Client, django_user_model: Any
) -> None:
    fake_nks.state.find_cluster(CLUSTER).kubeconfig = "a: " + "[" * 20_000 + "]" * 20_000
    text = press_watch(client, django_user_model)
    assert "nests lists and maps more than 32 levels deep" in text
    assert not KubeCluster.objects.exists()


# --- At the connection ----------------------------------------------------------------------


def nks_sourced(server: str, api_address: str | None = None) -> KubeCluster:
    """A Lease source as the button stores it (registered, then marked as NKS's)."""
    cluster, _ = register_kube_cluster("prod-api", kubeconfig=kubeconfig_for(server))
    KubeCluster.objects.filter(pk=cluster.pk).update(nks_api_address=api_address or server)
    return KubeCluster.objects.get(pk=cluster.pk)


@pytest.mark.django_db(transaction=True)
def test_a_name_that_resolves_to_loopback_is_refused_when_the_watcher_connects(
    apiserver: FakeApiServer, settings: Any
) -> None:
    # Checked once when stored; then DNS answers 127.0.0.1 (here: localhost always does).
    settings.NKS_KUBECONFIG_ALLOW_HTTP = True
    server = apiserver.url.replace("127.0.0.1", "localhost")
    cluster = nks_sourced(server)
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).last_error)
        time.sleep(0.3)  # time enough for a request, had one been made
    row = KubeCluster.objects.get(pk=cluster.pk)
    assert "cluster.server leads to a loopback address" in row.last_error, row.last_error
    assert apiserver.requests == [], "a request reached the loopback server"
    assert not row.connected


@pytest.mark.django_db
def test_connect_pins_the_checked_address_and_keeps_the_name_for_tls(settings: Any) -> None:
    settings.NKS_KUBECONFIG_ALLOW_PRIVATE = ["127.0.0.0/8"]
    api = kube.connect(
        kube.ClusterConfig(
            kubeconfig=kubeconfig_for("https://localhost:6443/prefix"),
            nks_api_address="https://localhost:6443",
        )
    )
    # The connection goes to the address checked now, whatever DNS answers later.
    assert api.configuration.host == "https://127.0.0.1:6443/prefix"
    assert api.configuration.tls_server_name == "localhost"


@pytest.mark.django_db
def test_an_operators_kubeconfig_may_name_any_host() -> None:
    api = kube.connect(kube.ClusterConfig(kubeconfig=kubeconfig_for("http://127.0.0.1:9")))
    assert api.configuration.host == "http://127.0.0.1:9"


def test_connect_refuses_an_nks_kubeconfig_for_another_host() -> None:
    with pytest.raises(kube.KubeError) as error:
        kube.connect(
            kube.ClusterConfig(
                kubeconfig=kubeconfig_for("https://169.254.169.254"),
                nks_api_address=FAKE_HOST,
            )
        )
    assert error.value.kind == "config"
    assert "is not the cluster's API address that NKS reports" in error.value.message
    assert "link-local" in error.value.message


# --- What the watchers page shows before the server is trusted ------------------------------


class _Answering(BaseHTTPRequestHandler):
    """A service that is not an API server: it answers every request with its own words."""

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Status", "code": 403, "message": BANNER}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def errors_seen(cluster: KubeCluster) -> tuple[str, str, str, str]:
    with RunningWatcher(cluster):
        eventually(
            lambda: (
                (row := KubeCluster.objects.get(pk=cluster.pk)).last_error and row.nodes_last_error
            )
        )
        time.sleep(0.6)  # a LeaseCandidates refresh (every 0.5 s here), had there been one
        row = KubeCluster.objects.get(pk=cluster.pk)
    return row.last_error, row.nodes_last_error, row.nodes_watch, row.candidates_problem


@pytest.mark.django_db(transaction=True)
def test_an_untrusted_servers_answer_and_a_closed_port_read_the_same(
    allow_demo: Any, answering: str
) -> None:
    answered = errors_seen(nks_sourced(answering))
    KubeCluster.objects.all().delete()
    refused = errors_seen(nks_sourced(closed_port_url()))
    assert answered == refused, "refused and answered must not be told apart"
    lease_error, node_error, node_state, candidates_problem = answered
    assert lease_error == node_error == untrusted_failure_text()
    assert BANNER not in lease_error and "403" not in lease_error
    assert node_state == ResourceWatchState.RECONNECTING and candidates_problem == ""


@pytest.mark.django_db(transaction=True)
def test_an_operators_source_and_a_trusted_one_show_the_servers_words(
    allow_demo: Any, answering: str
) -> None:
    cluster, _ = register_kube_cluster("lab", kubeconfig=kubeconfig_for(answering))
    lease_error, *_ = errors_seen(cluster)
    assert BANNER in lease_error, lease_error
    KubeCluster.objects.all().delete()
    cluster = nks_sourced(answering)
    # Once a list has completed on it, its server's words help the engineer again.
    KubeCluster.objects.filter(pk=cluster.pk).update(last_list_at="2024-01-01T00:00:00Z")
    lease_error, *_ = errors_seen(cluster)
    assert BANNER in lease_error, lease_error


# --- The demo -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_demos_allowance_lets_the_button_watch_the_fake_api_server(
    allow_demo: Any,
    apiserver: FakeApiServer,
    nks_settings: Any,
    client: Client,
    django_user_model: Any,
) -> None:
    from nks.services import register_nks_account

    with FakeNks(scenario="demo", kube_server_url=apiserver.url) as demo_nks:
        account, _ = register_nks_account("demo", api_url=demo_nks.url, **demo_nks.credentials())
        assert poll_account(account.pk).ok
        assert "is now watched" in press_watch(client, django_user_model)
    cluster = KubeCluster.objects.get()
    assert cluster.nks_api_address == apiserver.url
    with RunningWatcher(cluster):
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).last_list_at)
    assert KubeCluster.objects.get(pk=cluster.pk).last_error == ""
