"""Management command output meant for people follows the active language (LANGUAGE_CODE)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.core.management import CommandError, call_command
from django.utils import translation

pytestmark = pytest.mark.django_db


def test_create_api_token_refuses_in_korean() -> None:
    with translation.override("ko"), pytest.raises(CommandError) as refused:
        call_command("create_api_token", "ghost")

    assert str(refused.value) == "'ghost' 사용자가 없습니다."


def test_create_api_token_explains_a_refused_write_token_in_korean(
    engineer: AbstractBaseUser,
) -> None:
    with translation.override("ko"), pytest.raises(CommandError) as refused:
        call_command("create_api_token", "erin", "--scope", "write")

    assert str(refused.value).startswith("'erin' 사용자는 운영자(operators 그룹")
    assert "먼저 사용자를 operators 그룹에 추가하거나 읽기 토큰을 발급하세요." in str(refused.value)


def test_create_api_token_prints_the_token_alone_on_stdout_in_any_language(
    engineer: AbstractBaseUser,
) -> None:
    out, err = StringIO(), StringIO()

    with translation.override("ko"):
        call_command("create_api_token", "erin", stdout=out, stderr=err)

    assert len(out.getvalue().split()) == 1, "scripts capture the token from stdout"
    assert err.getvalue().startswith("범위: read. 이 토큰은 다시 표시되지 않으니")


def test_rotate_secrets_reports_in_english_by_default() -> None:
    out = StringIO()

    call_command("rotate_secrets", stdout=out)

    assert "Re-encrypted 0 row(s) with the first key." in out.getvalue()
