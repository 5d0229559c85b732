"""Rules over polled NKS data (see `alerts.conditions` for the contract).

NKS clusters are grouped (for mail) under the name of the Lease source that watches them,
when there is one, so a cluster's API incident and its node incidents share a group: that
is what inhibition matches on. While the dashboard's own NKS data about a cluster is stale
(its account's polls fail, or the cluster's last refresh failed), the cluster's incidents
are frozen, as lease incidents are while a watcher is stale.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
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
from alerts.nks_scope import (
    also_known_as,
    cluster_fact,
    group_of,
    judged_nodegroups,
    live_clusters,
    nks_link,
    rule_grace,
    unjudgeable,
)
from leases.models import ConditionStatus, Node
from leases.presenters.node_detail import node_watch_problem
from nks.health import nodegroup_of_node
from nks.models import (
    Freshness,
    NksAccount,
    NksCluster,
    NksNodegroup,
    ResizeRequest,
    ResizeState,
)
from nks.services import linked_kube_cluster

NORMAL = "NORMAL"
NODES_NOT_READY = ("NOT_READY_NODE_EXIST", "ALL_NODES_NOT_READY")
NKS_ACCOUNT_PREFIX = f"{Rule.SOURCE_STALE}:nks:"
NKS_CLUSTER_PREFIX = f"{Rule.SOURCE_STALE}:nks-cluster:"
NOT_REPORTED = Message.gettext_noop("not reported")
NONE_RECORDED = Message.gettext_noop("none recorded")


# --- cluster_unhealthy -----------------------------------------------------------------------


def cluster_unhealthy(ctx: RuleContext) -> RuleOutcome:
    """API or nodes not NORMAL, or health data STALE/ROTTEN, for longer than the grace.

    One incident per cluster whose details say which; ``api_down`` in the details inhibits
    mail about the cluster's nodegroups and nodes while it is open.
    """
    now, outcome = ctx.now, RuleOutcome()
    grace = rule_grace(ctx)
    unjudged: set[str] = set()
    for cluster in live_clusters():
        group = group_of(cluster)
        if unjudgeable(cluster, now):
            unjudged.add(group)
            continue
        # A list of problems (a title lists them, comma-separated, in the reader's language).
        problems: list[Message] = []
        freshness = cluster.freshness
        if freshness in (Freshness.STALE, Freshness.ROTTEN):
            problems.append(Message.gettext_noop("health data %(freshness)s", freshness=freshness))
        api_status = cluster.api_status.strip().upper()
        api_down = cluster.api_ok is False or bool(api_status and api_status != NORMAL)
        if api_down:
            if cluster.api_status or cluster.api:
                problem = Message.gettext_noop(
                    "API %(status)s", status=cluster.api_status or cluster.api
                )
            else:
                problem = Message.gettext_noop("API not working")
            problems.append(problem)
        node_status = cluster.node_status.strip().upper()
        if node_status and node_status != NORMAL:
            problems.append(Message.gettext_noop("nodes %(status)s", status=cluster.node_status))
        if not problems:
            continue
        outcome.add(
            Condition(
                key=f"{Rule.CLUSTER_UNHEALTHY}:{cluster.account.name}/{cluster.name}",
                title=Message.gettext_noop(
                    "NKS cluster unhealthy: %(problems)s", problems=problems
                ),
                cluster=group,
                hold=grace,
                link=nks_link(),
                details={
                    "facts": [
                        cluster_fact(cluster),
                        fact(
                            gettext_noop("API status"),
                            cluster.api_status or cluster.api or NOT_REPORTED,
                        ),
                        fact(gettext_noop("Node status"), cluster.node_status or NOT_REPORTED),
                        fact(gettext_noop("Health data"), cluster.health_status or NOT_REPORTED),
                        time_fact(
                            gettext_noop("Health data refreshed by NKS"), cluster.health_timestamp
                        ),
                        fact(
                            gettext_noop("Nodes ready"),
                            Message.gettext_noop(
                                "%(ready)s of %(count)s",
                                ready=cluster.nodes_ready,
                                count=cluster.node_count,
                            )
                            if cluster.nodes_ready is not None and cluster.node_count is not None
                            else NOT_REPORTED,
                        ),
                        time_fact(gettext_noop("Polled"), cluster.polled_at),
                        duration_fact(gettext_noop("Grace before alerting"), grace),
                    ],
                    "api_down": api_down,
                    "aliases": sorted(also_known_as(cluster)),
                },
            )
        )
    ctx.freeze_clusters(outcome, unjudged)
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = _cluster_recovery(incident.key)
    return outcome


def _cluster_recovery(key: str) -> Message:
    account, _, name = key.partition(":")[2].partition("/")
    cluster = NksCluster.objects.filter(account__name=account, name=name).first()
    if cluster is None or cluster.gone_at is not None:
        return Message.gettext_noop("the cluster is no longer listed by NKS")
    if not NksAccount.objects.filter(name=account, enabled=True).exists():
        return Message.gettext_noop("the NKS account was disabled")
    return Message.gettext_noop("API and nodes are NORMAL and the health data is fresh")


# --- nodegroup_not_ready ---------------------------------------------------------------------


def nodegroup_not_ready(ctx: RuleContext) -> RuleOutcome:
    """A nodegroup with not-ready nodes for longer than the grace.

    A nodegroup being updated by NKS (a resize, an upgrade) is not judged: its new nodes are
    not ready for the minutes they take to join, which is the expected course of a resize.
    """
    now, outcome = ctx.now, RuleOutcome()
    grace = rule_grace(ctx)
    unjudged: set[str] = set()
    for nodegroup, key in judged_nodegroups(Rule.NODEGROUP_NOT_READY, now, unjudged):
        cluster = nodegroup.cluster
        if nodegroup.in_progress:
            if key in ctx.unresolved:
                outcome.freeze(key)
            continue
        not_ready = nodegroup.not_ready or 0
        node_status = nodegroup.node_status.strip().upper()
        if not_ready <= 0 and node_status not in NODES_NOT_READY:
            continue
        names = _not_ready_names(nodegroup, now)
        outcome.add(
            Condition(
                key=key,
                title=Message.ngettext(
                    "nodegroup %(nodegroup)s: %(count)s node not ready",
                    "nodegroup %(nodegroup)s: %(count)s nodes not ready",
                    not_ready,
                    nodegroup=nodegroup.name,
                    count=not_ready,
                )
                if not_ready
                else Message.gettext_noop(
                    "nodegroup %(nodegroup)s: some nodes not ready", nodegroup=nodegroup.name
                ),
                cluster=group_of(cluster),
                hold=grace,
                link=nks_link(),
                details={
                    "facts": [
                        cluster_fact(cluster),
                        fact(gettext_noop("Nodegroup"), nodegroup.name),
                        fact(
                            gettext_noop("Not ready"),
                            not_ready if nodegroup.not_ready is not None else "?",
                        ),
                        fact(
                            gettext_noop("Ready"),
                            nodegroup.ready if nodegroup.ready is not None else "?",
                        ),
                        fact(gettext_noop("Node status"), nodegroup.node_status or NOT_REPORTED),
                        time_fact(gettext_noop("Polled"), nodegroup.polled_at or cluster.polled_at),
                    ],
                    **item_list(gettext_noop("Nodes not ready"), names),
                },
            )
        )
    ctx.freeze_clusters(outcome, unjudged)
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = Message.gettext_noop(
            "every node of the nodegroup is ready (or it is gone)"
        )
    return outcome


def _not_ready_names(nodegroup: NksNodegroup, now: datetime) -> list[str]:
    """Which nodes are not ready: the watched cluster's Nodes say; else NKS's per-node keys.

    Only the members not Ready are read (a NodeLine is not ready unless its Ready is "True"
    and the Node data current, which `node_watch_problem` checks): a large nodegroup with one
    bad node costs one node, not all of them.
    """
    kube = linked_kube_cluster(nodegroup.cluster)
    if kube is not None and not node_watch_problem(kube, now):
        return list(
            Node.objects.present()
            .filter(cluster=kube)
            .in_nodegroup(nodegroup.name)
            .exclude(ready=ConditionStatus.TRUE)
            .order_by("name")
            .values_list("name", flat=True)
        )
    readiness = nodegroup.cluster.node_readiness or {}
    groups = [nodegroup.name]
    return sorted(
        name
        for name, ready in readiness.items()
        if ready is False and nodegroup_of_node(name, nodegroup.cluster.name, groups)
    )


# --- resize_failed ---------------------------------------------------------------------------


def resize_failed(ctx: RuleContext) -> RuleOutcome:
    """The latest finished resize of a nodegroup failed: one incident per nodegroup.

    Open until a later resize of that nodegroup succeeds, or the failure is older than the
    window (ALERT_RESIZE_FAILED_HOURS): a failed resize stays a problem until it is redone.
    These rows are the dashboard's own records, so they are never stale.
    """
    now, outcome = ctx.now, RuleOutcome()
    window = timedelta(
        seconds=ctx.config.window_seconds or settings.ALERT_RESIZE_FAILED_HOURS * 3600
    )
    cutoff = now - window
    failed = (
        ResizeRequest.objects.filter(state=ResizeState.FAILED)
        .filter(Q(finished_at__gt=cutoff) | Q(finished_at__isnull=True, created_at__gt=cutoff))
        .select_related("cluster", "cluster__account", "cluster__kube_cluster")
        .defer("cluster__kube_cluster__kubeconfig", "cluster__account__password")
        .order_by("created_at", "id")
    )
    latest: dict[int, ResizeRequest] = {}
    for request in failed:
        latest[request.nodegroup_id] = request  # the newest failure per nodegroup wins
    for nodegroup_id, request in latest.items():
        ended = request.finished_at or request.created_at
        redone = ResizeRequest.objects.filter(
            nodegroup_id=nodegroup_id,
            state=ResizeState.SUCCEEDED,
            created_at__gt=request.created_at,
        ).exists()
        if redone:
            continue
        cluster = request.cluster
        outcome.add(
            Condition(
                key=f"{Rule.RESIZE_FAILED}:{cluster.account.name}/{cluster.name}/"
                f"{request.nodegroup_name}",
                title=Message.ngettext(
                    "resize of nodegroup %(nodegroup)s to %(count)s node failed",
                    "resize of nodegroup %(nodegroup)s to %(count)s nodes failed",
                    request.to_count,
                    nodegroup=request.nodegroup_name,
                    count=request.to_count,
                ),
                cluster=group_of(cluster),
                since=ended,
                link=nks_link(),
                details={
                    "facts": [
                        fact(gettext_noop("Resize request"), f"#{request.pk}"),
                        cluster_fact(cluster),
                        fact(gettext_noop("Nodegroup"), request.nodegroup_name),
                        fact(
                            gettext_noop("Size"),
                            Message.ngettext(
                                "%(from)s → %(to)s node",
                                "%(from)s → %(to)s nodes",
                                request.to_count,
                                to=request.to_count,
                                **{"from": request.from_count},
                            ),
                        ),
                        fact(
                            gettext_noop("Requested by"),
                            request.username or Message.gettext_noop("unknown"),
                        ),
                        fact(gettext_noop("Reason given"), request.reason),
                        time_fact(gettext_noop("Requested"), request.created_at),
                        time_fact(gettext_noop("Failed"), ended),
                        fact(
                            gettext_noop("Error"),
                            request.error or Message.gettext_noop("no error recorded"),
                        ),
                    ],
                    "resize_id": request.pk,
                },
            )
        )
    for incident in ctx.ending(outcome):
        account, _, rest = incident.key.partition(":")[2].partition("/")
        cluster_name, _, nodegroup = rest.partition("/")
        success = (
            ResizeRequest.objects.filter(
                cluster__account__name=account,
                cluster__name=cluster_name,
                nodegroup_name=nodegroup,
                state=ResizeState.SUCCEEDED,
            )
            .order_by("-created_at")
            .first()
        )
        if success is not None and success.created_at >= incident.since - window:
            note = Message.ngettext(
                "resize #%(id)s to %(count)s node succeeded",
                "resize #%(id)s to %(count)s nodes succeeded",
                success.to_count,
                id=success.pk,
                count=success.to_count,
            )
        else:
            note = Message.gettext_noop(
                "no successful resize since; the failure is older than %(window)s", window=window
            )
        outcome.notes[incident.key] = note
    return outcome


# --- source_stale: NKS polls -----------------------------------------------------------------


def nks_sources_stale(ctx: RuleContext, outcome: RuleOutcome) -> None:
    """An account without a successful poll, or a cluster not refreshed, for too long."""
    now = ctx.now
    polls = ctx.config.threshold or settings.ALERT_NKS_STALE_POLLS
    threshold = timedelta(seconds=polls * settings.NKS_POLL_SECONDS)
    link = nks_link()
    healthy_accounts = set()
    for account in NksAccount.objects.filter(enabled=True).defer("password", "token"):
        since = account.last_success_at or account.created_at
        if now - since < threshold:
            healthy_accounts.add(account.pk)
            continue
        outcome.add(
            Condition(
                key=f"{NKS_ACCOUNT_PREFIX}{account.name}",
                title=Message.gettext_noop(
                    "NKS account %(account)s: polls are failing", account=account.name
                ),
                cluster="",
                since=since,
                hold=threshold,
                link=link,
                details={
                    "facts": [
                        fact(
                            gettext_noop("Source"),
                            Message.gettext_noop(
                                "NKS polls of account %(account)s", account=account.name
                            ),
                        ),
                        time_fact(gettext_noop("Last successful poll"), account.last_success_at),
                        time_fact(gettext_noop("Last poll"), account.last_poll_at),
                        fact(gettext_noop("Failures in a row"), account.consecutive_failures),
                        fact(gettext_noop("Last error"), account.last_error or NONE_RECORDED),
                        fact(
                            gettext_noop("Threshold"),
                            Message.ngettext(
                                "%(count)s poll interval (%(length)s)",
                                "%(count)s poll intervals (%(length)s)",
                                polls,
                                count=polls,
                                length=threshold,
                            ),
                        ),
                        fact(
                            gettext_noop("Meanwhile"),
                            Message.gettext_noop(
                                "this account's cluster alerts are neither opened nor resolved"
                            ),
                        ),
                    ],
                },
            )
        )
    for cluster in live_clusters():
        key = f"{NKS_CLUSTER_PREFIX}{cluster.account.name}/{cluster.name}"
        if cluster.account_id not in healthy_accounts:
            # The account's own incident says it all; this one waits for current data.
            if key in ctx.unresolved:
                outcome.freeze(key)
            continue
        since = cluster.refreshed_at or cluster.first_seen_at
        if now - since < threshold:
            continue
        outcome.add(
            Condition(
                key=key,
                title=Message.gettext_noop(
                    "NKS data about cluster %(cluster)s is not refreshed", cluster=cluster.name
                ),
                cluster=group_of(cluster),
                since=since,
                hold=threshold,
                link=link,
                details={
                    "facts": [
                        fact(
                            gettext_noop("Source"),
                            Message.gettext_noop(
                                "NKS polls of cluster %(cluster)s", cluster=cluster.name
                            ),
                        ),
                        time_fact(gettext_noop("Last complete refresh"), cluster.refreshed_at),
                        time_fact(gettext_noop("Last listed"), cluster.polled_at),
                        fact(gettext_noop("Last error"), cluster.last_error or NONE_RECORDED),
                    ],
                },
            )
        )
    for incident in ctx.ending(outcome):
        if incident.key.startswith(NKS_ACCOUNT_PREFIX):
            outcome.notes[incident.key] = Message.gettext_noop(
                "polls succeed again (or the account was disabled)"
            )
        elif incident.key.startswith(NKS_CLUSTER_PREFIX):
            outcome.notes[incident.key] = Message.gettext_noop(
                "the cluster's data is refreshed again (or it is gone)"
            )
