"""Times in the reader's zone and language: durations, ages, countdowns, the ticking words."""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.test import Client
from django.utils import timezone, translation

from dashboard.models import UserPreference, WorkerHeartbeat
from dashboard.timefmt import (
    expiry_text,
    format_duration,
    js_time_words,
    local_moment_text,
    mail_moment_text,
    relative_text,
    when,
)
from tests.leases.factories import make_cluster, make_lease

MOMENT = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "english", "korean"),
    [(5, "5 s", "5초"), (180, "3 min", "3분"), (7200, "2 h", "2시간"), (4 * 86_400, "4 d", "4일")],
)
def test_durations_in_both_languages(seconds: int, english: str, korean: str) -> None:
    with translation.override("en"):
        assert format_duration(seconds) == english
    with translation.override("ko"):
        assert format_duration(seconds) == korean


def test_ago_and_ahead_in_korean() -> None:
    with translation.override("ko"):
        assert relative_text(5) == "5초 전"
        assert relative_text(-5) == "5초 후"
        assert expiry_text(MOMENT + timedelta(seconds=12), MOMENT) == "12초 후"
        assert expiry_text(MOMENT - timedelta(minutes=5), MOMENT) == "만료된 지 5분"
        assert mail_moment_text(None) == "없음"
    with translation.override("en"):
        assert (relative_text(5), relative_text(-5)) == ("5 s ago", "in 5 s")
        assert mail_moment_text(None) == "never"


def test_moments_follow_the_active_zone_not_the_setting(settings) -> None:  # type: ignore[no-untyped-def]
    settings.TIME_ZONE = "UTC"

    with timezone.override("Asia/Seoul"):
        assert local_moment_text(MOMENT) == "2026-11-29 17:00:00 KST"
        assert mail_moment_text(MOMENT) == "2026-11-29 08:00:00 UTC (2026-11-29 17:00:00 KST)"
        shown = when(MOMENT, MOMENT + timedelta(seconds=30))
        assert shown is not None
        assert shown.local == "2026-11-29 17:00:00 KST"
        assert shown.iso == "2026-11-29T08:00:00Z"
    assert when(MOMENT, MOMENT + timedelta(seconds=30)).local == ""  # type: ignore[union-attr]


def test_the_browser_gets_the_same_patterns_with_markers() -> None:
    with translation.override("ko"):
        words = js_time_words()
    assert words["s"] == "{n}초" and words["min"] == "{n}분"
    assert words["h"] == "{n}시간" and words["d"] == "{n}일"
    assert words["ago"] == "{d} 전" and words["in"] == "{d} 후"
    assert words["expired_for"] == "만료된 지 {d}"
    assert words["tz_question"].count("%(zone)s") == 1
    with translation.override("en"):
        assert js_time_words()["ago"] == "{d} ago"


@pytest.mark.django_db
def test_a_korean_page_hands_dashboard_js_korean_words(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="ko")

    text = engineer_client.get("/preferences/").content.decode()

    raw = text.split('data-time-words="', 1)[1].split('"', 1)[0]
    words = json.loads(html.unescape(raw))
    assert words["s"] == "{n}초"
    assert words["pause"] == "새로 고침 일시 정지"


@pytest.mark.django_db
def test_overview_ages_are_korean_with_the_exact_utc_time_on_hover(
    engineer_client: Client, engineer: AbstractBaseUser
) -> None:
    UserPreference.objects.create(user=engineer, language="ko", time_zone="Asia/Seoul")
    seen = timezone.now() - timedelta(seconds=7)
    WorkerHeartbeat.objects.create(queue="default", worker="celery@w1", seen_at=seen)

    region = engineer_client.get(
        "/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workers"
    ).content.decode()

    assert "<h2>백그라운드 워커</h2>" in region
    time_tag = region.split("<time ", 1)[1].split("</time>", 1)[0]
    assert 'title="' + seen.astimezone(UTC).isoformat().replace("+00:00", "Z") + '"' in time_tag
    assert time_tag.endswith("초 전")
    assert "실행 중" in region


@pytest.mark.django_db
def test_the_shared_table_is_kept_apart_per_language_and_zone(
    engineer: AbstractBaseUser,
    django_user_model,  # type: ignore[no-untyped-def]
    settings,  # type: ignore[no-untyped-def]
) -> None:
    cache.clear()
    settings.LEASE_TABLE_CACHE_SECONDS = 30
    make_lease(make_cluster("shared"), "kube-scheduler", holder="holder-a")
    korean_user = django_user_model.objects.create_user("kim", password="x-pass-123456")
    UserPreference.objects.create(user=korean_user, language="ko", time_zone="Asia/Seoul")
    english, korean = Client(), Client()
    english.force_login(engineer)
    korean.force_login(korean_user)
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}
    url = "/leases/?q=kube-scheduler"

    first_english = english.get(url, **headers)
    first_korean = korean.get(url, **headers)
    again_english = english.get(url, **headers)

    assert first_korean.content != first_english.content
    assert "holder-a" in first_korean.content.decode(), "data stays as written"
    assert again_english.content == first_english.content
    assert "Accept-Language" in first_korean["Vary"]
    cache.clear()
