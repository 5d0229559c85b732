"""No admin page ever shows a secret, to any role.

Every secret the project stores (each encrypted column, an API token and its hash, the users'
password hashes) is set to a recognisable value; then every page of every registered admin
(the list, a search, the add page, each object's change or view page, its history, its delete
confirmation, and each action's answer) is read as a view-only staff user, as a staff user
who may change everything, and as a superuser. None may show a secret, and none may fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import models
from django.test import Client
from django.utils import timezone

from alerts.models import AlertChannel, ChannelKind, Notification
from dashboard.admin import WriteOnlySecretsAdmin
from dashboard.encryption import encrypted_fields
from dashboard.models import ApiToken, hash_api_token
from leases.models import KubeCluster, LeaderGroup
from nks.models import ResizeState
from tests.alerts.factories import make_incident, make_nks_cluster, make_nodegroup, make_resize
from tests.leases.factories import KUBECONFIG_SECRET, make_cluster, make_lease

pytestmark = pytest.mark.django_db

NKS_PASSWORD = "demo-password-SECRET-7731"
NKS_TOKEN = "nks-fixed-token-SECRET-5512"
HOOK_TOKEN = "HOOK-SECRET-9911"
HOOK_URL = f"https://hooks.example.org/services/{HOOK_TOKEN}"
SIGNING_SECRET = "signing-SECRET-3301"

ROLES = ("viewer", "changer", "superuser")


def rows_holding_secrets(root: Any) -> list[str]:
    """One row per model with a secret, each secret recognisable; the texts to look for."""
    from nks.models import NksAccount

    cluster = make_cluster("prod")
    make_lease(cluster, "kube-scheduler")
    LeaderGroup.objects.create(
        cluster=cluster, namespace="kube-system", name="ctl", expected_size=3
    )
    identity = NksAccount.objects.create(
        name="kr1",
        api_url="https://kr1-api-kubernetes.example.com",
        identity_url="https://api-identity.example.com",
        tenant_id="tenant",
        username="olivia@example.org",
        password=NKS_PASSWORD,
    )
    NksAccount.objects.create(
        name="kr2", api_url="https://kr2-api-kubernetes.example.com", token=NKS_TOKEN
    )
    nks_cluster = make_nks_cluster(identity)
    make_resize(make_nodegroup(nks_cluster), ResizeState.IN_PROGRESS, nks_called_at=timezone.now())
    channel = AlertChannel.objects.create(
        name="platform-webhook",
        kind=ChannelKind.WEBHOOK,
        url=HOOK_URL,
        signing_secret=SIGNING_SECRET,
    )
    incident = make_incident()
    now = timezone.now()
    notification = Notification.objects.create(
        kind="opened",
        channel=channel,
        subject="s",
        body_text="",
        body_html="",
        created_at=now,
        next_attempt_at=now,
        last_error="HTTP 404 from platform-webhook",
    )
    notification.incidents.add(incident)
    _token, plain = ApiToken.issue(root, name="ci")
    secrets = [
        KUBECONFIG_SECRET,
        NKS_PASSWORD,
        NKS_TOKEN,
        HOOK_TOKEN,
        SIGNING_SECRET,
        plain,
        plain[10:],  # all but the prefix the admin shows on purpose
        hash_api_token(plain),
    ]
    # Whatever else is encrypted (a model added later) must be covered by a row here too.
    for model, field in encrypted_fields():
        values = [value for value in model.objects.values_list(field, flat=True) if value]
        assert values, f"no {model._meta.label}.{field} row to look for: add one above"
        secrets.extend(values)
    return secrets


def make_users(django_user_model: Any) -> dict[str, Any]:
    root = django_user_model.objects.create_superuser("root", "root@example.org", "x")
    viewer = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    changer = django_user_model.objects.create_user("changer", password="x", is_staff=True)
    changer.user_permissions.set(Permission.objects.all())
    return {"viewer": viewer, "changer": changer, "superuser": root}


def admin_urls(model: type[models.Model]) -> Iterator[str]:
    base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
    yield base
    yield f"{base}?q=SECRET"
    yield f"{base}add/"
    for pk in model._default_manager.values_list("pk", flat=True):
        yield f"{base}{pk}/change/"
        yield f"{base}{pk}/history/"
        yield f"{base}{pk}/delete/"


def leaks(html: str, secrets: list[str]) -> list[str]:
    return [secret[:12] + "…" for secret in secrets if secret in html]


def test_no_admin_page_shows_a_secret_to_any_role(django_user_model: Any) -> None:
    users = make_users(django_user_model)
    secrets = rows_holding_secrets(users["superuser"])
    # Users' password hashes are secrets too (an offline guess needs only the hash).
    secrets.extend(django_user_model.objects.values_list("password", flat=True))
    problems: list[str] = []
    for role in ROLES:
        client = Client(raise_request_exception=False)
        client.force_login(users[role])
        for model in admin.site._registry:
            for url in admin_urls(model):
                response = client.get(url, follow=True)
                body = response.content.decode()
                if response.status_code >= 500:
                    problems.append(f"{role} {url}: {response.status_code}")
                if found := leaks(body, secrets):
                    problems.append(f"{role} {url}: shows {found}")
    assert not problems, "\n".join(problems)


def test_every_action_answer_is_free_of_secrets(django_user_model: Any) -> None:
    users = make_users(django_user_model)
    secrets = rows_holding_secrets(users["superuser"])
    problems: list[str] = []
    for role in ROLES:
        client = Client(raise_request_exception=False)
        client.force_login(users[role])
        for model, model_admin in admin.site._registry.items():
            pks = [str(pk) for pk in model._default_manager.values_list("pk", flat=True)]
            base = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
            for name in model_admin.actions or ():
                for action in (name, "delete_selected"):
                    form = {"action": action, "_selected_action": pks, "index": 0}
                    response = client.post(base, form, follow=True)
                    if response.status_code >= 500:
                        problems.append(f"{role} {action} on {base}: {response.status_code}")
                    if found := leaks(response.content.decode(), secrets):
                        problems.append(f"{role} {action} on {base}: shows {found}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_a_secret_shows_as_set_or_not_set(django_user_model: Any, role: str) -> None:
    users = make_users(django_user_model)
    rows_holding_secrets(users["superuser"])
    client = Client()
    client.force_login(users[role])
    from nks.models import NksAccount

    kr1 = NksAccount.objects.get(name="kr1")
    html = client.get(f"/admin/nks/nksaccount/{kr1.pk}/change/").content.decode()
    assert "Password (stored)" in html and "Token (stored)" in html
    assert html.count("not set") == 1  # the token; the password is set
    cluster = KubeCluster.objects.get()
    html = client.get(f"/admin/leases/kubecluster/{cluster.pk}/change/").content.decode()
    assert "Kubeconfig (stored)" in html
    channel = AlertChannel.objects.get()
    html = client.get(f"/admin/alerts/alertchannel/{channel.pk}/change/").content.decode()
    assert "Url (stored)" in html and "Signing secret (stored)" in html


def test_every_admin_of_a_model_with_a_secret_keeps_it_write_only() -> None:
    """A new encrypted column in a registered model must get the write-only treatment."""
    for model, field in encrypted_fields():
        model_admin = admin.site._registry.get(model)
        if model_admin is not None:
            assert isinstance(model_admin, WriteOnlySecretsAdmin), (model._meta.label, field)


def test_a_secret_changed_in_admin_says_when_and_by_whom(django_user_model: Any) -> None:
    from nks.models import NksAccount

    users = make_users(django_user_model)
    rows_holding_secrets(users["superuser"])
    kr1 = NksAccount.objects.get(name="kr1")
    change = f"/admin/nks/nksaccount/{kr1.pk}/change/"
    client = Client()
    client.force_login(users["superuser"])
    form = {
        "name": "kr1",
        "enabled": "on",
        "api_url": kr1.api_url,
        "identity_url": kr1.identity_url,
        "tenant_id": kr1.tenant_id,
        "username": kr1.username,
        "password": "a-new-password-SECRET",
        "token": "",
    }
    response = client.post(change, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert NksAccount.objects.get(pk=kr1.pk).password == "a-new-password-SECRET"
    client.force_login(users["viewer"])
    html = client.get(change).content.decode()
    assert "set (last changed " in html and " by root)" in html
    assert "a-new-password-SECRET" not in html
    assert "Clear token" not in html, "a form-only box means nothing to a reader"
