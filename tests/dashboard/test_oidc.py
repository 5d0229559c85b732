"""Single sign-on against a real OpenID provider (its own process), and the OIDC_ONLY rules.

The provider is django-oidc-provider under tests/oidc_provider, started once per module; the
dashboard talks to it over HTTP as it would to a company's provider. The test plays the
browser at the provider with `requests`, and at the dashboard with Django's test client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
import requests
from axes.models import AccessAttempt
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import SuspiciousOperation
from django.test import Client

from dashboard.models import SsoIdentity
from dashboard.oidc import (
    SSO_UNREACHABLE,
    OidcBackend,
    claims_groups,
    forget_provider,
    username_from_claims,
)
from tests.oidc_provider.hostile import HostileEndpoint, hostile_endpoint
from tests.oidc_provider.server import (
    CLIENT_ID,
    CLIENT_SECRET,
    OidcProvider,
    free_port,
    running_provider,
)

pytestmark = pytest.mark.django_db

CALLBACK = "http://testserver/oidc/callback/"
DISCOVERY_PATH = "/openid/.well-known/openid-configuration"
USERS = {
    "olivia": ["platform", "sre-oncall"],
    "erin": ["developers"],
    "eve smith": ["sre-oncall"],  # not a valid user name here
    "root": [],  # a provider account that shares its name with the break-glass superuser
}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    with running_provider(tmp_path_factory.mktemp("op")) as op:
        op.seed(redirect_uris=[CALLBACK], users=USERS)
        yield op


@pytest.fixture
def sso(settings: Any, provider: OidcProvider) -> Iterator[OidcProvider]:
    """The dashboard pointed at the provider by issuer alone; discovery not yet cached."""
    settings.OIDC_ISSUER = provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_RP_SCOPES = "openid email profile groups"
    settings.OIDC_OPERATOR_GROUPS = ["sre-oncall", "on-call-leads"]
    forget_provider()
    provider.seed(users=USERS)  # a test may have changed someone's groups
    yield provider
    forget_provider()


def sign_in(client: Client, provider: OidcProvider, username: str, next_url: str = "/") -> Any:
    """The whole code flow: dashboard → provider's login form → dashboard's callback."""
    start = client.get("/oidc/authenticate/", {"next": next_url})
    assert start.status_code == 302
    assert start["Location"].startswith(f"{provider.issuer}/authorize?")
    back = provider.sign_in(start["Location"], username)
    assert back.startswith(CALLBACK), back
    return client.get(back.removeprefix("http://testserver"))


def is_operator(username: str) -> bool:
    return get_user_model().objects.get(username=username).groups.filter(name="operators").exists()


# --- Signing in -------------------------------------------------------------------------------


def test_a_member_of_an_operator_group_signs_in_as_an_operator_without_a_password(
    sso: OidcProvider,
) -> None:
    client = Client()
    response = sign_in(client, sso, "olivia", next_url="/clusters/")

    assert response.status_code == 302 and response["Location"] == "/clusters/"
    user = get_user_model().objects.get(username="olivia")
    assert not user.has_usable_password()
    assert user.email == "olivia@example.org" and user.first_name == "Olivia"
    assert user.has_perm("dashboard.change_clusters")
    assert client.get("/api/v1/me").json() == {
        "username": "olivia",
        "can_change_clusters": True,
    }


def test_operator_membership_is_reapplied_at_every_sign_in(sso: OidcProvider) -> None:
    sign_in(Client(), sso, "olivia")
    assert is_operator("olivia")

    sso.seed(users={"olivia": ["platform"]})
    sign_in(Client(), sso, "olivia")
    assert not is_operator("olivia")

    sso.seed(users={"olivia": ["on-call-leads"]})
    sign_in(Client(), sso, "olivia")
    assert is_operator("olivia")


def test_a_user_outside_the_operator_groups_is_signed_in_without_cluster_changes(
    sso: OidcProvider, django_user_model: Any
) -> None:
    # An account an earlier version created at erin's first sign-in (no password, no link
    # yet): SSO takes it over once and binds it; its operator membership follows the groups.
    erin = django_user_model.objects.create_user("erin")
    erin.groups.add(Group.objects.get(name="operators"))
    client = Client()

    response = sign_in(client, sso, "erin")

    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/api/v1/me").json() == {"username": "erin", "can_change_clusters": False}
    assert not is_operator("erin")
    assert django_user_model.objects.filter(username="erin").count() == 1
    assert SsoIdentity.objects.get(user=erin).subject == sso.subjects["erin"]


@pytest.mark.parametrize(
    ("username", "claim"),
    [("olivia", "upn"), ("eve smith", "preferred_username")],
    ids=["claim-missing", "not-a-valid-user-name"],
)
def test_a_user_without_a_usable_username_claim_is_refused(
    sso: OidcProvider, settings: Any, caplog: pytest.LogCaptureFixture, username: str, claim: str
) -> None:
    settings.OIDC_USERNAME_CLAIM = claim
    client = Client()

    response = sign_in(client, sso, username)

    assert response.status_code == 302 and response["Location"] == "/login/"
    page = client.get("/login/").content.decode()
    assert "has no usable user name" in page and f"“{claim}”" in page
    assert not get_user_model().objects.exists()
    assert client.get("/").status_code == 302
    assert "Single sign-on refused" in caplog.text


def test_discovery_happens_at_the_first_sign_in_and_is_then_cached(sso: OidcProvider) -> None:
    before = sso.requests_seen(DISCOVERY_PATH)
    client = Client()
    assert client.get("/login/").status_code == 200
    assert sso.requests_seen(DISCOVERY_PATH) == before, "nothing is fetched before a sign-in"

    sign_in(client, sso, "olivia")
    sign_in(Client(), sso, "erin")

    assert sso.requests_seen(DISCOVERY_PATH) == before + 1


def test_explicit_endpoints_work_without_an_issuer_and_without_discovery(
    sso: OidcProvider, settings: Any
) -> None:
    settings.OIDC_ISSUER = None
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{sso.issuer}/authorize"
    settings.OIDC_OP_TOKEN_ENDPOINT = f"{sso.issuer}/token"
    settings.OIDC_OP_USER_ENDPOINT = f"{sso.issuer}/userinfo"
    settings.OIDC_OP_JWKS_ENDPOINT = f"{sso.issuer}/jwks"
    before = sso.requests_seen(DISCOVERY_PATH)
    client = Client()

    response = sign_in(client, sso, "olivia")

    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/api/v1/me").json()["can_change_clusters"] is True
    assert sso.requests_seen(DISCOVERY_PATH) == before


def test_sign_in_views_are_reachable_without_a_login(sso: OidcProvider) -> None:
    client = Client()
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302 and start["Location"].startswith(sso.issuer)
    # A callback without a code is a failed sign-in, answered on the login page, not
    # bounced to /login/?next=... by LoginRequiredMiddleware.
    callback = client.get("/oidc/callback/", follow=True)
    assert callback.redirect_chain == [("/login/", 302)]
    assert "Single sign-on did not sign you in" in callback.content.decode()


def test_a_rejected_code_ends_on_the_login_page_and_nothing_shows_the_secret(
    sso: OidcProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = Client()
    start = client.get("/oidc/authenticate/")
    state = start["Location"].split("state=")[1].split("&")[0]

    response = client.get(
        "/oidc/callback/", {"code": "not-a-code-the-provider-issued", "state": state}, follow=True
    )

    page = response.content.decode()
    assert response.redirect_chain == [("/login/", 302)]
    assert SSO_UNREACHABLE.split(".")[0] in page
    assert "OIDC token or userinfo call failed: HTTPError 400" in caplog.text
    assert CLIENT_SECRET not in page and CLIENT_SECRET not in caplog.text


def test_failed_sso_callbacks_are_not_counted_as_password_failures(sso: OidcProvider) -> None:
    # The throttle is for password guessing; SSO callbacks carry no user name, and counting
    # them would lock out everyone behind one address.
    client = Client()
    for _ in range(6):
        start = client.get("/oidc/authenticate/")
        state = start["Location"].split("state=")[1].split("&")[0]
        client.get("/oidc/callback/", {"code": "forged", "state": state})

    assert not AccessAttempt.objects.exists()
    response = sign_in(client, sso, "olivia")
    assert response.status_code == 302 and response["Location"] == "/"


def test_an_unreachable_provider_sends_people_back_to_the_login_page_with_a_reason(
    sso: OidcProvider, settings: Any
) -> None:
    settings.OIDC_ISSUER = f"http://127.0.0.1:{free_port()}/openid"

    response = Client().get("/oidc/authenticate/", follow=True)

    assert response.redirect_chain == [("/login/", 302)]
    assert "could not be reached" in response.content.decode()


def test_without_sso_there_is_no_button_and_its_urls_are_404(client: Client) -> None:
    page = client.get("/login/").content.decode()
    assert "single sign-on" not in page and 'id="password-login"' in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/").status_code == 404


# --- Which account: the provider's (iss, sub), never a user name claim ------------------------


def signed_in_as(client: Client) -> str | None:
    user_id = client.session.get("_auth_user_id")
    return get_user_model().objects.get(pk=user_id).username if user_id else None


@pytest.mark.parametrize("with_password", [True, False], ids=["with-password", "no-password"])
def test_a_provider_account_named_root_does_not_become_the_local_superuser(
    sso: OidcProvider, settings: Any, django_user_model: Any, with_password: bool
) -> None:
    # The audit's case: OIDC_ONLY, a provider user "root" in no operator group, and the local
    # break-glass superuser "root". A name claim is neither unique nor stable (OIDC Core §5.7).
    settings.OIDC_ONLY = True
    django_user_model.objects.create_superuser(
        "root", password="break-glass-pass-123" if with_password else None
    )
    client = Client()

    response = sign_in(client, sso, "root")

    assert response.status_code == 302 and response["Location"] == "/login/"
    page = client.get("/login/").content.decode()
    assert "An account named “root” already exists on this dashboard and is not linked" in page
    assert signed_in_as(client) is None
    assert client.get("/").status_code == 302
    assert django_user_model.objects.count() == 1 and not SsoIdentity.objects.exists()


def link_in_admin(user: Any, issuer: str, subject: str, *, by: Any) -> Any:
    admin = Client()
    admin.force_login(by)
    return admin.post(
        "/admin/dashboard/ssoidentity/add/",
        {"user": user.pk, "issuer": issuer, "subject": subject},
    )


def test_a_local_password_account_is_refused_until_a_superuser_links_it(
    sso: OidcProvider, django_user_model: Any
) -> None:
    erin = django_user_model.objects.create_user("erin", password="engineer-pass-123")
    erin.groups.add(Group.objects.get(name="operators"))
    client = Client()

    refused = sign_in(client, sso, "erin")

    assert refused["Location"] == "/login/" and signed_in_as(client) is None
    assert "An account named “erin” already exists" in client.get("/login/").content.decode()
    assert is_operator("erin"), "a refused sign-in changes nothing"

    root = django_user_model.objects.create_superuser("root", password="break-glass-pass-123")
    admin = Client()
    admin.force_login(root)
    form = admin.get("/admin/dashboard/ssoidentity/add/").content.decode()
    assert f'value="{sso.issuer}"' in form, "the issuer is filled in from OIDC_ISSUER"
    # The issuer as an admin may paste it, with a trailing slash.
    linked = link_in_admin(erin, f"{sso.issuer}/", sso.subjects["erin"], by=root)
    assert linked.status_code == 302, linked.content.decode()
    response = sign_in(client, sso, "erin")

    assert response.status_code == 302 and response["Location"] == "/"
    assert signed_in_as(client) == "erin"
    assert client.session["_auth_user_id"] == str(erin.pk)
    assert not is_operator("erin"), "groups follow the provider on a linked account too"
    erin.refresh_from_db()
    assert erin.has_usable_password(), "the local password stays for the password form"
    identity = SsoIdentity.objects.get(user=erin)
    assert identity.issuer == sso.issuer and identity.last_login_at is not None


def test_a_superuser_linked_by_an_admin_signs_in_by_sso(
    sso: OidcProvider, settings: Any, django_user_model: Any
) -> None:
    settings.OIDC_ONLY = True
    root = django_user_model.objects.create_superuser("root", password="break-glass-pass-123")
    SsoIdentity.objects.create(user=root, issuer=sso.issuer, subject=sso.subjects["root"])
    client = Client()

    response = sign_in(client, sso, "root")

    assert response["Location"] == "/" and signed_in_as(client) == "root"


def test_only_superusers_may_add_or_change_links(sso: OidcProvider, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("sam", password="staff-pass-123", is_staff=True)
    staff.user_permissions.set(
        Permission.objects.filter(content_type__model__in=["ssoidentity", "user"])
    )
    erin = django_user_model.objects.create_user("erin", password="engineer-pass-123")

    response = link_in_admin(erin, sso.issuer, sso.subjects["erin"], by=staff)

    assert response.status_code == 403
    assert not SsoIdentity.objects.exists()
    assert sign_in(Client(), sso, "erin")["Location"] == "/login/"


def test_a_changed_preferred_username_keeps_the_same_account(
    sso: OidcProvider, django_user_model: Any
) -> None:
    sign_in(Client(), sso, "olivia")
    olivia = django_user_model.objects.get(username="olivia")

    sso.seed(users={"olivia": USERS["olivia"]}, preferred_usernames={"olivia": "olivia.k"})
    client = Client()
    sign_in(client, sso, "olivia")

    assert client.session["_auth_user_id"] == str(olivia.pk)
    assert not django_user_model.objects.filter(username="olivia.k").exists()
    assert django_user_model.objects.count() == 1


def test_two_provider_users_with_one_preferred_username_get_two_accounts(
    sso: OidcProvider, django_user_model: Any
) -> None:
    sign_in(Client(), sso, "olivia")
    # erin (another `sub`) now calls herself "olivia" at the provider.
    sso.seed(users={"erin": USERS["erin"]}, preferred_usernames={"erin": "olivia"})
    client = Client()

    response = sign_in(client, sso, "erin")

    assert response["Location"] == "/"
    assert signed_in_as(client) == "olivia-2"
    assert client.get("/api/v1/me").json() == {"username": "olivia-2", "can_change_clusters": False}
    assert is_operator("olivia"), "the first olivia keeps her account and her groups"
    subjects = dict(SsoIdentity.objects.values_list("user__username", "subject"))
    assert subjects == {"olivia": sso.subjects["olivia"], "olivia-2": sso.subjects["erin"]}


def test_a_suffixed_name_never_sits_beside_a_local_name_in_another_letter_case(
    sso: OidcProvider, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("root", password="break-glass-pass-123")
    sso.seed(users={"erin": USERS["erin"]}, preferred_usernames={"erin": "Root"})
    client = Client()

    sign_in(client, sso, "erin")

    assert signed_in_as(client) == "Root-2"
    assert not get_user_model().objects.get(username="Root-2").is_superuser


# --- Every call to the provider is bounded in time and size ------------------------------------


@pytest.fixture
def hostile(settings: Any) -> Iterator[HostileEndpoint]:
    settings.OIDC_TIMEOUT = 1
    with hostile_endpoint() as endpoint:
        yield endpoint


@pytest.mark.parametrize("behaviour", ["drip-headers", "drip-body", "huge", "huge-chunked", "gzip"])
def test_discovery_is_bounded_in_time_and_size(
    sso: OidcProvider, settings: Any, hostile: HostileEndpoint, behaviour: str
) -> None:
    issuer = f"{hostile.url}/{behaviour}"
    hostile.document = {
        "issuer": issuer,
        "authorization_endpoint": f"{sso.issuer}/authorize",
        "token_endpoint": f"{sso.issuer}/token",
        "userinfo_endpoint": f"{sso.issuer}/userinfo",
        "jwks_uri": f"{sso.issuer}/jwks",
    }
    settings.OIDC_ISSUER = issuer
    started = time.monotonic()

    response = Client().get("/oidc/authenticate/", follow=True)

    assert time.monotonic() - started < 3, "OIDC_TIMEOUT is the call's whole time"
    assert response.redirect_chain == [("/login/", 302)]
    assert "could not be reached" in response.content.decode()


@pytest.mark.parametrize(
    ("endpoint", "behaviour"),
    [("JWKS", "drip-headers"), ("JWKS", "drip-body"), ("USER", "huge"), ("TOKEN", "drip-body")],
)
def test_token_userinfo_and_key_calls_are_bounded(
    sso: OidcProvider, settings: Any, hostile: HostileEndpoint, endpoint: str, behaviour: str
) -> None:
    settings.OIDC_ISSUER = None
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = f"{sso.issuer}/authorize"
    for name, path in (("TOKEN", "token"), ("USER", "userinfo"), ("JWKS", "jwks")):
        setattr(settings, f"OIDC_OP_{name}_ENDPOINT", f"{sso.issuer}/{path}")
    setattr(settings, f"OIDC_OP_{endpoint}_ENDPOINT", f"{hostile.url}/{behaviour}")
    # What the provider would answer, so that only the bound can refuse it.
    hostile.document = {
        "JWKS": requests.get(f"{sso.issuer}/jwks", timeout=5).json(),
        "USER": {"sub": sso.subjects["olivia"], "preferred_username": "olivia"},
        "TOKEN": {"access_token": "a", "id_token": "b", "token_type": "bearer"},
    }[endpoint]
    client = Client()
    started = time.monotonic()

    response = sign_in(client, sso, "olivia")

    assert time.monotonic() - started < 5
    assert response["Location"] == "/login/" and signed_in_as(client) is None
    assert "could not be reached" in client.get("/login/").content.decode()


# --- The backend's rules, on claims and tokens built here ----------------------------------------


def test_groups_claim_accepts_a_list_or_a_lone_string(settings: Any) -> None:
    settings.OIDC_GROUPS_CLAIM = "roles"
    assert claims_groups({"roles": ["a", "b", 3]}) == {"a", "b"}
    assert claims_groups({"roles": "a"}) == {"a"}
    assert claims_groups({"roles": {"a": 1}}) == set()
    assert claims_groups({"groups": ["a"]}) == set()


def test_username_claim_must_be_a_valid_django_user_name() -> None:
    assert username_from_claims({"preferred_username": " olivia@example.org "}) == (
        "olivia@example.org"
    )
    for bad in (None, "", "two words", "x" * 151, ["olivia"], "tab\tname"):
        assert username_from_claims({"preferred_username": bad}) is None


def _backend_for(client_id: str, issuer: str) -> OidcBackend:
    backend = OidcBackend()
    backend.OIDC_RP_CLIENT_ID = client_id
    backend.OIDC_RP_SIGN_ALGO = "RS256"
    backend.issuer = issuer
    return backend


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"aud": "someone-else", "iss": "https://sso.example.org"}, "another client"),
        ({"aud": ["x", CLIENT_ID], "iss": "https://evil.example.org"}, "another provider"),
    ],
)
def test_an_id_token_for_another_client_or_from_another_issuer_is_refused(
    claims: dict[str, Any], message: str
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode({"sub": "1", **claims}, key, algorithm="RS256")
    backend = _backend_for(CLIENT_ID, "https://sso.example.org")

    with pytest.raises(SuspiciousOperation, match=message):
        backend.get_payload_data(token, key.public_key())

    good = jwt.encode(
        {"sub": "1", "aud": CLIENT_ID, "iss": "https://sso.example.org"}, key, "RS256"
    )
    assert backend.get_payload_data(good, key.public_key())["sub"] == "1"


# --- OIDC_ONLY: the password form is a break-glass door for superusers ---------------------------


@pytest.fixture
def oidc_only(settings: Any) -> None:
    # Rendering the login page never contacts the provider, so no provider is needed here.
    settings.OIDC_ISSUER = "https://sso.example.org/realms/company"
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_ONLY = True


def test_oidc_only_hides_the_password_form_behind_a_break_glass_link(
    oidc_only: None, client: Client
) -> None:
    page = client.get("/login/", {"next": "/clusters/"}).content.decode()
    assert "Sign in with single sign-on" in page
    assert 'id="password-login"' not in page
    assert 'href="/login/?local=1&amp;next=%2Fclusters%2F">Break-glass sign-in</a>' in page

    local = client.get("/login/", {"local": "1"}).content.decode()
    assert 'id="password-login"' in local and 'action="/login/?local=1"' in local
    assert CLIENT_SECRET not in page + local


def test_break_glass_refuses_a_non_superuser_even_with_the_right_password(
    oidc_only: None, client: Client, operator: Any
) -> None:
    response = client.post(
        "/login/?local=1", {"username": "olivia", "password": "operator-pass-123"}
    )

    assert response.status_code == 200
    assert "reserved for break-glass superuser accounts" in response.content.decode()
    assert client.get("/").status_code == 302


def test_break_glass_admits_a_superuser(
    oidc_only: None, client: Client, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("root", password="break-glass-pass-123")

    response = client.post(
        "/login/?local=1", {"username": "root", "password": "break-glass-pass-123"}
    )

    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_oidc_only_also_closes_the_admin_login_to_staff_who_are_not_superusers(
    oidc_only: None, client: Client, django_user_model: Any
) -> None:
    django_user_model.objects.create_user("sam", password="staff-pass-123", is_staff=True)

    response = client.post(
        "/admin/login/?next=/admin/", {"username": "sam", "password": "staff-pass-123"}
    )

    assert response.status_code == 200
    assert client.get("/admin/").status_code == 302
