"""What the cluster itself says about an NKS nodegroup's nodes, and where NKS disagrees.

NKS's API names no node (its nodegroup answer carries addresses only), so the node picture
comes from the Kubernetes cluster behind it, watched through its own API: its Node objects
(Ready, cordoned, ``spec.providerID`` holding the instance UUID that ``nodes_to_remove``
takes, the ``magnum.openstack.org/nodegroup`` label that says which nodegroup a node is in)
and their heartbeat Leases in ``kube-node-lease``. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q
from django.urls import reverse
from django.utils.translation import gettext, ngettext

from dashboard.links import lease_url, path_segment
from dashboard.natural import natural_key
from dashboard.timefmt import iso_utc
from leases.models import (
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseClass,
    LeaseState,
    Node,
    lease_state,
)
from leases.presenters.node_detail import node_watch_problem
from leases.provider_id import InstanceId, instance_uuid
from nks.enums import Freshness
from nks.models import NksCluster, NksNodegroup
from nks.services import linked_kube_cluster

NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass(slots=True)
class NodeLine:
    """One Node object with its heartbeat Lease, as domain values (presenters format them)."""

    name: str
    url: str
    nodegroup: str  # the label's value; "" when the node has no such label
    ready: ConditionStatus
    ready_reason: str
    ready_message: str
    ready_since: datetime | None
    created_at: datetime | None
    cordoned: bool
    instance: InstanceId
    heartbeat: LeaseState | None  # None: no heartbeat Lease of that name
    heartbeat_renewed: datetime | None
    heartbeat_expires: datetime | None
    heartbeat_url: str
    deleted_at: datetime | None = None

    @property
    def not_ready(self) -> bool:
        return self.ready != ConditionStatus.TRUE

    @property
    def heartbeat_expired(self) -> bool:
        return self.heartbeat == LeaseState.EXPIRED

    @property
    def removal_rank(self) -> int:
        """Which nodes a scale-in should take first: NotReady, silent, cordoned, the rest."""
        if self.not_ready:
            return 0
        if self.heartbeat_expired:
            return 1
        if self.cordoned:
            return 2
        return 3


def node_url(cluster: str, name: str) -> str:
    """The node page's URL (leases:node), built like lease links: tables make many."""
    return f"{reverse('leases:index')}clusters/{path_segment(cluster)}/nodes/{path_segment(name)}/"


def node_lines(
    kube_cluster: KubeCluster,
    now: datetime,
    nodes: Iterable[Node],
    *,
    lease_ids: Mapping[str, int] | None = None,
) -> list[NodeLine]:
    """The given Node rows of one cluster, each joined with its heartbeat Lease by name.

    `lease_ids`: by name, the heartbeat Leases that can be theirs, when the caller knows them
    (the alert rule, from the expiry schedule): those of the given Nodes are read by primary
    key alone, and the rest checked here. By name, a list of some dozens in a namespace of
    some hundreds is cheaper for the planner to filter out of the whole namespace, which
    reads every healthy heartbeat."""
    rows = list(nodes)
    names = {node.name for node in rows}
    fields = ("name", "holder", "renew_time", "expires_at", "cluster_id", "namespace")
    if lease_ids is None:
        found = (
            Lease.objects.live()
            .filter(cluster=kube_cluster, namespace=NODE_LEASE_NAMESPACE, name__in=sorted(names))
            .only(*fields)
        )
    else:
        wanted = sorted(lease_ids[name] for name in names if name in lease_ids)
        found = Lease.objects.live().filter(pk__in=wanted).only(*fields)
    leases = {
        lease.name: lease
        for lease in found
        if lease.cluster_id == kube_cluster.pk
        and lease.namespace == NODE_LEASE_NAMESPACE
        and lease.name in names
    }
    prefix = reverse("leases:index")
    lines = []
    # Stale Node data says nothing of a node's Ready now (its watch problem says why).
    stale = kube_cluster.nodes_stale(now)
    for node in rows:
        ready = (node.conditions or {}).get("Ready") or {}
        lease = leases.get(node.name)
        lines.append(
            NodeLine(
                name=node.name,
                url=node_url(kube_cluster.name, node.name),
                nodegroup=node.nodegroup_label,
                ready=ConditionStatus(node.ready)
                if node.ready in ConditionStatus.values and not stale
                else ConditionStatus.UNKNOWN,
                ready_reason=str(ready.get("reason") or ""),
                ready_message=str(ready.get("message") or ""),
                ready_since=node.ready_since,
                created_at=node.created_at,
                cordoned=node.unschedulable,
                instance=instance_uuid(node.provider_id),
                heartbeat=lease_state(
                    lease.holder,
                    lease.expires_at,
                    now,
                    kube_cluster.leases_as_of if kube_cluster.enabled else None,
                )
                if lease
                else None,
                heartbeat_renewed=lease.renew_time if lease else None,
                heartbeat_expires=lease.expires_at if lease else None,
                heartbeat_url=lease_url(prefix, kube_cluster.name, NODE_LEASE_NAMESPACE, node.name)
                if lease
                else "",
                deleted_at=node.deleted_at,
            )
        )
    return lines


@dataclass(slots=True)
class NodegroupNodes:
    """The watched cluster's Nodes for one nodegroup: members by label, and unlabelled ones."""

    kube_cluster: KubeCluster
    members: list[NodeLine]
    # Nodes without the nodegroup label: their nodegroup is unknown, never offered for removal.
    unlabelled: list[NodeLine]
    watch_problem: str

    def removal_order(self) -> list[NodeLine]:
        """Members a scale-in may name (instance UUID known), best candidates first."""
        choosable = [node for node in self.members if node.instance.ok]
        return sorted(choosable, key=lambda node: (node.removal_rank, natural_key(node.name)))


def nodegroup_nodes(nodegroup: NksNodegroup, now: datetime) -> NodegroupNodes | None:
    """The nodegroup's Nodes from the cluster's own API; None when the cluster is not watched."""
    kube_cluster = linked_kube_cluster(nodegroup.cluster)
    if kube_cluster is None:
        return None
    present = Node.objects.present().filter(cluster=kube_cluster)
    members = node_lines(kube_cluster, now, present.in_nodegroup(nodegroup.name))
    unlabelled = node_lines(kube_cluster, now, present.filter(nodegroup_label=""))
    return NodegroupNodes(
        kube_cluster=kube_cluster,
        members=members,
        unlabelled=unlabelled,
        watch_problem=node_watch_problem(kube_cluster, now),
    )


# --- The cross-check ---------------------------------------------------------------------------


@dataclass(slots=True)
class CrossCheck:
    """NKS's counts beside the cluster's own, and each disagreement in words.

    ``unjudged`` says why no verdict is given (stale data on either side, an operation NKS
    is running); the counts are still shown. ``disagreements`` is empty when both agree.
    """

    nodegroup: str
    nks_nodes: int | None
    nks_ready: int | None
    nks_not_ready: int | None
    node_objects: int | None
    nodes_ready: int | None
    nodes_not_ready: int | None
    heartbeats_expired: int | None
    unjudged: str = ""
    disagreements: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.unjudged and not self.disagreements


def _nks_unjudged(cluster: NksCluster, nodegroup: NksNodegroup, now: datetime) -> str:
    if cluster.account.is_stale(now) or cluster.is_stale(now):
        return gettext("The dashboard's NKS data about this cluster is stale.")
    if cluster.freshness != Freshness.FRESH:
        status = cluster.health_status or gettext("missing")
        return gettext("NKS's health data is %(health_status)s, so its counts are unknown.") % {
            "health_status": status
        }
    if nodegroup.in_progress or cluster.in_progress:
        return gettext("NKS is running an operation on it; nodes come and go meanwhile.")
    if (cluster.api_status or "").strip().upper() not in ("", "NORMAL") or cluster.api_ok is False:
        return gettext(
            "NKS reports the cluster's API is down: the cluster's own data cannot be read."
        )
    return ""


def _moment(value: datetime | None) -> str:
    # A sentence, not a record: whole seconds read better than MicroTime's microseconds.
    return (
        iso_utc(value.replace(microsecond=0)) if value is not None else gettext("an unknown time")
    )


def cross_check(
    nodegroup: NksNodegroup, nodes: NodegroupNodes | None, now: datetime
) -> CrossCheck | None:
    """NKS's node_count and ready:not-ready beside the Nodes and heartbeat Leases; None unwatched.

    ``nodegroup.cluster`` (with its account) must be loaded.
    """
    if nodes is None:
        return None
    members = nodes.members
    return counted_cross_check(
        nodegroup,
        watch_problem=nodes.watch_problem,
        node_objects=len(members),
        nodes_ready=sum(1 for node in members if not node.not_ready),
        expired=[node for node in members if node.heartbeat_expired],
        now=now,
    )


def counted_cross_check(
    nodegroup: NksNodegroup,
    *,
    watch_problem: str,
    node_objects: int,
    nodes_ready: int,
    expired: Sequence[NodeLine],
    now: datetime,
) -> CrossCheck:
    """`cross_check` from counts: the member Nodes, how many are Ready, and the members whose
    heartbeat Lease expired (the only ones named). The alert rule counts in SQL rather than
    reading every member of every nodegroup at each evaluation."""
    check = CrossCheck(
        nodegroup=nodegroup.name,
        nks_nodes=nodegroup.node_count,
        nks_ready=nodegroup.ready,
        nks_not_ready=nodegroup.not_ready,
        node_objects=node_objects,
        nodes_ready=nodes_ready,
        nodes_not_ready=node_objects - nodes_ready,
        heartbeats_expired=len(expired),
    )
    check.unjudged = watch_problem or _nks_unjudged(nodegroup.cluster, nodegroup, now)
    if check.unjudged:
        return check
    check.disagreements = _disagreements(nodegroup, node_objects, nodes_ready, expired)
    return check


def disagreements(nodegroup: NksNodegroup, members: Sequence[NodeLine]) -> list[str]:
    """Each way NKS's report and the cluster's Nodes and Leases disagree, in words."""
    return _disagreements(
        nodegroup,
        len(members),
        sum(1 for node in members if not node.not_ready),
        [node for node in members if node.heartbeat_expired],
    )


def _disagreements(
    nodegroup: NksNodegroup, count: int, ready: int, expired: Sequence[NodeLine]
) -> list[str]:
    found: list[str] = []
    name = nodegroup.name
    if nodegroup.node_count is not None and nodegroup.node_count != count:
        # Two counts, two plurals: each clause is its own message, joined as two sentences
        # would be in any language ("NKS says ...; the cluster has ...").
        nks_says = ngettext(
            "NKS says %(count)s node in %(nodegroup)s;",
            "NKS says %(count)s nodes in %(nodegroup)s;",
            nodegroup.node_count,
        ) % {"count": nodegroup.node_count, "nodegroup": name}
        cluster_has = ngettext(
            "the cluster has %(count)s Node object labelled with it.",
            "the cluster has %(count)s Node objects labelled with it.",
            count,
        ) % {"count": count}
        found.append(f"{nks_says} {cluster_has}")
    nks_counts = (nodegroup.ready, nodegroup.not_ready)
    if None not in nks_counts and nks_counts != (ready, count - ready):
        found.append(
            gettext(
                "NKS counts %(nks_ready)s:%(nks_not_ready)s ready:not ready in %(nodegroup)s; "
                "the cluster's Nodes say %(ready)s:%(not_ready)s."
            )
            % {
                "nks_ready": nodegroup.ready,
                "nks_not_ready": nodegroup.not_ready,
                "nodegroup": name,
                "ready": ready,
                "not_ready": count - ready,
            }
        )
    per_node = nodegroup.cluster.node_readiness or {}
    for node in expired:
        said = per_node.get(node.name)
        nks_counts_ready = said is True or (said is None and nodegroup.not_ready == 0)
        if nks_counts_ready:
            found.append(
                gettext("NKS counts node %(node)s ready; its heartbeat Lease expired at %(at)s.")
                % {"node": node.name, "at": _moment(node.heartbeat_expires)}
            )
    return found


def cluster_cross_checks(cluster: NksCluster, now: datetime) -> list[CrossCheck]:
    """The cross-check of each live worker nodegroup of a watched cluster (empty unwatched)."""
    checks = []
    groups = sorted(
        (group for group in cluster.nodegroups.all() if group.gone_at is None and group.is_worker),
        key=lambda group: natural_key(group.name),
    )
    for group in groups:
        group.cluster = cluster  # already loaded, with its account and Lease source
        check = cross_check(group, nodegroup_nodes(group, now), now)
        if check is not None:
            checks.append(check)
    return checks


# --- After a scale-in ----------------------------------------------------------------------------


@dataclass(slots=True)
class RemovedNode:
    """A node a resize named for removal, and whether the cluster has let go of it yet."""

    uuid: str
    name: str  # "" when no Node with that instance UUID was ever seen
    url: str
    deleted_at: datetime | None  # when the watcher saw its Node object deleted
    lease_gone: bool  # its heartbeat Lease is deleted (or was never seen)


def removed_nodes(nodegroup: NksNodegroup, uuids: Sequence[str]) -> list[RemovedNode] | None:
    """The Nodes behind the given instance UUIDs, deleted ones included; None unwatched.

    The final confirmation of a scale-in: NKS reports the resize done when its stack is,
    but the node is gone only when the cluster's Node object (and its Lease) is.
    """
    kube_cluster = linked_kube_cluster(nodegroup.cluster)
    if kube_cluster is None:
        return None
    wanted = [uuid.lower() for uuid in uuids]
    if not wanted:
        return []
    candidates = Q()
    for uuid in wanted:
        candidates |= Q(provider_id__iendswith=uuid)
    found: dict[str, Node] = {}
    for node in Node.objects.filter(candidates, cluster=kube_cluster).order_by("deleted_at"):
        parsed = instance_uuid(node.provider_id).uuid
        # A deleted Node and a new one may share the UUID only in theory; the present wins.
        if parsed in wanted and (parsed not in found or node.deleted_at is None):
            found[parsed] = node
    live_leases = set(
        Lease.objects.live()
        .filter(
            cluster=kube_cluster,
            namespace=NODE_LEASE_NAMESPACE,
            name__in=[node.name for node in found.values()],
        )
        .values_list("name", flat=True)
    )
    result = []
    for uuid in wanted:
        node = found.get(uuid)
        result.append(
            RemovedNode(
                uuid=uuid,
                name=node.name if node else "",
                url=node_url(kube_cluster.name, node.name) if node else "",
                deleted_at=node.deleted_at if node else None,
                lease_gone=node is None or node.name not in live_leases,
            )
        )
    return result


# --- Bounded reads for the pages ---------------------------------------------------------------
#
# A nodegroup of a 5,000-node cluster has hundreds of members: the cluster page's cross-checks
# and the nodegroup page's table read counts in SQL and NodeLines only for the Nodes they name
# (those whose heartbeat Lease is due, and a page of the table), never one NodeLine per member.

# Names looked up at a time.
_DUE_CHUNK = 2000


def _due_heartbeat_names(kube_cluster: KubeCluster, now: datetime) -> list[str]:
    """The names of the cluster's held node heartbeat Leases that expired by `now` (node_lines
    judges each against the cluster's as-of moment): the cluster's heartbeats only, by the
    (cluster, lease_class) index; every kube-node-lease Lease is of that class.

    Not the fleet's due Leases (LeaseDeadline.soon_at, as the evaluation reads them once for
    every cluster): in the fleet bench at 100k that read made the nodegroup page's PostgreSQL
    CPU 85-92 ms a request against 13-18 ms for this one (dead index entries that renewals
    leave below `now` are one likely cause; not proven)."""
    return list(
        Lease.objects.live()
        .filter(
            cluster=kube_cluster,
            lease_class=LeaseClass.NODE_HEARTBEAT,
            namespace=NODE_LEASE_NAMESPACE,
            expires_at__lte=now,
        )
        .exclude(holder="")
        .values_list("name", flat=True)
    )


def _expired_members(
    kube_cluster: KubeCluster, now: datetime, labels: Sequence[str], due: Sequence[str]
) -> list[NodeLine]:
    """The present Nodes labelled with one of `labels` among the `due` names whose heartbeat
    Lease expired, by name (as a nodegroup's members are listed)."""
    lines: list[NodeLine] = []
    for start in range(0, len(due), _DUE_CHUNK):
        candidates = Node.objects.present().filter(
            cluster=kube_cluster,
            name__in=due[start : start + _DUE_CHUNK],
            nodegroup_label__in=labels,
        )
        lines.extend(
            line for line in node_lines(kube_cluster, now, candidates) if line.heartbeat_expired
        )
    return sorted(lines, key=lambda line: line.name)


def counted_cluster_cross_checks(cluster: NksCluster, now: datetime) -> list[CrossCheck]:
    """`cluster_cross_checks` counted in SQL: one grouped count of the present member Nodes,
    NodeLines only for members whose heartbeat Lease is due. The same checks, in as many
    queries and NodeLines for a 5,000-node cluster as for a 20-node one."""
    kube_cluster = linked_kube_cluster(cluster)
    if kube_cluster is None:
        return []
    groups = sorted(
        (group for group in cluster.nodegroups.all() if group.gone_at is None and group.is_worker),
        key=lambda group: natural_key(group.name),
    )
    if not groups:
        return []
    labels = [group.name for group in groups]
    counted = {
        row["nodegroup_label"]: row
        for row in Node.objects.present()
        .filter(cluster=kube_cluster, nodegroup_label__in=labels)
        .values("nodegroup_label")
        .annotate(nodes=Count("id"), ready=Count("id", filter=Q(ready=ConditionStatus.TRUE)))
        .order_by()
    }
    # Stale Node data says nothing of Ready now: node_lines reads every one as unknown.
    stale = kube_cluster.nodes_stale(now)
    expired = _expired_members(kube_cluster, now, labels, _due_heartbeat_names(kube_cluster, now))
    problem = node_watch_problem(kube_cluster, now)
    checks = []
    for group in groups:
        group.cluster = cluster  # already loaded, with its account and Lease source
        row = counted.get(group.name, {})
        checks.append(
            counted_cross_check(
                group,
                watch_problem=problem,
                node_objects=row.get("nodes", 0),
                nodes_ready=0 if stale else row.get("ready", 0),
                expired=[line for line in expired if line.nodegroup == group.name],
                now=now,
            )
        )
    return checks


@dataclass(slots=True)
class NodegroupNodePage:
    """A page of a nodegroup's Nodes (those needing a look first), with the counts of all of
    them and the cross-check, read without a NodeLine per member; and the resize form's first
    removable members in removal order (``NodegroupNodes.removal_order``)."""

    kube_cluster: KubeCluster
    # At most `limit` each, in the order the table shows them.
    members: list[NodeLine]
    unlabelled: list[NodeLine]
    members_total: int
    unlabelled_total: int
    check: CrossCheck
    watch_problem: str
    # At most `offered`, best candidates first; how many members can be named in all; the
    # members that cannot be (no parsable providerID).
    removal: list[NodeLine] = field(default_factory=list)
    removable_total: int = 0
    unchoosable: list[NodeLine] = field(default_factory=list)


# What the narrow read takes of each member: name, Ready, cordoned, providerID.
_Narrow = tuple[str, str, bool, str]


def _page_names(rows: Sequence[_Narrow], troubled: set[str], limit: int) -> list[str]:
    """The names `node_rows` would show of these rows: all of them in natural order, or with
    more than `limit` the first `limit` of the `troubled` ones (NotReady, heartbeat expired,
    cordoned), then of the others, each part in natural name order."""
    ordered = sorted((row[0] for row in rows), key=natural_key)
    if len(ordered) > limit:
        ordered = sorted(ordered, key=lambda name: name not in troubled)[:limit]
    return ordered


def _removal_names(
    rows: Sequence[_Narrow], expired: set[str], stale: bool, limit: int
) -> tuple[list[str], int]:
    """The first `limit` members `NodegroupNodes.removal_order` gives (instance UUID known;
    NotReady, silent, cordoned, the rest, each in natural name order), and how many it has."""

    def rank(row: _Narrow) -> int:
        name, ready, cordoned, _ = row
        if ready != ConditionStatus.TRUE or stale:
            return 0
        if name in expired:
            return 1
        return 2 if cordoned else 3

    choosable = [row for row in rows if instance_uuid(row[3]).ok]
    ordered = sorted(choosable, key=lambda row: (rank(row), natural_key(row[0])))
    return [row[0] for row in ordered[:limit]], len(choosable)


def _lines_named(kube_cluster: KubeCluster, now: datetime, names: list[str]) -> list[NodeLine]:
    return node_lines(
        kube_cluster, now, Node.objects.present().filter(cluster=kube_cluster, name__in=names)
    )


def nodegroup_node_page(
    nodegroup: NksNodegroup, now: datetime, limit: int, *, offered: int = 0
) -> NodegroupNodePage | None:
    """The nodegroup's Nodes as its page's table, cross-check and (with `offered`) unbound
    resize form show them, bounded: a narrow read of the members' names and states (Node has
    no natural-order key to page on in SQL), NodeLines only for the `limit` shown, the
    `offered` first removable ones and the members whose heartbeat Lease is due. None when
    the cluster is not watched. `nodegroup.cluster` (with its account) must be loaded."""
    kube_cluster = linked_kube_cluster(nodegroup.cluster)
    if kube_cluster is None:
        return None
    present = Node.objects.present().filter(cluster=kube_cluster)
    fields = ("name", "ready", "unschedulable", "provider_id")
    members: list[_Narrow] = list(present.in_nodegroup(nodegroup.name).values_list(*fields))
    unlabelled: list[_Narrow] = list(present.filter(nodegroup_label="").values_list(*fields))
    due = _due_heartbeat_names(kube_cluster, now)
    expired = _expired_members(kube_cluster, now, [nodegroup.name], due)
    expired_names = {line.name for line in expired}
    # Unlabelled Nodes are never counted in the check; their expired heartbeats only rank them.
    due_unlabelled = {line.name for line in _expired_members(kube_cluster, now, [""], due)}
    stale = kube_cluster.nodes_stale(now)

    def troubled(rows: Sequence[_Narrow], silent: set[str]) -> set[str]:
        return {
            name
            for name, ready, cordoned, _ in rows
            if ready != ConditionStatus.TRUE or stale or name in silent or cordoned
        }

    shown = _page_names(members, troubled(members, expired_names), limit)
    shown_unlabelled = _page_names(unlabelled, troubled(unlabelled, due_unlabelled), limit)
    removal, removable_total = _removal_names(members, expired_names, stale, offered)
    unchoosable = sorted(
        (row[0] for row in members if not instance_uuid(row[3]).ok) if offered else [],
    )
    wanted = sorted({*shown, *shown_unlabelled, *removal, *unchoosable})
    lines = {
        line.name: line for line in (_lines_named(kube_cluster, now, wanted) if wanted else [])
    }
    problem = node_watch_problem(kube_cluster, now)
    return NodegroupNodePage(
        kube_cluster=kube_cluster,
        members=[lines[name] for name in shown if name in lines],
        unlabelled=[lines[name] for name in shown_unlabelled if name in lines],
        members_total=len(members),
        unlabelled_total=len(unlabelled),
        check=counted_cross_check(
            nodegroup,
            watch_problem=problem,
            node_objects=len(members),
            nodes_ready=0
            if stale
            else sum(1 for _, ready, _, _ in members if ready == ConditionStatus.TRUE),
            expired=expired,
            now=now,
        ),
        watch_problem=problem,
        removal=[lines[name] for name in removal if name in lines],
        removable_total=removable_total,
        unchoosable=[lines[name] for name in unchoosable if name in lines],
    )
