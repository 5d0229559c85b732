"""Which language a page is in: the saved choice, then Accept-Language, then LANGUAGE_CODE."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from dashboard.models import ApiToken, UserPreference

pytestmark = pytest.mark.django_db


def _lang(response) -> str:  # type: ignore[no-untyped-def]
    text = response.content.decode()
    return text.split('<html lang="', 1)[1].split('"', 1)[0]


def test_login_page_is_english_without_accept_language(client: Client) -> None:
    response = client.get("/login/")

    assert _lang(response) == "en"
    assert "Who holds which Lease" in response.content.decode()
    assert response["Content-Language"] == "en"


def test_login_page_follows_the_browsers_accept_language(client: Client) -> None:
    response = client.get("/login/", HTTP_ACCEPT_LANGUAGE="ko-KR,ko;q=0.9,en;q=0.5")

    text = response.content.decode()
    assert _lang(response) == "ko"
    assert "어떤 Lease를 누가 보유하고 있는지" in text
    assert "<h1>로그인</h1>" in text
    assert response["Content-Language"] == "ko"
    assert "Accept-Language" in response["Vary"]


def test_language_code_decides_when_the_browser_asks_for_neither_language(
    client: Client,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    settings.LANGUAGE_CODE = "ko"

    assert _lang(client.get("/login/")) == "ko"
    assert _lang(client.get("/login/", HTTP_ACCEPT_LANGUAGE="fr")) == "ko"
    assert _lang(client.get("/login/", HTTP_ACCEPT_LANGUAGE="en")) == "en"


def test_a_saved_language_outranks_accept_language(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="ko")

    response = engineer_client.get("/preferences/", HTTP_ACCEPT_LANGUAGE="en")

    assert _lang(response) == "ko"
    assert "<h1>환경 설정</h1>" in response.content.decode()
    assert response["Content-Language"] == "ko"


def test_a_saved_english_outranks_a_korean_browser(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="en")

    response = engineer_client.get("/preferences/", HTTP_ACCEPT_LANGUAGE="ko")

    assert _lang(response) == "en"


def test_without_a_saved_language_a_signed_in_person_gets_the_browsers(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, time_zone="Asia/Seoul")

    assert _lang(engineer_client.get("/preferences/", HTTP_ACCEPT_LANGUAGE="ko")) == "ko"
    assert _lang(engineer_client.get("/preferences/", HTTP_ACCEPT_LANGUAGE="en")) == "en"


def test_the_header_switch_saves_the_choice_of_a_signed_in_person(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    response = engineer_client.post("/language/", {"language": "ko", "next": "/preferences/"})

    assert response.status_code == 302
    assert response["Location"] == "/preferences/"
    assert UserPreference.objects.get(user=engineer).language == "ko"
    # Followed to another browser: no cookie there, an English Accept-Language.
    other = Client()
    other.force_login(engineer)
    assert _lang(other.get("/preferences/", HTTP_ACCEPT_LANGUAGE="en")) == "ko"


def test_the_header_switch_works_before_signing_in_with_a_cookie(client: Client) -> None:
    response = client.post("/language/", {"language": "ko", "next": "/login/"})

    assert response.status_code == 302
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "ko"
    assert _lang(client.get("/login/", HTTP_ACCEPT_LANGUAGE="en")) == "ko"
    assert not UserPreference.objects.exists()


def test_the_header_switch_refuses_an_unknown_language_and_a_foreign_next(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    response = engineer_client.post(
        "/language/", {"language": "xx", "next": "https://evil.example/"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert not UserPreference.objects.filter(user=engineer).exists()


def test_the_header_switch_needs_a_csrf_token(engineer: AbstractBaseUser) -> None:
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(engineer)

    assert strict.post("/language/", {"language": "ko"}).status_code == 403


def test_the_header_has_a_switch_form_for_each_language_without_javascript(
    client: Client,
) -> None:
    text = client.get("/login/", HTTP_ACCEPT_LANGUAGE="ko").content.decode()

    switch = text.split('action="/language/"', 1)[1].split("</form>", 1)[0]
    assert 'name="csrfmiddlewaretoken"' in switch
    assert 'name="next" value="/login/"' in switch
    assert 'value="en" lang="en"' in switch and ">English</button>" in switch
    assert 'value="ko" lang="ko"' in switch and 'aria-pressed="true" disabled>한국어' in switch


def test_anonymous_pages_ask_the_database_nothing_about_preferences(client: Client) -> None:
    with CaptureQueriesContext(connection) as queries:
        client.get("/login/", HTTP_ACCEPT_LANGUAGE="ko")

    assert not [q for q in queries.captured_queries if "userpreference" in q["sql"]]


def test_a_signed_in_page_reads_the_preference_once(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="ko", time_zone="Asia/Seoul")

    with CaptureQueriesContext(connection) as queries:
        engineer_client.get("/preferences/")

    reads = [q for q in queries.captured_queries if "userpreference" in q["sql"]]
    assert len(reads) == 2, reads  # the middleware's, and the form's initial values


def test_the_overview_reads_the_preference_once(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="ko")

    with CaptureQueriesContext(connection) as queries:
        engineer_client.get("/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workers")

    reads = [q for q in queries.captured_queries if "userpreference" in q["sql"]]
    assert len(reads) == 1, reads


def test_the_api_reads_no_preference(engineer: AbstractBaseUser) -> None:
    _token, plain = ApiToken.issue(engineer, name="test")
    UserPreference.objects.create(user=engineer, language="ko")

    with CaptureQueriesContext(connection) as queries:
        response = Client().get("/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {plain}")

    assert response.status_code == 200
    assert not [q for q in queries.captured_queries if "userpreference" in q["sql"]]
