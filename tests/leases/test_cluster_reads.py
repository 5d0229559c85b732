"""The clusters' compiled-once read: the same instances the ORM builds, kubeconfig unread."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from leases.models import KubeCluster
from leases.presenters.watchers import (
    cluster_statuses,
    clusters_from_rows,
    watched_clusters_sql,
)
from tests.leases.factories import make_cluster

pytestmark = pytest.mark.django_db


def read_rows() -> tuple[list[str], list[tuple[object, ...]]]:
    with connection.cursor() as cursor:
        cursor.execute(watched_clusters_sql())
        return [column[0] for column in cursor.description], cursor.fetchall()


def test_its_columns_are_the_fields_the_rows_are_built_with() -> None:
    make_cluster("prod")
    columns, _ = read_rows()
    expected = [f.column for f in KubeCluster._meta.concrete_fields if f.name != "kubeconfig"]
    assert columns == expected


def test_clusters_from_rows_equal_the_orm_s_and_leave_the_kubeconfig_unread() -> None:
    make_cluster("beta", last_error="boom")
    make_cluster("alpha", fresh=False)
    _, rows = read_rows()
    built = clusters_from_rows(rows)
    orm = list(KubeCluster.objects.defer("kubeconfig").order_by("name"))
    assert [c.name for c in built] == ["alpha", "beta"]
    for mine, theirs in zip(built, orm, strict=True):
        assert "kubeconfig" in mine.get_deferred_fields()
        for field in KubeCluster._meta.concrete_fields:
            if field.name != "kubeconfig":
                assert getattr(mine, field.attname) == getattr(theirs, field.attname), field.name
        assert mine.last_flush_at is None or mine.last_flush_at.tzinfo is not None


def test_cluster_statuses_read_in_one_query(django_assert_num_queries: object) -> None:
    make_cluster("prod")
    with django_assert_num_queries(1):  # type: ignore[operator]
        statuses = cluster_statuses(timezone.now())
    assert [status.name for status in statuses] == ["prod"]
