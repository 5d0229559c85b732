"""The rows of a fleet, bulk-loaded the way the benchmarks of issue 22 need them.

Each benchmark decides its own fleet's shape (which lease is an election, which one expired,
how much history); these build the rows as the watcher and the pollers would have written
them, so that every benchmark's data agrees on what a stored Lease, Node, holder change or
NKS cluster looks like. Run inside a process with Django set up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol


class Uniform(Protocol):
    """A random.Random, or the random module itself."""

    def uniform(self, a: float, b: float) -> float: ...


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)


def vacuum_analyze() -> None:
    """As autovacuum leaves tables after a bulk load: statistics, and a visibility map that
    lets index-only scans read the index alone."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def lease_rows_read() -> int:
    """Rows of the lease table this backend has read in its open transaction (sequential
    reads plus index fetches): PostgreSQL's own count, no other backend's reads in it."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = 'leases_lease'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def current_clusters(
    names: Sequence[str],
    now: datetime,
    current_until: datetime,
    observed_since: datetime,
    coverage: bool = True,
    **fields: Any,
) -> list[Any]:
    """Connected clusters whose data is proved current until `current_until` (nothing
    watches them: a moment ahead keeps them current for a whole run), watched since
    `observed_since` (with their WatchCoverage when `coverage`)."""
    from leases.models import KubeCluster, WatchCoverage

    clusters = KubeCluster.objects.bulk_create(
        KubeCluster(
            name=name,
            connected=True,
            connected_since=fields.pop("connected_since", observed_since),
            last_event_at=fields.pop("last_event_at", current_until),
            last_flush_at=current_until,
            leases_as_of=current_until,
            nodes_as_of=current_until,
            leases_observed_since=observed_since,
            nodes_observed_since=observed_since,
            resource_version="1",
            **fields,
        )
        for name in names
    )
    if coverage:
        WatchCoverage.objects.bulk_create(
            WatchCoverage(cluster=cluster, started_at=observed_since, last_seen_at=current_until)
            for cluster in clusters
        )
    return clusters


def lease_row(
    cluster: Any,
    namespace: str,
    name: str,
    *,
    uid: str,
    holder: str,
    renewed: datetime,
    duration: int,
    resource_version: str,
    acquire_time: datetime | None = None,
    lease_transitions: int | None = None,
    created_at: datetime | None = None,
    identity: str | None = None,
    token: str = "",
    library: str = "",
    group_name: str = "",
    group_slot: int | None = None,
) -> Any:
    """A Lease as the ingest stores it (its class, natural-sort key, expiry), unsaved."""
    from dashboard.natural import natural_key
    from leases.classify import classify_lease
    from leases.models import Lease, LeaseLibrary

    return Lease(
        cluster=cluster,
        namespace=namespace,
        name=name,
        uid=uid,
        lease_class=classify_lease(namespace, name, {}),
        holder=holder,
        identity=holder if identity is None else identity,
        token=token,
        acquire_time=acquire_time,
        renew_time=renewed,
        lease_duration_seconds=duration,
        expires_at=renewed + timedelta(seconds=duration),
        lease_transitions=lease_transitions,
        resource_version=resource_version,
        created_at=created_at,
        observed_at=renewed,
        name_key=natural_key(name),
        library=library or (LeaseLibrary.LEADER_K8S if group_name else LeaseLibrary.PLAIN),
        group_name=group_name,
        group_slot=group_slot,
    )


def store_leases(leases: list[Any], batch_size: int = 5_000) -> list[Any]:
    """bulk_create, and each lease's expiry schedule (LeaseDeadline) as the ingest writes
    it in the same statement: bulk_create skips Lease.save, and problems first, the overview
    and the evaluation read the schedule."""
    from leases.models import Lease, schedule_expiry

    created = Lease.objects.bulk_create(leases, batch_size=batch_size)
    schedule_expiry(created)
    return created


def node_row(
    cluster: Any,
    name: str,
    *,
    provider_id: str,
    nodegroup: str,
    ready: bool,
    observed_at: datetime,
    **fields: Any,
) -> Any:
    """A Node as the Node reader stores it, in a Magnum nodegroup, unsaved."""
    from leases.models import ConditionStatus, Node

    return Node(
        cluster=cluster,
        name=name,
        provider_id=provider_id,
        ready=ConditionStatus.TRUE if ready else ConditionStatus.FALSE,
        nodegroup_label=nodegroup,
        labels={"magnum.openstack.org/nodegroup": nodegroup},
        observed_at=observed_at,
        **fields,
    )


def flapping(
    lease_ids: Iterable[int],
    now: datetime,
    rng: Uniform,
    changes: int = 3,
    holders: tuple[str, str] = ("x", "y"),
) -> list[Any]:
    """`changes` holder changes of each lease within the last five minutes: it flaps."""
    from leases.models import LeaseTransition

    first, second = holders
    return [
        LeaseTransition(
            lease_id=lease_id,
            from_holder=second if index % 2 else first,
            to_holder=first if index % 2 else second,
            observed_at=now - timedelta(seconds=rng.uniform(0, 300)),
        )
        for lease_id in lease_ids
        for index in range(changes)
    ]


def tenure(
    lease_id: int,
    holder: str,
    started_at: datetime,
    ended_at: datetime | None,
    previous: str = "",
    lease_transitions: int | None = None,
) -> tuple[Any, Any]:
    """One holder's tenure: its span, and the holder change that began it."""
    from leases.models import LeaseHolderSpan, LeaseTransition

    return (
        LeaseHolderSpan(
            lease_id=lease_id,
            holder=holder,
            identity=holder,
            started_at=started_at,
            ended_at=ended_at,
        ),
        LeaseTransition(
            lease_id=lease_id,
            from_holder=previous,
            to_holder=holder,
            observed_at=started_at,
            lease_transitions=lease_transitions,
        ),
    )


def store_history(spans: list[Any], transitions: list[Any], batch_size: int = 5_000) -> None:
    from leases.models import LeaseHolderSpan, LeaseTransition

    LeaseHolderSpan.objects.bulk_create(spans, batch_size=batch_size)
    LeaseTransition.objects.bulk_create(transitions, batch_size=batch_size)


def nks_account(now: datetime, name: str = "fleet") -> Any:
    """An NKS account polled just now."""
    from nks.models import NksAccount

    return NksAccount.objects.create(
        name=name,
        api_url="https://kr1-api-kubernetes-infrastructure.nhncloudservice.com",
        token=f"{name}-bench-nks-token",
        last_poll_at=now,
        last_success_at=now,
        next_poll_at=now + timedelta(hours=1),
    )


def nks_cluster_row(
    account: Any, kube: Any, uuid: str, nodes: int, ready: int, now: datetime, **fields: Any
) -> Any:
    """The NKS cluster of Kubernetes cluster `kube`, polled now, unsaved."""
    from nks.enums import Freshness
    from nks.models import Health, NksCluster

    return NksCluster(
        account=account,
        uuid=uuid,
        name=kube.name,
        status="CREATE_COMPLETE",
        health_status=Freshness.FRESH,
        freshness=Freshness.FRESH,
        health=Health.HEALTHY if ready == nodes else Health.DEGRADED,
        health_timestamp=now,
        api_ok=True,
        node_count=nodes,
        nodes_ready=ready,
        nodes_not_ready=nodes - ready,
        polled_at=now,
        refreshed_at=now,
        kube_cluster=kube,
        **fields,
    )


def nodegroup_row(
    cluster: Any, uuid: str, name: str, nodes: int, now: datetime, **fields: Any
) -> Any:
    """A worker nodegroup of NKS cluster `cluster`, every node ready, unsaved."""
    from nks.models import NksNodegroup

    return NksNodegroup(
        cluster=cluster,
        uuid=uuid,
        name=name,
        role="worker",
        status="UPDATE_COMPLETE",
        node_count=nodes,
        ready=nodes,
        not_ready=0,
        polled_at=now,
        **fields,
    )


def lease_incident(
    cluster: str,
    namespace: str,
    name: str,
    since: datetime,
    resolved_at: datetime | None,
    key_suffix: str = "",
    **fields: Any,
) -> Any:
    """A lease_expired incident, firing or (with `resolved_at`) resolved, unsaved."""
    from alerts.models import Incident, IncidentState, Rule, Severity

    return Incident(
        rule=Rule.LEASE_EXPIRED,
        key=f"{Rule.LEASE_EXPIRED}:{cluster}/{namespace}/{name}{key_suffix}",
        state=IncidentState.FIRING if resolved_at is None else IncidentState.RESOLVED,
        severity=Severity.WARNING,
        cluster=cluster,
        title=f"Lease {namespace}/{name} expired",
        since=since,
        resolved_at=resolved_at,
        **fields,
    )
