"""The shell pages in Korean: overview, error pages, with data kept as written."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from dashboard.models import UserPreference
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db


@pytest.fixture
def korean_client(engineer_client: Client, engineer: AbstractBaseUser) -> Client:
    UserPreference.objects.create(user=engineer, language="ko", time_zone_offered=True)
    return engineer_client


def test_overview_in_korean_keeps_names_as_written(korean_client: Client) -> None:
    cluster = make_cluster("prod-Seoul-1")
    make_lease(cluster, "kube-scheduler", holder="node-a_<b>")

    text = korean_client.get("/").content.decode()

    assert '<html lang="ko">' in text
    assert "<title>개요 · Lease 대시보드</title>" in text
    assert "<h1>개요</h1>" in text
    assert ">새로 고침 일시 정지</button>" in text
    assert "<h2>백그라운드 워커</h2>" in text
    assert "로그아웃" in text and 'aria-current="page">개요</a>' in text
    assert "prod-Seoul-1" in text
    assert "<b>" not in text.split("<main", 1)[1]
    assert "Overview" not in text and "Background workers" not in text


def test_overview_stays_english_for_an_english_reader(engineer_client: Client) -> None:
    text = engineer_client.get("/").content.decode()

    assert '<html lang="en">' in text
    assert "<h1>Overview</h1>" in text and "<h2>Background workers</h2>" in text


def test_not_found_page_in_korean(korean_client: Client, settings) -> None:  # type: ignore[no-untyped-def]
    settings.DEBUG = False

    response = korean_client.get("/no-such-page/")

    assert response.status_code == 404
    text = response.content.decode()
    assert "<strong>찾을 수 없음.</strong>" in text
    assert "개요로 돌아가기" in text


def test_the_preferences_page_in_korean_names_zones_as_the_tz_database_does(
    korean_client: Client,
) -> None:
    text = korean_client.get("/preferences/").content.decode()

    assert '<label for="id_language">언어</label>' in text
    assert '<label for="id_time_zone">시간대</label>' in text
    assert '<option value="">브라우저 언어</option>' in text
    assert '<option value="Asia/Seoul">Asia/Seoul</option>' in text
    assert '<option value="ko" selected>한국어</option>' in text
    assert ">저장</button>" in text
