"""Links from incidents to the objects they are about: the Lease, the nodes, the nodegroup,
the NKS cluster and the Lease source (the watchers page).

Worked out at display time from the rule, the dedup key, the cluster and the listed items (what
each rule in `alerts/*rules*.py` stores), so old incidents get links too. A link is shown only
while its object exists (a Lease or Node the watcher saw deleted counts as gone); each kind
is looked up once for all the incidents of a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext

from alerts.models import Incident, Rule
from dashboard.links import lease_url, path_segment
from leases.models import KubeCluster, Lease, Node
from nks.models import NksCluster, NksNodegroup

# Rules whose key ends in <cluster>/<namespace>/<name> of one Lease.
LEASE_RULES = {Rule.LEASE_EXPIRED, Rule.LEASE_FLAPPING, Rule.FENCING_TOKEN_REUSED}
# Rules whose key ends in <account>/<cluster>/<nodegroup>.
NODEGROUP_RULES = {Rule.NODEGROUP_NOT_READY, Rule.NODEGROUP_MISMATCH, Rule.RESIZE_FAILED}
# Rules whose listed items are node names (in the incident's Kubernetes cluster).
NODE_ITEM_RULES = {Rule.NODE_HEARTBEATS_EXPIRED, Rule.NODEGROUP_NOT_READY}
NODES_LINKED = 200  # as many as the incident page lists


@dataclass(frozen=True, slots=True)
class ObjectLink:
    kind: str  # lease, node, nodegroup, nks_cluster, source
    label: str  # the kind, in the reader's language
    name: str  # untrusted text: escaped by the template
    url: str


@dataclass(slots=True)
class _Wants:
    """What one incident could link to, before knowing what exists."""

    lease: tuple[str, str, str] | None = None
    nodes: list[str] = field(default_factory=list)
    nodegroup: tuple[str, str, str] | None = None
    nks_cluster: tuple[str, str] | None = None
    source: str = ""


def _rest(incident: Incident) -> str:
    return incident.key.split(":", 1)[1] if ":" in incident.key else ""


def _wants(incident: Incident) -> _Wants:
    wants = _Wants()
    rule, rest = incident.rule, _rest(incident)
    if rule in LEASE_RULES:
        parts = rest.split("/", 2)
        if len(parts) == 3:
            wants.lease = (parts[0], parts[1], parts[2])
    elif rule in NODEGROUP_RULES:
        parts = rest.split("/", 2)
        if len(parts) == 3:
            wants.nodegroup = (parts[0], parts[1], parts[2])
            wants.nks_cluster = (parts[0], parts[1])
    elif rule == Rule.CLUSTER_UNHEALTHY:
        parts = rest.split("/", 1)
        if len(parts) == 2:
            wants.nks_cluster = (parts[0], parts[1])
    elif rule == Rule.SOURCE_STALE:
        kind, _, what = rest.partition(":")
        if kind == "watch":
            wants.source = what
        elif kind == "nks-cluster" and "/" in what:
            account, name = what.split("/", 1)
            wants.nks_cluster = (account, name)
    if rule in NODE_ITEM_RULES:
        items = (incident.details or {}).get("items") or []
        wants.nodes = [str(item) for item in items[:NODES_LINKED]]
    # Every incident of a Kubernetes cluster can lead to the watcher that feeds it.
    if not wants.source and incident.cluster:
        wants.source = incident.cluster
    return wants


def node_url(prefix: str, cluster: str, name: str) -> str:
    """The node page's URL; `prefix` is reverse("leases:clusters")."""
    return f"{prefix}{path_segment(cluster)}/nodes/{path_segment(name)}/"


def _reverse(name: str, *args: str) -> str:
    # NKS names come from the NKS API (untrusted): one its URL pattern refuses gets no link.
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


def _any(conditions: list[Q]) -> Q:
    return reduce(or_, conditions)


def incident_links(incidents: Sequence[Incident]) -> dict[int, list[ObjectLink]]:
    """Incident id -> its links (lease, NKS cluster, nodegroup, nodes, source), in that order.

    At most one query per kind of object, whatever the number of incidents.
    """
    wants = {incident.pk: (_wants(incident), incident.cluster) for incident in incidents}
    leases = {w.lease for w, _ in wants.values() if w.lease}
    groups = {w.nodegroup for w, _ in wants.values() if w.nodegroup}
    nks = {w.nks_cluster for w, _ in wants.values() if w.nks_cluster}
    nodes = {(cluster, name) for w, cluster in wants.values() for name in w.nodes if cluster}
    sources = {w.source for w, _ in wants.values() if w.source}

    # One term per namespace, on the lease's own columns: the database reads the (namespace,
    # name) index for each; an OR of terms naming the joined cluster too read every lease
    # (and took longer to plan than to run). The cluster is checked on the rows found.
    found_leases = (
        leases
        & set(
            Lease.objects.live()
            .filter(cluster__name__in={c for c, _, _ in leases})
            .filter(
                _any(
                    [
                        Q(namespace=ns, name__in={n for _, nns, n in leases if nns == ns})
                        for ns in {ns for _, ns, _ in leases}
                    ]
                )
            )
            .values_list("cluster__name", "namespace", "name")
        )
        if leases
        else set()
    )
    found_nks = (
        {
            (account, name): uuid
            for account, name, uuid in NksCluster.objects.filter(
                _any([Q(account__name=a, name=n) for a, n in nks])
            ).values_list("account__name", "name", "uuid")
        }
        if nks
        else {}
    )
    found_groups = (
        {
            (account, cluster, name): uuid
            for account, cluster, name, uuid in NksNodegroup.objects.filter(gone_at__isnull=True)
            .filter(
                _any([Q(cluster__account__name=a, cluster__name=c, name=n) for a, c, n in groups])
            )
            .values_list("cluster__account__name", "cluster__name", "name", "cluster__uuid")
        }
        if groups
        else {}
    )
    # As for leases: the (cluster, name) index serves each name, the cluster is checked after.
    found_nodes = (
        nodes
        & set(
            Node.objects.present()
            .filter(cluster__name__in={c for c, _ in nodes}, name__in={n for _, n in nodes})
            .values_list("cluster__name", "name")
        )
        if nodes
        else set()
    )
    found_sources = (
        set(KubeCluster.objects.filter(name__in=sources).values_list("name", flat=True))
        if sources
        else set()
    )

    lease_prefix = reverse("leases:index")
    # Node URLs built like lease URLs (a page may link 200 nodes): checked against reverse().
    node_prefix = reverse("leases:clusters")
    sources_url = reverse("leases:clusters")
    links: dict[int, list[ObjectLink]] = {}
    for incident_id, (want, cluster) in wants.items():
        out: list[ObjectLink] = []
        if want.lease and want.lease in found_leases:
            c, ns, n = want.lease
            out.append(
                ObjectLink(
                    "lease", gettext("Lease"), f"{ns}/{n}", lease_url(lease_prefix, c, ns, n)
                )
            )
        if want.nks_cluster and want.nks_cluster in found_nks:
            uuid = found_nks[want.nks_cluster]
            url = _reverse("nks:cluster", uuid)
            if url:
                out.append(
                    ObjectLink("nks_cluster", gettext("NKS cluster"), want.nks_cluster[1], url)
                )
        if want.nodegroup and want.nodegroup in found_groups:
            uuid = found_groups[want.nodegroup]
            url = _reverse("nks:nodegroup", uuid, want.nodegroup[2])
            if url:
                out.append(ObjectLink("nodegroup", gettext("Nodegroup"), want.nodegroup[2], url))
        for name in want.nodes:
            if (cluster, name) in found_nodes:
                out.append(
                    ObjectLink(
                        "node",
                        gettext("Node"),
                        name,
                        node_url(node_prefix, cluster, name),
                    )
                )
        if want.source and want.source in found_sources:
            out.append(
                ObjectLink(
                    "source",
                    gettext("Lease source"),
                    want.source,
                    f"{sources_url}#watchers",
                )
            )
        links[incident_id] = out
    return links
