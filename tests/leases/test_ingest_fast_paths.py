"""The watcher's cheap per-batch writes: renewals sent as column lists, and the flush
status written by SQL compiled once. Each must leave exactly what the ORM path leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db.models import F

from leases.ingest import LeaseIngestor
from leases.models import KubeCluster, Lease
from leases.parse import lease_identity, lease_state, parse_lease, renewal_times
from leases.watch_status import Added, update_cluster, write_flush_status
from tests.leases.factories import make_cluster

pytestmark = pytest.mark.django_db

STATUS_COLUMNS = [
    "events_total",
    "skipped_objects_total",
    "last_flush_at",
    "last_event_at",
    "resource_version",
    "lag_seconds",
    "events_per_second",
    "nodes_events_total",
    "nodes_resource_version",
]


def node_lease(index: int, version: int, renew_second: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "kube-node-lease",
            "name": f"node-{index:04d}",
            "uid": f"uid-{index}",
            "resourceVersion": str(version),
        },
        "spec": {
            "holderIdentity": f"node-{index:04d}",
            # Several durations in one batch: each row's expiry must be its own.
            "leaseDurationSeconds": 10 + index % 7,
            "renewTime": f"2026-11-29T07:{renew_second // 60:02d}:{renew_second % 60:02d}"
            f".{index:06d}Z",
        },
    }


def test_a_batch_of_renewals_lands_each_on_its_own_row() -> None:
    cluster = make_cluster("renewals")
    ingestor = LeaseIngestor(cluster.id)
    count = 300
    for index in range(count):
        ingestor.observe(node_lease(index, 1000 + index, 0))
    assert ingestor.flush().leases_renewed == 0
    # Renewed in an order unlike the rows' ids, each with its own time and version.
    sent = {}
    for index in reversed(range(count)):
        obj = node_lease(index, 5000 + index * 3, 100 + index)
        sent[obj["metadata"]["name"]] = parse_lease(obj)
        ingestor.observe(obj)
    result = ingestor.flush()
    assert result.leases_renewed == count
    assert result.leases_written == count
    for row in Lease.objects.filter(cluster=cluster):
        expected = sent[row.name]
        assert expected is not None
        assert row.renew_time == expected.renew_time
        assert row.expires_at == expected.expires_at
        assert row.resource_version == expected.resource_version


def test_a_renewal_of_a_row_removed_meanwhile_is_written_in_full() -> None:
    cluster = make_cluster("removed")
    ingestor = LeaseIngestor(cluster.id)
    for index in range(3):
        ingestor.observe(node_lease(index, 10 + index, 0))
    ingestor.flush()
    Lease.objects.filter(cluster=cluster, name="node-0001").delete()
    for index in range(3):
        ingestor.observe(node_lease(index, 20 + index, 5))
    result = ingestor.flush()
    assert (result.leases_written, result.leases_renewed) == (3, 2)
    assert sorted(
        Lease.objects.filter(cluster=cluster).values_list("name", "resource_version")
    ) == [("node-0000", "20"), ("node-0001", "21"), ("node-0002", "22")]
    # Written in full once, the lease is a renewal again.
    for index in range(3):
        ingestor.observe(node_lease(index, 30 + index, 9))
    assert ingestor.flush().leases_renewed == 3


@pytest.mark.parametrize("duration", [40, 40, 0, True, -1, 10**12, "40", None, 2**40])
def test_renewal_times_match_the_full_parse(duration: object) -> None:
    for renew in ("2026-11-29T07:00:00.5Z", "2026-11-29T09:00:00+02:00", "9999-12-31T23:59:59Z"):
        obj = {
            "metadata": {"namespace": "ns", "name": "n"},
            "spec": {"renewTime": renew, "leaseDurationSeconds": duration},
        }
        observation = parse_lease(obj)
        assert observation is not None
        assert renewal_times(obj["spec"], renew) == (
            observation.renew_time,
            observation.expires_at,
        )


def test_lease_state_reads_what_lease_identity_reads() -> None:
    obj = {
        "metadata": {"namespace": "ns", "name": "n\x00x"},
        "spec": {"holderIdentity": "h" * 20_000, "leaseTransitions": 3},
    }
    identity = lease_identity(obj)
    assert identity is not None
    assert lease_state(obj) == (
        identity.key,
        identity.holder,
        identity.lease_transitions,
        identity.spec,
    )
    assert lease_state({"metadata": {"name": "n"}}) is None


def status_row(cluster_id: int) -> dict[str, Any]:
    return KubeCluster.objects.values(*STATUS_COLUMNS).get(pk=cluster_id)


def test_flush_status_sql_writes_what_the_orm_update_writes() -> None:
    compiled = make_cluster("compiled", skipped_objects_total=4, nodes_events_total=9)
    orm = make_cluster("orm", skipped_objects_total=4, nodes_events_total=9)
    now = datetime(2026, 11, 29, 7, 0, 0, 123456, tzinfo=UTC)
    shapes: list[dict[str, Any]] = [
        {
            "events_total": 750,
            "last_flush_at": now,
            "resource_version": "98765",
            "last_event_at": now,
            "lag_seconds": 0.512,
            "nodes_events_total": 3,
            "skipped_objects_total": 2,
        },
        # The same shape again (its SQL reused), then others.
        {"events_total": 1, "last_flush_at": now + timedelta(seconds=1), "lag_seconds": 0.1},
        {"events_total": 1, "last_flush_at": now + timedelta(seconds=1), "lag_seconds": 0.2},
        {"events_total": 0, "events_per_second": 1500.5, "nodes_resource_version": "77"},
    ]
    added = {"events_total", "nodes_events_total", "skipped_objects_total"}
    for updates in shapes:
        write_flush_status(
            compiled.id,
            {name: Added(value) if name in added else value for name, value in updates.items()},
        )
        update_cluster(
            orm.id,
            {name: F(name) + value if name in added else value for name, value in updates.items()},
        )
    assert status_row(compiled.id) == status_row(orm.id)
    assert status_row(compiled.id)["events_total"] == 1000 + 752


def test_flush_status_writes_nothing_for_no_updates() -> None:
    cluster = make_cluster("quiet")
    before = status_row(cluster.id)
    write_flush_status(cluster.id, {})
    assert status_row(cluster.id) == before
