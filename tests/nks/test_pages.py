"""NKS pages: the clusters table, a cluster, a nodegroup, the overview region and admin."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from fakes.nks import FakeNks
from leases.models import KubeCluster
from nks.models import NksAccount, NksCluster, stale_after
from nks.poller import poll_account
from nks.services import register_nks_account
from tests.leases.factories import make_cluster, make_lease
from tests.nks.nodes import heartbeat, nodes_like_the_fake

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def viewer(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    return client


def text_of(client: Client, url: str, status: int = 200, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def cluster_rows(text: str) -> list[tuple[str, str]]:
    """(cluster, health) of each row of the clusters table, in order."""
    return re.findall(r'<tr class="[^"]*" data-cluster="([^"]+)" data-health="([^"]+)">', text)


def node_lease(kube: KubeCluster, node: str, *, renewed_ago: float) -> Any:
    """A kubelet heartbeat Lease renewed `renewed_ago` seconds before the real clock's now."""
    renewed = timezone.now() - timedelta(seconds=renewed_ago)
    return make_lease(
        kube,
        node,
        namespace="kube-node-lease",
        holder=node,
        renew_time=renewed,
        expires_at=renewed + timedelta(seconds=40),
    )


def cluster_url(name: str) -> str:
    return f"/clusters/{NksCluster.objects.get(name=name).uuid}/"


# --- The clusters page -----------------------------------------------------------------------


def test_without_accounts_the_page_says_how_to_add_one(admin_client: Client) -> None:
    text = text_of(admin_client, "/clusters/")
    assert "No NKS account is configured yet" in text
    assert "python manage.py add_nks_account NAME --api-url URL --identity-url URL" in text
    assert "NKS_PASSWORD_FILE" in text and "NKS_TOKEN" in text
    assert 'href="/admin/nks/nksaccount/add/"' in text


def test_an_account_never_polled_is_announced(nks_account: NksAccount, viewer: Client) -> None:
    text = text_of(viewer, "/clusters/")
    assert "Account demo has not been polled yet." in text
    assert "No cluster seen yet" in text


def test_clusters_are_listed_worst_first_and_healthy_only_when_fresh(
    polled: NksAccount, viewer: Client
) -> None:
    text = text_of(viewer, "/clusters/")
    assert cluster_rows(text) == [
        ("staging-web", "degraded"),
        ("legacy-batch", "unknown"),
        ("prod-api", "healthy"),
    ]
    legacy = text.split('data-cluster="legacy-batch"', 1)[1].split("</tr>", 1)[0]
    assert ">HEALTHY</span>" in legacy, "the raw value is shown as sent"
    assert "NKS health data is HEALTHY, so it cannot be trusted" in legacy
    staging = text.split('data-cluster="staging-web"', 1)[1].split("</tr>", 1)[0]
    assert "NOT_READY_NODE_EXIST" in staging and ">3/4</td>" in staging
    assert "v1.29.3" in staging and 'data-age-from="' in staging


def test_old_data_is_never_shown_as_current(
    polled: NksAccount, viewer: Client, fake_nks: FakeNks
) -> None:
    fake_nks.fail_next(r"/v1/clusters", 503, times=10)
    poll_account(polled.pk)
    text = text_of(viewer, "/clusters/")
    assert "Polling account demo failed 1 time in a row" in text
    assert "503 Service Unavailable" in text
    with time_machine.travel(timezone.now() + stale_after() + timedelta(seconds=5)):
        text = text_of(viewer, "/clusters/")
    assert {health for _, health in cluster_rows(text)} == {"unknown"}
    assert "the dashboard&#x27;s data is" in text


def test_an_htmx_refresh_renders_only_the_table(polled: NksAccount, viewer: Client) -> None:
    text = text_of(viewer, "/clusters/", HTTP_HX_TARGET="nks-clusters", **HTMX)
    assert text.lstrip().startswith('<section id="nks-clusters"')
    assert "<html" not in text


# --- A cluster -------------------------------------------------------------------------------


def test_the_cluster_page_shows_when_things_went_bad_and_for_how_long(
    nks_account: NksAccount, viewer: Client, fake_nks: FakeNks, settings: Any
) -> None:
    settings.NKS_POLL_SECONDS = 600  # one sample per 10-minute step of the strip
    start = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
    prod = fake_nks.state.find_cluster("prod-api")
    for minutes, api_working in [(0, True), (10, True), (20, True), (30, False), (40, False),
                                 (50, False), (60, True)]:  # fmt: skip
        with fake_nks.state.lock:
            prod.api_working = api_working
        with time_machine.travel(start + timedelta(minutes=minutes), tick=False):
            assert poll_account(nks_account.pk).ok
    with time_machine.travel(start + timedelta(minutes=70), tick=False):
        text = text_of(viewer, cluster_url("prod-api"))
    strip = text.split("<svg", 1)[1].split("</svg>", 1)[0]
    assert re.findall(
        r'<rect x="(\d+)" y="0" width="(\d+)" height="1" class="([\w-]+)">', strip
    ) == [
        ("0", "137", "h-none"),
        ("137", "3", "h-healthy"),
        ("140", "3", "h-down"),
        ("143", "1", "h-healthy"),
    ]
    periods = text.split("When it was not healthy", 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<td>(\d+ \w+(?: so far)?)</td>", periods) == ["30 min"]
    assert ">down</span>" in periods and "2026-11-29T06:30:00Z" in periods
    assert "2026-11-29T07:00:00Z" in periods
    assert 'Now <span class="pill pill-ok">healthy</span> for 10 min so far' in text
    assert "7 samples" in text


def test_the_cluster_page_lists_nodegroups_and_operations(
    polled: NksAccount, viewer: Client
) -> None:
    text = text_of(viewer, cluster_url("staging-web"))
    gpu = text.split('data-nodegroup="gpu-worker"', 1)[1].split("</tr>", 1)[0]
    assert "UPDATE_FAILED" in gpu and "1 / —" in gpu and "<td>off</td>" in gpu
    default = text.split('data-nodegroup="default-worker"', 1)[1].split("</tr>", 1)[0]
    assert 'title="2 ready, 1 not ready"' in default and "NOT_READY_NODE_EXIST" in default
    operations = text.split("Recent operations", 1)[1].split("</table>", 1)[0]
    assert operations.index("NODEGROUP_SCALE_OUT") < operations.index("CLUSTER_CREATE")
    assert "Quota exceeded for instances" in operations and "<td>95 s</td>" in operations


def test_node_heartbeat_leases_are_shown_next_to_nks_node_counts(
    polled: NksAccount, viewer: Client
) -> None:
    kube = make_cluster("staging-web", fresh=True, last_flush_at=timezone.now())
    node_lease(kube, "staging-web-default-worker-node-0", renewed_ago=2)
    node_lease(kube, "staging-web-default-worker-node-2", renewed_ago=300)
    text = text_of(viewer, cluster_url("staging-web"))
    panel = text.split("Node heartbeat Leases", 1)[1].split("</section>", 1)[0]
    assert "<strong>1</strong> heart-beating" in panel
    assert '<strong class="bad">1</strong> expired' in panel
    assert "<strong>3/4</strong> nodes ready" in panel
    assert "Watch this cluster" not in text


def test_an_operator_registers_the_cluster_as_a_lease_source_in_one_click(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    url = cluster_url("prod-api")
    assert "Watch this cluster's Leases and Nodes" in text_of(operator_client, url)
    response = operator_client.post(f"{url}watch-leases/", follow=True)
    text = response.content.decode()
    assert "prod-api is now watched for Leases and Nodes as prod-api" in text
    kube = KubeCluster.objects.get(name="prod-api")
    assert "fake-nks-" in kube.kubeconfig and kube.enabled
    assert NksCluster.objects.get(name="prod-api").kube_cluster == kube
    assert "fake-nks-" not in text, "the kubeconfig is a secret"
    assert len(fake_nks.requests_seen(r"/v1/clusters/[^/]+/config")) == 1
    again = operator_client.post(f"{url}watch-leases/", follow=True).content.decode()
    assert "already watched for Leases and Nodes" in again
    assert len(fake_nks.requests_seen(r"/v1/clusters/[^/]+/config")) == 1


def test_a_failed_kubeconfig_fetch_is_shown_and_registers_nothing(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    fake_nks.fail_next(r"/v1/clusters/[^/]+/config", 403)
    url = cluster_url("prod-api")
    text = operator_client.post(f"{url}watch-leases/", follow=True).content.decode()
    assert "NKS did not hand out the kubeconfig: NKS answered 403 Forbidden" in text
    assert not KubeCluster.objects.exists()


def test_only_operators_may_add_a_lease_source(polled: NksAccount, viewer: Client) -> None:
    url = cluster_url("prod-api")
    assert "Watch this cluster" not in text_of(viewer, url)
    assert viewer.post(f"{url}watch-leases/").status_code == 403
    assert not KubeCluster.objects.exists()


def test_unknown_clusters_and_nodegroups_are_404(polled: NksAccount, viewer: Client) -> None:
    text_of(viewer, "/clusters/no-such-uuid/", status=404)
    text_of(viewer, f"{cluster_url('prod-api')}nodegroups/nope/", status=404)


# --- A nodegroup -----------------------------------------------------------------------------


def test_the_nodegroup_page_shows_nodes_history_and_the_form(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    nodes_like_the_fake(fake_nks, "legacy-batch")
    text = text_of(operator_client, f"{cluster_url('legacy-batch')}nodegroups/default-worker/")
    node = fake_nks.state.find_cluster("legacy-batch").nodegroups[0].nodes[0]
    row = text.split(f'data-node="{node.name}"', 1)[1].split("</tr>", 1)[0]
    assert node.uuid in row and ">Ready</span>" in row and "KubeletReady" in row
    assert ">held</span>" in row, "its heartbeat Lease"
    assert f'href="/leases/clusters/legacy-batch/nodes/{node.name}/"' in row
    assert "History, last 24 hours" in text and "1 sample;" in text
    assert "Target node count" in text and 'name="confirm_name"' in text
    partial = text_of(
        operator_client,
        f"{cluster_url('legacy-batch')}nodegroups/default-worker/",
        HTTP_HX_TARGET="nks-nodegroup",
        **HTMX,
    )
    assert partial.lstrip().startswith('<div id="nks-nodegroup"')
    assert "Target node count" not in partial


def test_a_node_whose_heartbeat_lease_expired_is_preselected(
    polled: NksAccount, operator_client: Client, fake_nks: FakeNks
) -> None:
    nodes = fake_nks.state.find_cluster("prod-api").nodegroups[0].nodes
    kube, _ = nodes_like_the_fake(fake_nks, "prod-api")
    heartbeat(kube, nodes[1].name, renewed_ago=300)
    text = text_of(operator_client, f"{cluster_url('prod-api')}nodegroups/default-worker/")
    checkbox = text.split(f'value="{nodes[1].uuid}"', 1)[1].split(">", 1)[0]
    assert "checked" in checkbox
    assert f"{nodes[1].name} (heartbeat lease expired) · {nodes[1].uuid}" in text
    assert "checked" not in text.split(f'value="{nodes[0].uuid}"', 1)[1].split(">", 1)[0]


# --- The overview ----------------------------------------------------------------------------


def test_the_overview_summarises_nks_health_unhealthy_first(
    polled: NksAccount, viewer: Client
) -> None:
    text = text_of(viewer, "/", HTTP_HX_TARGET="nks-overview", **HTMX)
    assert text.lstrip().startswith('<article id="nks-overview"')
    counts = dict(re.findall(r"<dt>(\w+)</dt><dd>(\d+)</dd>", text))
    assert counts == {"down": "0", "degraded": "1", "unknown": "1", "healthy": "1"}
    listed = re.findall(r'<a href="/clusters/[^"]+/">([^<]+)</a>', text)
    assert listed == ["staging-web", "legacy-batch"]
    full = text_of(viewer, "/")
    assert 'id="nks-overview"' in full and 'id="lease-overview"' in full


# --- Secrets ---------------------------------------------------------------------------------


def test_credentials_never_appear_in_pages_or_admin(
    fake_nks: FakeNks, nks_settings: Any, admin_client: Client
) -> None:
    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    assert poll_account(account.pk).ok
    token_account, _ = register_nks_account(
        "minted", api_url="https://nks.example", token="tok-SEKRET-4242"
    )
    pages = [
        "/clusters/",
        cluster_url("prod-api"),
        "/",
        f"/admin/nks/nksaccount/{account.pk}/change/",
        f"/admin/nks/nksaccount/{token_account.pk}/change/",
        "/api/v1/nks/clusters",
    ]
    for url in pages:
        text = text_of(admin_client, url)
        assert fake_nks.password not in text, url
        assert "tok-SEKRET-4242" not in text, url


def test_admin_keeps_a_secret_left_empty_and_refuses_mixed_credentials(
    nks_account: NksAccount, admin_client: Client, fake_nks: FakeNks
) -> None:
    url = f"/admin/nks/nksaccount/{nks_account.pk}/change/"
    form = {
        "name": "demo",
        "enabled": "on",
        "api_url": fake_nks.url,
        "identity_url": fake_nks.identity_url,
        "tenant_id": fake_nks.tenant_id,
        "username": "someone-else@example.com",
        "password": "",
        "token": "",
    }
    # Moving the secret to another user name needs it again (see the tests below); an edit
    # that leaves where the secret goes alone keeps it when the field is left empty.
    response = admin_client.post(url, {**form, "username": fake_nks.username, "enabled": ""})
    assert response.status_code == 302
    nks_account.refresh_from_db()
    assert not nks_account.enabled
    assert nks_account.password == fake_nks.password, "an empty field keeps the secret"
    response = admin_client.post(url, {**form, "token": "tok-123"})
    assert response.status_code == 200
    assert "Give either a token or identity credentials, not both." in response.content.decode()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("api_url", "https://collector.example/nks"),
        ("identity_url", "https://collector.example/identity"),
        ("tenant_id", "other-tenant"),
        ("username", "someone-else@example.com"),
    ],
)
def test_moving_the_password_to_another_address_needs_it_again(
    nks_account: NksAccount, admin_client: Client, fake_nks: FakeNks, field: str, value: str
) -> None:
    url = f"/admin/nks/nksaccount/{nks_account.pk}/change/"
    form = {
        "name": "demo",
        "enabled": "on",
        "api_url": fake_nks.url,
        "identity_url": fake_nks.identity_url,
        "tenant_id": fake_nks.tenant_id,
        "username": fake_nks.username,
        "password": "",
        "token": "",
    }
    response = admin_client.post(url, {**form, field: value})
    assert response.status_code == 200
    assert "enter the password again" in response.content.decode()
    nks_account.refresh_from_db()
    assert getattr(nks_account, field) != value, "nothing was saved"
    assert nks_account.password == fake_nks.password

    response = admin_client.post(url, {**form, field: value, "password": "typed-again"})
    assert response.status_code == 302
    nks_account.refresh_from_db()
    assert getattr(nks_account, field) == value
    assert nks_account.password == "typed-again"


def test_moving_a_token_to_another_api_url_needs_it_again(admin_client: Client) -> None:
    account, _ = register_nks_account("minted", api_url="https://nks.example", token="tok-1")
    url = f"/admin/nks/nksaccount/{account.pk}/change/"
    form = {"name": "minted", "enabled": "on", "api_url": "https://collector.example"}
    response = admin_client.post(url, form)
    assert response.status_code == 200
    assert "enter the token again" in response.content.decode()
    account.refresh_from_db()
    assert account.api_url == "https://nks.example"

    response = admin_client.post(url, {**form, "token": "tok-2"})
    assert response.status_code == 302
    account.refresh_from_db()
    assert (account.api_url, account.token) == ("https://collector.example", "tok-2")
