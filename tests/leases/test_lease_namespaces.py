"""The namespace suggestions of the Leases page: every namespace with a live lease, once,
in the database's order, read by a skip scan of the namespace index."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leases.models import Lease
from leases.queries import namespaces
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db


def test_every_namespace_with_a_live_lease_once_in_order() -> None:
    assert namespaces() == []
    alpha, beta = make_cluster("alpha"), make_cluster("beta")
    for cluster in (alpha, beta):
        for namespace in ("kube-system", "apps", "team-10", "team-2"):
            for index in range(3):
                make_lease(cluster, f"lease-{index}", namespace=namespace)
    make_lease(alpha, "gone", namespace="only-deleted", deleted_at=NOW - timedelta(minutes=1))
    expected = list(
        Lease.objects.live().order_by("namespace").values_list("namespace", flat=True).distinct()
    )
    assert namespaces() == expected
    assert len(expected) == 4 and "only-deleted" not in expected
