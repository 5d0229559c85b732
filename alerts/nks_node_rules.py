"""NKS's counts against the cluster's own Nodes: the ``nodegroup_mismatch`` rule.

Beside ``alerts.nks_rules`` (both judge what ``alerts.nks_scope`` selects): NKS's
``node_count`` and ready:not-ready for a nodegroup, compared with the watched cluster's Node
objects and heartbeat Leases (``nks.node_picture``). Either side can be wrong: NKS's health
report lags, a node can be Ready in NKS's eyes and silent in the cluster's.
"""

from __future__ import annotations

from django.utils.translation import gettext_noop

from alerts.conditions import (
    Condition,
    Message,
    RuleContext,
    RuleOutcome,
    duration_fact,
    fact,
    item_list,
    time_fact,
)
from alerts.models import Rule
from alerts.nks_scope import cluster_fact, group_of, judged_nodegroups, nks_link, rule_grace
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
    hold = rule_grace(ctx, polls=MISMATCH_POLLS)
    unjudged: set[str] = set()
    workers = judged_nodegroups(Rule.NODEGROUP_MISMATCH, now, unjudged, workers_only=True)
    for nodegroup, key in workers:
        cluster = nodegroup.cluster
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
                title=Message.gettext_noop(
                    "nodegroup %(nodegroup)s: NKS and the cluster disagree",
                    nodegroup=nodegroup.name,
                ),
                cluster=group_of(cluster),
                hold=hold,
                link=nks_link(),
                details={
                    "facts": [
                        cluster_fact(cluster),
                        fact(gettext_noop("Nodegroup"), nodegroup.name),
                        fact(gettext_noop("NKS node_count"), _known(check.nks_nodes)),
                        fact(
                            gettext_noop("NKS ready:not ready"),
                            f"{_known(check.nks_ready)}:{_known(check.nks_not_ready)}",
                        ),
                        fact(gettext_noop("Node objects"), check.node_objects),
                        fact(
                            gettext_noop("Nodes Ready:not Ready"),
                            f"{check.nodes_ready}:{check.nodes_not_ready}",
                        ),
                        fact(gettext_noop("Heartbeat Leases expired"), check.heartbeats_expired),
                        time_fact(gettext_noop("Polled"), nodegroup.polled_at or cluster.polled_at),
                        duration_fact(gettext_noop("Lasting before alerting"), hold),
                    ],
                    # Sentences nks.node_picture writes (in English here: see evaluation).
                    **item_list(gettext_noop("Disagreements"), check.disagreements),
                },
            )
        )
    ctx.freeze_clusters(outcome, unjudged)
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = Message.gettext_noop(
            "NKS and the cluster's Nodes agree again (or the nodegroup is gone, or the cluster "
            "is no longer watched)"
        )
    return outcome


def _known(value: int | None) -> str:
    return "?" if value is None else str(value)
