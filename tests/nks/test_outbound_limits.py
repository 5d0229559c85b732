"""NKS answers that trickle, bloat or bomb end as errors in words; URLs that would leak are
refused. Hostile servers over real HTTP on loopback."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.forms import modelform_factory

from nks import client as nks
from nks.accounts import client_for
from nks.client import NksClient, Timeouts
from nks.forms import NksAccountForm
from nks.models import NksAccount
from nks.poller import poll_account
from tests.dashboard.hostile_http import HostileServer, gzip_bomb

# Per-operation limits far above the trickle's 0.5 s: only the total deadline can stop it.
PATIENT = Timeouts(connect=5.0, read=5.0, write=5.0, pool=5.0)


def hostile_client(url: str, **options: Any) -> NksClient:
    values: dict[str, Any] = {
        "token": "fixed-t0ken",
        "timeout": PATIENT,
        "retries": 3,
        "backoff": 0.01,
        "deadline": 2.0,
    }
    values.update(options)
    return NksClient(url, **values)


def test_a_trickling_nks_ends_within_the_deadline_retries_included() -> None:
    with HostileServer("trickle", interval=0.5) as server, hostile_client(server.url) as client:
        started = time.monotonic()
        with pytest.raises(nks.NksError) as caught:
            client.list_clusters()
        elapsed = time.monotonic() - started
    assert elapsed < 3.0
    assert caught.value.kind is nks.ErrorKind.TIMEOUT
    host = server.url.removeprefix("http://")
    assert caught.value.message == (
        f"NKS at {host} took longer than 2 s in total for GET /v1/clusters"
    )


def test_a_gzip_bomb_from_nks_is_refused_without_inflating() -> None:
    with (
        HostileServer("bomb", body=gzip_bomb(128)) as server,
        hostile_client(server.url, max_body=1024 * 1024) as client,
        pytest.raises(nks.NksError) as caught,
    ):
        client.list_clusters()
    assert caught.value.kind is nks.ErrorKind.BAD_RESPONSE
    assert not caught.value.retryable
    assert "answered GET /v1/clusters compressed as gzip, which was not asked for" in str(
        caught.value
    )
    assert server.requests == 1  # refused, not retried


def test_an_oversized_nks_answer_is_refused() -> None:
    with (
        HostileServer("huge", size=32 * 1024 * 1024) as server,
        hostile_client(server.url, max_body=1024 * 1024) as client,
        pytest.raises(nks.NksError) as caught,
    ):
        client.list_clusters()
    assert "answered GET /v1/clusters with an answer larger than 1 MiB" in str(caught.value)


@pytest.mark.django_db
def test_a_poll_of_a_trickling_nks_records_the_deadline_on_the_account(
    nks_settings: Any,
) -> None:
    nks_settings.NKS_HTTP_DEADLINE_SECONDS = 2
    nks_settings.NKS_HTTP_TIMEOUT = 5
    with HostileServer("trickle", interval=0.5) as server:
        account = NksAccount.objects.create(name="slow", api_url=server.url, token="t0ken-x")
        started = time.monotonic()
        result = poll_account(account.pk)
        elapsed = time.monotonic() - started
    assert not result.ok
    assert elapsed < 3.5
    account.refresh_from_db()
    assert "took longer than 2 s in total for GET /v1/clusters" in account.last_error
    assert account.last_error_kind == "timeout"


# --- URLs ------------------------------------------------------------------------------------

USERINFO_URL = "https://nks-user:s3cret-pass@api.example/"


def account_form(**overrides: str) -> NksAccountForm:
    data = {
        "name": "prod",
        "enabled": "on",
        "api_url": "https://api.example/",
        "identity_url": "",
        "tenant_id": "",
        "username": "",
        "token": "t0ken-abc",
    }
    data.update(overrides)
    # The fields the admin's fieldsets give it (the secrets among them).
    form_class = modelform_factory(
        NksAccount, form=NksAccountForm, fields=[*NksAccountForm.Meta.fields, "password", "token"]
    )
    return form_class(data=data, instance=NksAccount())


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["api_url", "identity_url"])
def test_the_account_form_refuses_a_url_with_user_info_without_echoing_it(field: str) -> None:
    overrides = {field: USERINFO_URL}
    if field == "identity_url":
        overrides.update(token="", tenant_id="t", username="u", password="p4ss")
    form = account_form(**overrides)
    assert not form.is_valid()
    assert "must not contain a user name or password" in " ".join(form.errors[field])
    assert "s3cret-pass" not in str(form.errors)


@pytest.mark.django_db
def test_a_stored_url_with_user_info_is_an_account_error_without_it(nks_settings: Any) -> None:
    account = NksAccount.objects.create(name="old", api_url=USERINFO_URL, token="t0ken-x")
    with pytest.raises(nks.NksError) as caught:
        client_for(account)
    assert "must not contain a user name or password" in caught.value.message
    assert "s3cret" not in caught.value.message
    assert "nks-user" not in caught.value.message


def test_the_client_refuses_user_info_and_says_so_without_it() -> None:
    with pytest.raises(ValueError) as caught:
        NksClient(USERINFO_URL, token="t0ken-x")
    assert "s3cret" not in str(caught.value)


@pytest.mark.django_db
def test_production_refuses_http_nks_urls(settings: Any) -> None:
    settings.PRODUCTION = True
    form = account_form(api_url="http://api.example/")
    assert not form.is_valid()
    assert "https:// in production" in " ".join(form.errors["api_url"])
    with pytest.raises(ValueError, match="https:// in production"):
        NksClient("http://api.example/", token="t0ken-x", require_https=True)


@pytest.mark.django_db
def test_development_keeps_http_for_the_fake_nks() -> None:
    form = account_form(api_url="http://127.0.0.1:8081/")
    assert form.is_valid(), form.errors
