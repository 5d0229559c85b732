"""What the NKS rules judge and how they name it, shared by `alerts.nks_rules` (which says
how NKS incidents are grouped and when they freeze) and `alerts.nks_node_rules`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils.text import slugify
from django.utils.translation import gettext_noop

from alerts.conditions import Message, RuleContext, fact
from alerts.models import Rule
from nks.models import NksCluster, NksNodegroup


def group_of(cluster: NksCluster) -> str:
    """The name incidents of this NKS cluster are grouped (and inhibited) under."""
    if cluster.kube_cluster_id is not None and cluster.kube_cluster is not None:
        return cluster.kube_cluster.name
    return cluster.name


def also_known_as(cluster: NksCluster) -> set[str]:
    """Names a Lease source for this cluster may have (see nks.services.linked_kube_cluster)."""
    return {group_of(cluster), cluster.name, slugify(cluster.name)[:63]}


def rule_grace(ctx: RuleContext, polls: int | None = None) -> timedelta:
    """The rule's grace: its admin row's, else `polls` NKS poll intervals (by default
    ALERT_NKS_GRACE_POLLS)."""
    if ctx.config.grace_seconds is not None:
        return timedelta(seconds=ctx.config.grace_seconds)
    if polls is None:
        polls = settings.ALERT_NKS_GRACE_POLLS
    return timedelta(seconds=polls * settings.NKS_POLL_SECONDS)


def live_clusters() -> list[NksCluster]:
    """The clusters NKS still lists in enabled accounts, with their account and Lease source."""
    return list(
        NksCluster.objects.live()
        .filter(account__enabled=True)
        .select_related("account", "kube_cluster")
        .defer("kube_cluster__kubeconfig", "account__password", "account__token")
    )


def nks_link() -> str:
    """Where an NKS incident links to: the clusters page."""
    return reverse("nks:index")


def unjudgeable(cluster: NksCluster, now: datetime) -> bool:
    """The dashboard's data about the cluster is too old (or partial) to decide on."""
    return cluster.account.is_stale(now) or cluster.is_stale(now)


def judged_nodegroups(
    rule: Rule, now: datetime, unjudged: set[str], *, workers_only: bool = False
) -> Iterator[tuple[NksNodegroup, str]]:
    """The live nodegroups of enabled accounts' clusters (their ``cluster`` set), each with
    its incident key under `rule`.

    A nodegroup whose cluster's NKS data is too old to decide on is skipped, and the cluster's
    group added to `unjudged` (for ``ctx.freeze_clusters``).
    """
    clusters = {cluster.pk: cluster for cluster in live_clusters()}
    groups = NksNodegroup.objects.filter(gone_at__isnull=True, cluster_id__in=list(clusters))
    for nodegroup in groups.defer("node_addresses"):
        if workers_only and not nodegroup.is_worker:
            continue
        cluster = clusters[nodegroup.cluster_id]
        nodegroup.cluster = cluster
        if unjudgeable(cluster, now):
            unjudged.add(group_of(cluster))
            continue
        yield nodegroup, f"{rule}:{cluster.account.name}/{cluster.name}/{nodegroup.name}"


def cluster_fact(cluster: NksCluster) -> dict[str, Any]:
    """The fact naming an NKS cluster and its account, first in every NKS incident."""
    return fact(
        gettext_noop("NKS cluster"),
        Message.gettext_noop(
            "%(cluster)s (account %(account)s)", cluster=cluster.name, account=cluster.account.name
        ),
    )
