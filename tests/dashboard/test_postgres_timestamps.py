"""Timestamps read from PostgreSQL through psycopg's C loader are Django's datetimes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from psycopg.pq import Format
from psycopg.types.datetime import TimestamptzLoader

from dashboard.postgres import FAST_LOADER, TIMESTAMPTZ_OID, CParsedTzLoader
from leases.models import Lease
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db


def test_timestamps_read_back_exact_and_aware_in_utc(postgres_database: None) -> None:
    moment = datetime(2026, 11, 29, 8, 0, 0, 123_456, tzinfo=UTC)
    seoul = moment.astimezone(ZoneInfo("Asia/Seoul"))

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT %s::timestamptz, %s::timestamptz, NULL::timestamptz", [moment, seoul]
        )
        utc_value, seoul_value, missing = cursor.fetchone()

    assert utc_value == moment and seoul_value == moment and missing is None
    assert utc_value.tzinfo is connection.timezone and seoul_value.tzinfo is connection.timezone
    if FAST_LOADER is not TimestamptzLoader:  # psycopg's binary package is installed
        loader = connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
        assert issubclass(loader, CParsedTzLoader)


def test_model_timestamps_read_back_as_written(postgres_database: None) -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", renewed_ago=1.5)

    (renewed,) = Lease.objects.filter(pk=lease.pk).values_list("renew_time", flat=True)

    assert renewed == NOW - timedelta(seconds=1.5)
    assert renewed.utcoffset() == timedelta(0)
