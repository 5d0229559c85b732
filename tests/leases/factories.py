"""Rows for page, API and selector tests, written straight with the ORM.

Times are relative to a fixed NOW that the tests freeze the clock at, so a lease's state
(held, expired, released) is known without waiting.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from leases.classify import classify_lease
from leases.models import KubeCluster, Lease, LeaseCandidate, LeaseTransition, schedule_expiry

NOW = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)
# Recognisable in any page or response body, so a leak of the kubeconfig is easy to catch.
KUBECONFIG_SECRET = "token: sekret-kubeconfig-do-not-show-4242"

_uids = count(1)


def make_cluster(name: str = "prod", *, fresh: bool = True, **fields: Any) -> KubeCluster:
    """A cluster whose watcher is live (fresh) or has gone quiet a minute ago."""
    defaults: dict[str, Any] = {
        "kubeconfig": f"apiVersion: v1\nusers:\n- user:\n    {KUBECONFIG_SECRET}\n",
        "connected": fresh,
        "connected_since": NOW - timedelta(hours=1),
        "last_event_at": NOW - timedelta(seconds=1 if fresh else 70),
        "last_flush_at": NOW - timedelta(seconds=1 if fresh else 70),
        "last_list_at": NOW - timedelta(hours=1),
        "resource_version": "12345",
        "events_per_second": 42.5,
        "events_total": 1000,
        "reconnects_total": 3,
        "relists_total": 1,
        "lag_seconds": 0.25,
    }
    if not fresh:
        defaults["last_error"] = "connection refused by 10.0.0.1:6443"
        defaults["last_error_at"] = NOW - timedelta(seconds=65)
    defaults.update(fields)
    # The watcher proves its data as it flushes (leases.freshness): a factory cluster's data
    # is known as of its last flush unless a test says otherwise.
    defaults.setdefault("leases_as_of", defaults["last_flush_at"])
    defaults.setdefault("nodes_as_of", defaults["last_flush_at"])
    return KubeCluster.objects.create(name=name, **defaults)


def known_until(cluster: KubeCluster, moment: datetime) -> None:
    """The cluster's watcher has proved its data current up to `moment`, as a live watcher
    does about once a second (leases.freshness)."""
    KubeCluster.objects.filter(pk=cluster.pk).update(
        leases_as_of=moment, nodes_as_of=moment, last_flush_at=moment
    )


def make_lease(
    cluster: KubeCluster,
    name: str,
    *,
    namespace: str = "kube-system",
    holder: str = "holder-a",
    renewed_ago: float = 2.0,
    duration: int | None = 15,
    **fields: Any,
) -> Lease:
    """A lease renewed `renewed_ago` seconds before NOW; it expires `duration` s after that."""
    renew_time = NOW - timedelta(seconds=renewed_ago)
    labels = fields.pop("labels", {})
    values: dict[str, Any] = {
        "uid": f"uid-{next(_uids)}",
        "lease_class": classify_lease(namespace, name, labels),
        "holder": holder,
        "acquire_time": renew_time - timedelta(minutes=5),
        "renew_time": renew_time,
        "lease_duration_seconds": duration,
        "expires_at": renew_time + timedelta(seconds=duration) if duration is not None else None,
        "lease_transitions": 1,
        "labels": labels,
        "resource_version": "100",
        "created_at": NOW - timedelta(days=3),
        "observed_at": renew_time,
    }
    values.update(fields)
    return Lease.objects.create(cluster=cluster, namespace=namespace, name=name, **values)


def make_transition(
    lease: Lease,
    from_holder: str,
    to_holder: str,
    *,
    seconds_ago: float,
    missed: int = 0,
    lease_transitions: int | None = None,
) -> LeaseTransition:
    observed_at = NOW - timedelta(seconds=seconds_ago)
    return LeaseTransition.objects.create(
        lease=lease,
        from_holder=from_holder,
        to_holder=to_holder,
        observed_at=observed_at,
        acquire_time=observed_at,
        lease_transitions=lease_transitions,
        missed=missed,
    )


def make_candidate(
    lease: Lease, name: str, *, renewed_ago: float | None = 5.0, **fields: Any
) -> LeaseCandidate:
    renew_time = NOW - timedelta(seconds=renewed_ago) if renewed_ago is not None else None
    values: dict[str, Any] = {
        "lease_name": lease.name,
        "binary_version": "1.33.1",
        "emulation_version": "1.33",
        "strategy": "OldestEmulationVersion",
        "renew_time": renew_time,
        "ping_time": renew_time,
    }
    values.update(fields)
    return LeaseCandidate.objects.create(
        cluster=lease.cluster, namespace=lease.namespace, name=name, **values
    )


def make_many_leases(
    cluster: KubeCluster, number: int, *, namespace: str = "kube-node-lease"
) -> list[Lease]:
    """`number` node leases named node-0000, node-0001...: enough rows to page through."""
    renew_time = NOW - timedelta(seconds=3)
    leases = [
        Lease(
            cluster=cluster,
            namespace=namespace,
            name=f"node-{index:04d}",
            uid=f"uid-{next(_uids)}",
            lease_class=classify_lease(namespace, f"node-{index:04d}", {}),
            holder=f"node-{index:04d}",
            renew_time=renew_time,
            lease_duration_seconds=40,
            expires_at=renew_time + timedelta(seconds=40),
            observed_at=renew_time,
        )
        for index in range(number)
    ]
    created = Lease.objects.bulk_create(leases)
    # bulk_create skips Lease.save: the expiry schedule is written as the ingest writes it.
    schedule_expiry(created)
    return created
