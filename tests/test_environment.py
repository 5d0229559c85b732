from __future__ import annotations

import pytest
from django.conf import settings

from tests.conftest import is_required


def test_services_are_configured_when_required() -> None:
    """With REQUIRE_SERVICES=1 the run must really be on PostgreSQL and Redis."""
    if not is_required("REQUIRE_SERVICES"):
        pytest.skip("REQUIRE_SERVICES is not set: the embedded default is being tested")
    assert settings.DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    assert settings.REDIS_URL, "REDIS_URL must be set"
    assert settings.CELERY_BROKER_URL.startswith("redis")
