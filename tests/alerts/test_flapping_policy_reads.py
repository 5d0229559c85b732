"""The Leases table reads the flapping policy inside its clusters' statement: no round trip
of its own, and never kept between requests, so an admin's change shows on the next refresh
however it was written (admin form, `.update()`, another process)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.utils import timezone

from alerts.models import AlertRule, Rule
from dashboard.flapping import FlapPolicy
from leases.presenters.lease_table import lease_table
from leases.queries import LeaseFilters
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db


def set_rule(threshold: int | None, window_seconds: int | None) -> None:
    AlertRule.objects.filter(rule=Rule.LEASE_FLAPPING).update(
        threshold=threshold, window_seconds=window_seconds
    )


def test_the_table_reads_clusters_policy_and_rows_in_two_statements(
    django_assert_num_queries: object,
) -> None:
    cluster = make_cluster("prod")
    make_lease(cluster, "one", namespace="ops", holder="pod-a")
    with django_assert_num_queries(2):  # type: ignore[operator]
        table = lease_table(LeaseFilters(), timezone.now())
    assert [row.name for row in table.rows] == ["one"]
    assert [status.name for status in table.clusters] == ["prod"]


def test_an_admin_change_by_update_shows_on_the_next_table() -> None:
    make_cluster("prod")
    set_rule(None, None)
    assert lease_table(LeaseFilters(), timezone.now()).flap_changes == settings.ALERT_FLAP_CHANGES

    set_rule(7, 120)
    table = lease_table(LeaseFilters(), timezone.now())
    assert (table.flap_changes, table.flap_window) == (7, "2 min")

    AlertRule.objects.filter(rule=Rule.LEASE_FLAPPING).delete()
    table = lease_table(LeaseFilters(), timezone.now())
    assert table.flap_changes == FlapPolicy.configured().changes


def test_without_clusters_the_table_still_has_the_admin_policy() -> None:
    set_rule(4, 300)
    table = lease_table(LeaseFilters(), timezone.now())
    assert table.clusters == [] and table.rows == []
    assert table.flap_changes == 4
    assert table.flap_window == "5 min"


def test_several_clusters_keep_their_order_and_share_the_policy() -> None:
    set_rule(6, None)
    for name in ("zeta", "alpha", "mid"):
        make_cluster(name)
    table = lease_table(LeaseFilters(), timezone.now())
    assert [status.name for status in table.clusters] == ["alpha", "mid", "zeta"]
    assert table.flap_changes == 6
