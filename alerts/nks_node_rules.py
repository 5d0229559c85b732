"""NKS's counts against the cluster's own Nodes: the ``nodegroup_mismatch`` rule.

Beside ``alerts.nks_rules`` (whose helpers it shares): NKS's ``node_count`` and ready:not-ready
for a nodegroup, compared with the watched cluster's Node objects and heartbeat Leases
(``nks.node_picture``). Either side can be wrong: NKS's health report lags, a node can be
Ready in NKS's eyes and silent in the cluster's.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings

from alerts.conditions import (
    MAX_ITEMS,
    Condition,
    RuleContext,
    RuleOutcome,
    fact,
    seconds_text,
    time_fact,
)
from alerts.models import Rule
from alerts.nks_rules import _clusters, _link, _unjudgeable, group_of
from nks.models import NksNodegroup
from nks.node_picture import cross_check, nodegroup_nodes

# NKS refreshes its health report on its own clock, and the poll reads it later still: the
# two sides may disagree for a poll or two as a node comes or goes. Longer is a finding.
MISMATCH_POLLS = 3


def nodegroup_mismatch(ctx: RuleContext) -> RuleOutcome:
    """NKS's node count or ready:not-ready disagrees with the cluster's Nodes and heartbeat
    Leases for longer than MISMATCH_POLLS NKS polls (or the rule's grace).

    No verdict (frozen) while either side is stale: the account's or cluster's NKS data, the
    Lease source's watcher or its Node watch; nor while NKS runs an operation on the
    nodegroup, or reports the cluster's API down (that incident says it all). A cluster that is
    not watched has nothing to compare: its incidents resolve.
    """
    now, outcome = ctx.now, RuleOutcome()
    if ctx.config.grace_seconds is not None:
        hold = timedelta(seconds=ctx.config.grace_seconds)
    else:
        hold = timedelta(seconds=MISMATCH_POLLS * settings.NKS_POLL_SECONDS)
    clusters = {cluster.pk: cluster for cluster in _clusters()}
    unjudged: set[str] = set()
    groups = NksNodegroup.objects.filter(gone_at__isnull=True, cluster_id__in=list(clusters)).defer(
        "node_addresses"
    )
    for nodegroup in groups:
        if not nodegroup.is_worker:
            continue
        cluster = clusters[nodegroup.cluster_id]
        nodegroup.cluster = cluster
        key = f"{Rule.NODEGROUP_MISMATCH}:{cluster.account.name}/{cluster.name}/{nodegroup.name}"
        if _unjudgeable(cluster, now):
            unjudged.add(group_of(cluster))
            continue
        check = cross_check(nodegroup, nodegroup_nodes(nodegroup, now), now)
        if check is None:
            continue
        if check.unjudged:
            if key in ctx.unresolved:
                outcome.freeze(key)
            continue
        if not check.disagreements:
            continue
        outcome.add(
            Condition(
                key=key,
                title=f"nodegroup {nodegroup.name}: NKS and the cluster disagree",
                cluster=group_of(cluster),
                hold=hold,
                link=_link(),
                details={
                    "facts": [
                        fact("NKS cluster", f"{cluster.name} (account {cluster.account.name})"),
                        fact("Nodegroup", nodegroup.name),
                        fact("NKS node_count", _known(check.nks_nodes)),
                        fact(
                            "NKS ready:not ready",
                            f"{_known(check.nks_ready)}:{_known(check.nks_not_ready)}",
                        ),
                        fact("Node objects", check.node_objects),
                        fact(
                            "Nodes Ready:not Ready", f"{check.nodes_ready}:{check.nodes_not_ready}"
                        ),
                        fact("Heartbeat Leases expired", check.heartbeats_expired),
                        time_fact("Polled", nodegroup.polled_at or cluster.polled_at),
                        fact("Lasting before alerting", seconds_text(hold.total_seconds())),
                    ],
                    "items_label": "Disagreements",
                    "items": check.disagreements[:MAX_ITEMS],
                    "items_total": len(check.disagreements),
                },
            )
        )
    ctx.freeze_clusters(outcome, unjudged)
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = (
            "NKS and the cluster's Nodes agree again (or the nodegroup is gone, or the cluster "
            "is no longer watched)"
        )
    return outcome


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)
