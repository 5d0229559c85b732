"""Single sign-on in Chromium against a real OpenID provider running as its own process.

The provider (django-oidc-provider, tests/oidc_provider) listens on its own port with its own
database; the dashboard is pytest-django's live server pointed at it by OIDC_ISSUER alone.
Chromium clicks "Sign in with single sign-on", signs in on the provider's own form and comes
back through /oidc/callback/. A member of an operator group then resizes a nodegroup (the
request is recorded and queued); a user outside those groups is refused with 403.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from dashboard.oidc import forget_provider
from fakes.nks import FakeNks
from nks.accounts import forget_clients
from nks.models import NksCluster, ResizeRequest
from nks.poller import poll_account
from nks.services import register_nks_account
from tests.oidc_provider.server import CLIENT_ID, CLIENT_SECRET, OidcProvider, running_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with running_provider(tmp_path_factory.mktemp("op")) as op:
        op.seed(users={"olivia": ["sre-oncall"], "erin": ["developers"]})
        yield op


@pytest.fixture
def sso(settings: Any, provider: OidcProvider, live_server: Any) -> Iterator[OidcProvider]:
    provider.seed(redirect_uris=[f"{live_server.url}/oidc/callback/"])
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_OPERATOR_GROUPS = ["sre-oncall"]
    forget_provider()
    yield provider
    forget_provider()


@pytest.fixture
def nodegroup_url(settings: Any, live_server: Any) -> Iterator[str]:
    """The demo NKS account polled once; the URL of prod-api's default-worker nodegroup."""
    settings.NKS_HTTP_TIMEOUT = 5
    settings.NKS_HTTP_BACKOFF = 0.05
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"e2e-{uuid.uuid4().hex}"},
    }
    forget_clients()
    with FakeNks(scenario="demo", resize_delay=1.5) as fake:
        account, _ = register_nks_account("demo", api_url=fake.url, **fake.credentials())
        assert poll_account(account.pk).ok
        cluster = NksCluster.objects.get(name="prod-api")
        yield f"{live_server.url}/clusters/{cluster.uuid}/nodegroups/default-worker/"
    forget_clients()


def sign_in_with_sso(page: Any, provider: OidcProvider, url: str, username: str) -> None:
    page.goto(url)
    page.click("#sso")
    page.wait_for_selector("#op-username")
    assert page.url.startswith(f"{provider.url}/accounts/login/")
    page.fill("#op-username", username)
    page.fill("#op-password", f"{username}-pass")
    page.click("#op-submit")
    page.wait_for_url(url)


def test_a_member_of_an_operator_group_signs_in_with_sso_and_resizes(
    sso: OidcProvider, page: Any, nodegroup_url: str, private_broker: None
) -> None:
    sign_in_with_sso(page, sso, nodegroup_url, "olivia")

    page.wait_for_selector("#id_node_count")
    page.fill("#id_node_count", "4")
    page.fill("#id_reason", "more capacity for the launch")
    with page.expect_response(
        lambda response: response.url.endswith("/resize/") and response.request.method == "POST"
    ) as posted:
        page.click("button.primary")
    assert posted.value.status == 302
    page.wait_for_url("**/clusters/resizes/*/")

    request = ResizeRequest.objects.get()
    assert request.username == "olivia" and request.to_count == 4
    olivia = get_user_model().objects.get(username="olivia")
    assert not olivia.has_usable_password()
    assert olivia.groups.filter(name="operators").exists()


def test_a_user_outside_the_operator_groups_signs_in_with_sso_and_gets_403_on_resize(
    sso: OidcProvider, page: Any, nodegroup_url: str, private_broker: None
) -> None:
    sign_in_with_sso(page, sso, nodegroup_url, "erin")

    assert page.locator("#id_node_count").count() == 0, "no resize form for a non-operator"
    token = json.loads(page.get_attribute("body", "hx-headers"))["X-CSRFToken"]
    response = page.request.post(
        f"{nodegroup_url}resize/",
        form={"node_count": "4", "reason": "trying anyway"},
        headers={"X-CSRFToken": token},
        max_redirects=0,
    )

    assert response.status == 403
    assert "need the <code>operators</code> group" in response.text()
    assert not ResizeRequest.objects.exists()
    assert not get_user_model().objects.get(username="erin").groups.exists()
