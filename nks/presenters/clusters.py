"""The clusters page: one row per cluster, the worst first, and what is wrong with polling."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext

from dashboard.natural import natural_key
from dashboard.timefmt import When, format_duration, iso_js, when
from nks import queries
from nks.enums import Freshness, OperationPhase
from nks.models import HEALTH_RANK, Health, NksAccount, NksCluster, stale_after
from nks.presenters.common import (
    Banner,
    ReadyBar,
    account_banners,
    age_text,
    length_text,
    ready_bar,
)


@dataclass(slots=True)
class ClusterRow:
    id: int
    uuid: str
    url: str
    name: str
    account: str
    status: str
    phase: OperationPhase
    health: Health  # the dashboard's verdict: unknown when its own data is stale
    health_note: str
    health_status: str
    freshness: Freshness
    health_timestamp: When | None
    api_status: str
    # NKS's raw api_status; when it sent none, api_ok (from its `api` field) says how it is.
    api_reported: str
    api_ok: bool | None
    node_status: str
    nodes_text: str
    ready: ReadyBar
    kube_version: str
    polled: When | None
    stale: bool
    gone: bool
    last_error: str
    rank: tuple[Any, ...] = field(default=(), repr=False)


def _health_note(cluster: NksCluster, effective: Health, now: datetime) -> str:
    if cluster.gone_at is not None:
        return gettext("gone from NKS %(age)s") % {"age": age_text(cluster.gone_at, now)}
    if effective != cluster.health:
        if cluster.polled_at is None:
            return gettext("the dashboard has no poll of it")
        return gettext("the dashboard's data is %(length)s old") % {
            "length": length_text(cluster.polled_at, now)
        }
    if effective == Health.UNKNOWN:
        if cluster.freshness != Freshness.FRESH:
            # health_status is NKS's own word (FRESH, STALE, ROTTEN, ...): shown as sent.
            shown = cluster.health_status or gettext("missing")
            return gettext("NKS health data is %(health_status)s, so it cannot be trusted") % {
                "health_status": shown
            }
        if cluster.health_problem:
            return cluster.health_problem
        return gettext("NKS did not say whether the API and nodes are fine")
    return ""


def _nodes_text(cluster: NksCluster) -> str:
    total = cluster.node_count
    if cluster.nodes_ready is not None:
        return f"{cluster.nodes_ready}/{total if total is not None else '?'}"
    return f"?/{total}" if total is not None else gettext("unknown")


def cluster_row(cluster: NksCluster, now: datetime) -> ClusterRow:
    effective = cluster.effective_health(now)
    gone = cluster.gone_at is not None
    phase = OperationPhase.classify(cluster.status)
    return ClusterRow(
        id=cluster.pk,
        uuid=cluster.uuid,
        url=reverse("nks:cluster", args=[cluster.uuid]),
        name=cluster.name,
        account=cluster.account.name,
        status=cluster.status or gettext("unknown"),
        phase=phase,
        health=effective,
        health_note=_health_note(cluster, effective, now),
        health_status=cluster.health_status or gettext("missing"),
        freshness=Freshness(cluster.freshness),
        health_timestamp=when(cluster.health_timestamp, now),
        api_status=cluster.api_status or cluster.api or gettext("unknown"),
        api_reported=cluster.api_status,
        api_ok=cluster.api_ok,
        node_status=cluster.node_status or gettext("unknown"),
        nodes_text=_nodes_text(cluster),
        ready=ready_bar(cluster.nodes_ready, cluster.nodes_not_ready),
        kube_version=cluster.kube_version or "—",
        polled=when(cluster.polled_at, now),
        stale=cluster.is_stale(now),
        gone=gone,
        last_error=cluster.last_error,
        # Present clusters first, the worst verdict first, a failed operation first.
        rank=(
            gone,
            HEALTH_RANK[effective],
            0 if phase == OperationPhase.FAILED else 1,
            natural_key(cluster.name.lower()),
        ),
    )


@dataclass(slots=True)
class ClustersPage:
    accounts: list[NksAccount]
    banners: list[Banner]
    rows: list[ClusterRow]
    counts: dict[Health, int]  # of clusters still listed by NKS, worst verdict first
    server_now: str
    stale_after: str


def clusters_page(now: datetime, *, include_gone: bool = True) -> ClustersPage:
    accounts = queries.accounts()
    clusters = queries.listed_clusters(include_gone=include_gone)
    rows = sorted((cluster_row(cluster, now) for cluster in clusters), key=lambda row: row.rank)
    counts = dict.fromkeys(HEALTH_RANK, 0)
    for row in rows:
        if not row.gone:
            counts[row.health] += 1
    return ClustersPage(
        accounts=accounts,
        banners=account_banners(accounts, now),
        rows=rows,
        counts=counts,
        server_now=iso_js(now),
        stale_after=format_duration(stale_after().total_seconds()),
    )


def poll_interval_text() -> str:
    return format_duration(settings.NKS_POLL_SECONDS)
