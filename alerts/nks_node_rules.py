"""NKS's counts against the cluster's own Nodes: the ``nodegroup_mismatch`` rule.

Beside ``alerts.nks_rules`` (both judge what ``alerts.nks_scope`` selects): NKS's
``node_count`` and ready:not-ready for a nodegroup, compared with the watched cluster's Node
objects and heartbeat Leases (``nks.node_picture``). Either side can be wrong: NKS's health
report lags, a node can be Ready in NKS's eyes and silent in the cluster's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q
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
from alerts.due_leases import DUE_CHUNK, DueLeases
from alerts.models import Rule
from alerts.nks_scope import cluster_fact, group_of, judged_nodegroups, nks_link, rule_grace
from leases.models import ConditionStatus, KubeCluster, Node
from leases.presenters.node_detail import node_watch_problem
from nks.models import NksNodegroup
from nks.node_picture import NODE_LEASE_NAMESPACE, NodeLine, counted_cross_check, node_lines
from nks.services import linked_kube_cluster

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
    workers = list(judged_nodegroups(Rule.NODEGROUP_MISMATCH, now, unjudged, workers_only=True))
    sources = _lease_sources(nodegroup for nodegroup, _ in workers)
    members = _members(sources, workers, now, ctx.due_leases())
    problems = {pk: node_watch_problem(kube, now) for pk, kube in _watched(sources).items()}
    for nodegroup, key in workers:
        cluster = nodegroup.cluster
        kube = sources.get(nodegroup.cluster_id)
        if kube is None:
            continue  # not watched: nothing to compare
        counted = members.get((kube.pk, nodegroup.name), _Members())
        check = counted_cross_check(
            nodegroup,
            watch_problem=problems[kube.pk],
            node_objects=counted.nodes,
            nodes_ready=counted.ready,
            expired=counted.expired,
            now=now,
        )
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


@dataclass(slots=True)
class _Members:
    """One nodegroup's present member Nodes in the watched cluster, counted."""

    nodes: int = 0
    ready: int = 0
    # Members whose heartbeat Lease expired, by name: the only Nodes read one by one.
    expired: list[NodeLine] = field(default_factory=list)


def _lease_sources(nodegroups: Iterable[NksNodegroup]) -> dict[int, KubeCluster | None]:
    """NKS cluster id -> the Lease source watching it (None: none), looked up once a cluster."""
    sources: dict[int, KubeCluster | None] = {}
    for nodegroup in nodegroups:
        if nodegroup.cluster_id not in sources:
            sources[nodegroup.cluster_id] = linked_kube_cluster(nodegroup.cluster)
    return sources


def _watched(sources: dict[int, KubeCluster | None]) -> dict[int, KubeCluster]:
    return {kube.pk: kube for kube in sources.values() if kube is not None}


def _members(
    sources: dict[int, KubeCluster | None],
    workers: list[tuple[NksNodegroup, str]],
    now: datetime,
    ctx_due: DueLeases,
) -> dict[tuple[int, str], _Members]:
    """(Lease source id, nodegroup label) -> its members, as `nks.node_picture.cross_check`
    counts them from every member's NodeLine, without reading every member.

    One grouped count of the present Nodes, and the heartbeat Leases whose expiry schedule
    has come (`alerts.due_leases`, read once for the evaluation): only their Nodes are read
    as NodeLines, where `node_lines` judges each heartbeat as the nodegroup page does. What an
    evaluation holds in Python does not grow with healthy Nodes, nor do the Leases it reads.
    """
    watched = _watched(sources)
    labels = sorted({nodegroup.name for nodegroup, _ in workers})
    if not watched or not labels:
        return {}
    found: dict[tuple[int, str], _Members] = defaultdict(_Members)
    rows = (
        Node.objects.present()
        .filter(cluster_id__in=sorted(watched), nodegroup_label__in=labels)
        .values("cluster_id", "nodegroup_label")
        .annotate(nodes=Count("id"), ready=Count("id", filter=Q(ready=ConditionStatus.TRUE)))
        .order_by()
    )
    for row in rows:
        counted = found[(row["cluster_id"], row["nodegroup_label"])]
        counted.nodes = row["nodes"]
        # Stale Node data says nothing of Ready now: node_lines reads every one as unknown.
        counted.ready = 0 if watched[row["cluster_id"]].nodes_stale(now) else row["ready"]
    # Candidates only (node_lines reads each one's Lease again, and judges it): the
    # evaluation's due leases, read once for every rule (alerts.due_leases).
    names: dict[int, dict[str, int]] = defaultdict(dict)
    for due in ctx_due.due(now):
        if due.cluster_id in watched and due.namespace == NODE_LEASE_NAMESPACE:
            names[due.cluster_id][due.name] = due.id
    for cluster_id, due_names in sorted(names.items()):
        kube = watched[cluster_id]
        lines: list[NodeLine] = []
        chunked = list(due_names)
        # A chunk at a time, as DueLeases reads: a zone's 5,000 silent nodes are a few queries.
        for start in range(0, len(chunked), DUE_CHUNK):
            chunk = chunked[start : start + DUE_CHUNK]
            candidates = Node.objects.present().filter(
                cluster=kube, name__in=chunk, nodegroup_label__in=labels
            )
            lines.extend(
                line
                for line in node_lines(kube, now, candidates, lease_ids=due_names)
                if line.heartbeat_expired
            )
        # By name, as a nodegroup's members are listed.
        for line in sorted(lines, key=lambda line: line.name):
            found[(cluster_id, line.nodegroup)].expired.append(line)
    return found
