"""NKS URLs may name a single-label host (a compose service, a Kubernetes Service's short
name): Django's URLValidator refused them (issue 23). Everything else of the URL is still
checked as Django checks it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from dashboard.service_urls import ServiceURLValidator
from nks.forms import NksAccountForm
from nks.models import NksAccount

validate = ServiceURLValidator()


@pytest.mark.parametrize(
    "url",
    [
        "http://nks-proxy:8080",
        "https://nks/v1",
        "http://fake-nks:8002/v1/clusters?x=1",
        "https://api-kr1.example.com/v1",
        "http://localhost:8002",
        "http://127.0.0.1:8002",
    ],
)
def test_these_urls_are_taken(url: str) -> None:
    validate(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://-nks:8080",
        "http://nks-:8080",
        "http://nks_proxy:8080",
        "http://nks proxy/",
        "nks-proxy:8080",
        "ftp//nks",
        "http://" + "a" * 64 + ":80",
        "http://:8080",
    ],
)
def test_these_urls_are_still_refused(url: str) -> None:
    with pytest.raises(ValidationError):
        validate(url)


@pytest.mark.django_db
def test_an_account_with_a_compose_service_as_its_api_url_validates() -> None:
    account = NksAccount(name="compose", api_url="http://fake-nks:8002", token="t" * 20)
    account.full_clean()


@pytest.mark.django_db
def test_the_account_form_takes_a_single_label_host() -> None:
    form = NksAccountForm(
        data={
            "name": "compose",
            "enabled": "on",
            "api_url": "http://fake-nks:8002",
            "token": "t" * 20,
        }
    )
    assert "api_url" not in form.errors, form.errors
