"""Storing one NKS poll's snapshot in a few bulk statements.

* clusters and nodegroups upserted by uuid (one INSERT ... ON CONFLICT each); those NKS no
  longer lists get ``gone_at``, never deleted; a cluster listed then 404 is gone too;
* one HealthSample per listed cluster;
* events upserted by uuid, only the new or changed ones;
* failures on their rows: a cluster's when one of its calls failed (the parts that did arrive
  are stored, the rest keeps its last good value).

The writes are upserts keyed by NKS's uuids, so storing the same snapshot twice is harmless.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from nks import client as nks
from nks.health import ClusterHealth, cluster_health
from nks.models import (
    HealthSample,
    NksAccount,
    NksCluster,
    NksEvent,
    NksNodegroup,
)

# Chunk size of `uuid IN (...)` lookups: SQLite allows 32k variables, PostgreSQL 65k.
LOOKUP_CHUNK = 2000

CLUSTER_UPDATE_FIELDS = (
    "name",
    "status",
    "status_reason",
    "health_status",
    "freshness",
    "health",
    "health_timestamp",
    "api",
    "api_status",
    "api_ok",
    "node_status",
    "health_problem",
    "node_count",
    "nodes_ready",
    "nodes_not_ready",
    "node_readiness",
    "kube_version",
    "kube_version_status",
    "platform_version",
    "availability_zone",
    "api_address",
    "node_addresses",
    "nks_created_at",
    "nks_updated_at",
    "polled_at",
    "refreshed_at",
    "gone_at",
    "last_error",
    "last_error_kind",
    "last_error_at",
)
NODEGROUP_UPDATE_FIELDS = (
    "name",
    "role",
    "is_default",
    "status",
    "status_reason",
    "node_count",
    "min_node_count",
    "max_node_count",
    "autoscaler_enabled",
    "autoscaler_min",
    "autoscaler_max",
    "ready",
    "not_ready",
    "node_status",
    "kube_version",
    "flavor_id",
    "image_id",
    "node_addresses",
    "nks_created_at",
    "nks_updated_at",
    "polled_at",
    "detail_fetched_at",
    "gone_at",
)
EVENT_UPDATE_FIELDS = (
    "nodegroup",
    "resource_uuid",
    "resource_name",
    "resource_type",
    "type",
    "raw_state",
    "state",
    "contents",
    "nks_created_at",
    "nks_updated_at",
)


@dataclass(slots=True)
class StoreSummary:
    clusters: int = 0
    gone: int = 0
    nodegroups: int = 0
    events_written: int = 0
    samples: int = 0
    cluster_errors: int = 0
    skipped: list[str] = field(default_factory=list)


def _text(value: str | None, limit: int | None = None) -> str:
    text = value or ""
    return text[:limit] if limit else text


def _error_fields(error: nks.NksError | None, now: datetime) -> dict[str, Any]:
    if error is None:
        return {"last_error": "", "last_error_kind": "", "last_error_at": None}
    return {"last_error": error.message, "last_error_kind": error.kind.value, "last_error_at": now}


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), LOOKUP_CHUNK):
        yield items[start : start + LOOKUP_CHUNK]


def _cluster_row(
    account: NksAccount,
    snapshot: nks.ClusterSnapshot,
    health: ClusterHealth,
    previous: NksCluster | None,
    now: datetime,
) -> NksCluster:
    cluster = snapshot.cluster
    report = health.report
    detailed = cluster.detailed

    def detail(value: Any, old: str) -> Any:
        # List answers lack these fields: keep the last detail's value instead of blanking it.
        if detailed:
            return value
        return getattr(previous, old) if previous is not None else value

    error = None if snapshot.gone else snapshot.error
    return NksCluster(
        account=account,
        uuid=cluster.uuid,
        name=_text(cluster.name, 255),
        status=_text(cluster.status, 64),
        status_reason=_text(cluster.status_reason),
        health_status=_text(report.health_status, 64),
        freshness=report.freshness,
        health=health.health,
        health_timestamp=report.timestamp,
        api=_text(report.api, 32),
        api_status=_text(report.api_status, 64),
        api_ok=report.api_ok,
        node_status=_text(report.node_status, 64),
        health_problem=_text(report.problem),
        node_count=cluster.node_count,
        nodes_ready=health.ready,
        nodes_not_ready=health.not_ready,
        node_readiness=dict(report.nodes_ready),
        kube_version=_text(cluster.kube_tag, 64),
        kube_version_status=detail(_text(cluster.kube_version_status, 64), "kube_version_status"),
        platform_version=detail(_text(cluster.platform_version, 64), "platform_version"),
        availability_zone=_text(cluster.availability_zone, 64),
        api_address=detail(_text(cluster.api_address, 300), "api_address"),
        node_addresses=detail(list(cluster.node_addresses), "node_addresses"),
        nks_created_at=detail(cluster.created_at, "nks_created_at"),
        nks_updated_at=detail(cluster.updated_at, "nks_updated_at"),
        first_seen_at=now,
        polled_at=now,
        refreshed_at=now if snapshot.complete else (previous.refreshed_at if previous else None),
        gone_at=now if snapshot.gone else None,
        **_error_fields(error, now),
    )


def _nodegroup_row(
    cluster_id: int,
    group: nks.Nodegroup,
    health: ClusterHealth | None,
    previous: NksNodegroup | None,
    now: datetime,
) -> NksNodegroup:
    detailed = group.detailed

    def detail(value: Any, old: str) -> Any:
        if detailed:
            return value
        return getattr(previous, old) if previous is not None else value

    if health is not None:
        ready, not_ready, node_status = health.groups.get(group.name, (None, None, ""))
    else:
        # A follow-up read of one nodegroup carries no health report: keep the last one.
        ready = previous.ready if previous else None
        not_ready = previous.not_ready if previous else None
        node_status = previous.node_status if previous else ""
    return NksNodegroup(
        cluster_id=cluster_id,
        uuid=group.uuid,
        name=_text(group.name, 255),
        role=_text(group.role, 32),
        is_default=group.is_default,
        status=_text(group.status, 64),
        status_reason=detail(_text(group.status_reason), "status_reason"),
        node_count=group.node_count,
        min_node_count=group.min_node_count,
        max_node_count=group.max_node_count,
        autoscaler_enabled=detail(group.autoscale.enabled, "autoscaler_enabled"),
        autoscaler_min=detail(group.autoscale.min_node_count, "autoscaler_min"),
        autoscaler_max=detail(group.autoscale.max_node_count, "autoscaler_max"),
        ready=ready,
        not_ready=not_ready,
        node_status=_text(node_status, 64),
        kube_version=detail(_text(group.kube_tag, 64), "kube_version"),
        flavor_id=_text(group.flavor_id, 64),
        image_id=_text(group.image_id, 64),
        node_addresses=detail(list(group.node_addresses), "node_addresses"),
        nks_created_at=detail(group.created_at, "nks_created_at"),
        nks_updated_at=detail(group.updated_at, "nks_updated_at"),
        first_seen_at=now,
        polled_at=now,
        detail_fetched_at=now if detailed else (previous.detail_fetched_at if previous else None),
        gone_at=None,
    )


def upsert_nodegroups(
    groups: Sequence[tuple[int, nks.Nodegroup, ClusterHealth | None]], now: datetime
) -> dict[tuple[int, str], int]:
    """Insert or update nodegroups; returns (cluster id, uuid) -> row id for each."""
    if not groups:
        return {}
    cluster_ids = {cluster_id for cluster_id, _, _ in groups}
    previous = {
        (row.cluster_id, row.uuid): row
        for row in NksNodegroup.objects.filter(cluster_id__in=cluster_ids)
    }
    rows = [
        _nodegroup_row(cluster_id, group, health, previous.get((cluster_id, group.uuid)), now)
        for cluster_id, group, health in groups
    ]
    NksNodegroup.objects.bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["cluster", "uuid"],
        update_fields=list(NODEGROUP_UPDATE_FIELDS),
    )
    return {
        (cluster_id, uuid): pk
        for pk, cluster_id, uuid in NksNodegroup.objects.filter(
            cluster_id__in=cluster_ids
        ).values_list("pk", "cluster_id", "uuid")
    }


def upsert_events(
    events: Sequence[tuple[int, nks.ClusterEvent]],
    nodegroup_ids: dict[tuple[int, str], int],
    now: datetime,
) -> int:
    """Insert new events and update changed ones (by uuid); returns how many were written."""
    if not events:
        return 0
    uuids = [event.uuid for _, event in events]
    known: dict[str, tuple[Any, ...]] = {}
    for chunk in _chunks(uuids):
        for row in NksEvent.objects.filter(uuid__in=chunk).values_list(
            "uuid", "raw_state", "contents", "nks_updated_at", "nodegroup_id"
        ):
            known[row[0]] = row[1:]
    rows = []
    seen: set[str] = set()
    for cluster_id, event in events:
        if event.uuid in seen:
            continue
        seen.add(event.uuid)
        nodegroup_id = (
            nodegroup_ids.get((cluster_id, event.resource_uuid)) if event.resource_uuid else None
        )
        signature = (
            _text(event.raw_state, 32),
            _text(event.contents),
            event.updated_at,
            nodegroup_id,
        )
        if known.get(event.uuid) == signature:
            continue
        rows.append(
            NksEvent(
                cluster_id=cluster_id,
                uuid=event.uuid,
                nodegroup_id=nodegroup_id,
                resource_uuid=_text(event.resource_uuid, 64),
                resource_name=_text(event.resource_name, 255),
                resource_type=_text(event.resource_type, 32),
                type=_text(event.type, 64),
                raw_state=_text(event.raw_state, 32),
                state=event.state,
                contents=_text(event.contents),
                nks_created_at=event.created_at,
                nks_updated_at=event.updated_at,
                first_seen_at=now,
            )
        )
    if rows:
        NksEvent.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["uuid"],
            update_fields=list(EVENT_UPDATE_FIELDS),
        )
    return len(rows)


@transaction.atomic
def store_snapshot(
    account: NksAccount, snapshot: nks.AccountSnapshot, now: datetime
) -> StoreSummary:
    """Write one poll's snapshot of the account (see the module docstring)."""
    summary = StoreSummary()
    listed = [item.cluster.uuid for item in snapshot.clusters]
    previous: dict[str, NksCluster] = {}
    for chunk in _chunks(listed):
        previous.update({row.uuid: row for row in NksCluster.objects.filter(uuid__in=chunk)})

    keep: list[tuple[nks.ClusterSnapshot, ClusterHealth]] = []
    rows: list[NksCluster] = []
    for item in snapshot.clusters:
        old = previous.get(item.cluster.uuid)
        if old is not None and old.account_id != account.pk:
            # The same cluster seen through a second account stays with the first one.
            summary.skipped.append(item.cluster.name)
            continue
        workers = (
            [group.name for group in item.nodegroups if group.is_worker]
            if item.nodegroups is not None
            else None
        )
        health = cluster_health(item.cluster, workers)
        rows.append(_cluster_row(account, item, health, old, now))
        keep.append((item, health))
    if rows:
        NksCluster.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["uuid"],
            update_fields=list(CLUSTER_UPDATE_FIELDS),
        )
    ids = dict(NksCluster.objects.filter(account=account).values_list("uuid", "pk"))

    # Clusters NKS no longer lists: gone, kept with their last data.
    summary.gone = (
        NksCluster.objects.filter(account=account, gone_at__isnull=True)
        .exclude(uuid__in=[row.uuid for row in rows])
        .update(gone_at=now)
    )

    groups: list[tuple[int, nks.Nodegroup, ClusterHealth | None]] = []
    listed_groups: dict[int, set[str]] = {}
    events: list[tuple[int, nks.ClusterEvent]] = []
    samples: list[HealthSample] = []
    for item, health in keep:
        cluster_id = ids[item.cluster.uuid]
        summary.clusters += 1
        if item.gone:
            summary.gone += 1
            continue
        if item.error is not None:
            summary.cluster_errors += 1
        if item.nodegroups is not None:
            listed_groups[cluster_id] = {group.uuid for group in item.nodegroups}
            groups.extend((cluster_id, group, health) for group in item.nodegroups)
        events.extend((cluster_id, event) for event in item.events or ())
        report = health.report
        samples.append(
            HealthSample(
                cluster_id=cluster_id,
                taken_at=now,
                health=health.health,
                health_status=_text(report.health_status, 64),
                freshness=report.freshness,
                health_timestamp=report.timestamp,
                api_status=_text(report.api_status, 64),
                node_status=_text(report.node_status, 64),
                status=_text(item.cluster.status, 64),
                nodes_ready=health.ready,
                nodes_not_ready=health.not_ready,
                nodegroups={
                    name: {"ready": ready, "not_ready": not_ready, "node_status": status}
                    for name, (ready, not_ready, status) in sorted(health.groups.items())
                },
            )
        )

    nodegroup_ids = upsert_nodegroups(groups, now)
    summary.nodegroups = len(groups)
    # Nodegroups missing from a list that did arrive are gone; a failed list proves nothing.
    vanished = [
        pk
        for (cluster_id, uuid), pk in nodegroup_ids.items()
        if cluster_id in listed_groups and uuid not in listed_groups[cluster_id]
    ]
    if vanished:
        NksNodegroup.objects.filter(pk__in=vanished, gone_at__isnull=True).update(gone_at=now)
    summary.events_written = upsert_events(events, nodegroup_ids, now)
    HealthSample.objects.bulk_create(samples)
    summary.samples = len(samples)
    return summary
