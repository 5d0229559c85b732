"""A small fleet that can grow: the same clusters, NKS clusters and incidents, more leases and
nodes. Query-count tests render a page at two sizes and compare."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from alerts.models import Incident, IncidentState, Rule, Severity
from dashboard.natural import natural_key
from leases.classify import classify_lease
from leases.models import (
    ConditionStatus,
    KubeCluster,
    Lease,
    LeaseHolderSpan,
    LeaseTransition,
    Node,
    WatchCoverage,
    schedule_expiry,
)
from nks.models import NksAccount, NksCluster, NksNodegroup, ResizeRequest
from tests.leases.factories import NOW, make_cluster

CLUSTERS = ("alpha", "beta")
NODEGROUPS = ("ng-a", "ng-b")


@dataclass
class Fleet:
    clusters: list[KubeCluster]
    nks: list[NksCluster]
    nodegroup: NksNodegroup
    resize: ResizeRequest
    size: int = 0  # leases per cluster so far
    paths: dict[str, str] = field(default_factory=dict)

    def grow_to(self, per_cluster: int) -> None:
        """Leases (a tenth of them elections, with holder history), a Node per heartbeat
        Lease, some expired, expiring soon and released, up to `per_cluster` per cluster."""
        for cluster in self.clusters:
            leases, nodes = [], []
            for index in range(self.size, per_cluster):
                election = index % 10 == 0
                namespace = "apps" if election else "kube-node-lease"
                name = f"controller-{index:04d}" if election else f"node-{index:04d}"
                renewed, duration = NOW - timedelta(seconds=2), 3_600
                if index % 7 == 1:
                    renewed, duration = NOW - timedelta(minutes=10), 40  # expired
                elif index % 7 == 2:
                    renewed, duration = NOW - timedelta(seconds=35), 40  # expiring soon
                holder = "" if index % 13 == 3 else name
                leases.append(
                    Lease(
                        cluster=cluster,
                        namespace=namespace,
                        name=name,
                        uid=f"{cluster.name}-{index}",
                        lease_class=classify_lease(namespace, name, {}),
                        holder=holder,
                        renew_time=renewed,
                        lease_duration_seconds=duration,
                        expires_at=renewed + timedelta(seconds=duration),
                        created_at=NOW - timedelta(days=3),
                        observed_at=renewed,
                        name_key=natural_key(name),
                    )
                )
                if not election:
                    group = NODEGROUPS[index % len(NODEGROUPS)]
                    nodes.append(
                        Node(
                            cluster=cluster,
                            name=name,
                            provider_id=f"openstack:///{cluster.pk:04d}{index:08d}",
                            conditions={"Ready": {"status": "True"}},
                            ready=ConditionStatus.FALSE
                            if index % 11 == 0
                            else ConditionStatus.TRUE,
                            nodegroup_label=group,
                            labels={"magnum.openstack.org/nodegroup": group},
                            observed_at=NOW,
                        )
                    )
            Lease.objects.bulk_create(leases)
            # As the ingest writes them: each lease with its expiry schedule.
            schedule_expiry(leases)
            Node.objects.bulk_create(nodes)
            history = []
            spans = []
            for lease in leases:
                if lease.namespace != "apps":
                    continue
                spans += [
                    LeaseHolderSpan(
                        lease=lease,
                        holder="pod-a",
                        started_at=NOW - timedelta(hours=30),
                        ended_at=NOW - timedelta(hours=5),
                    ),
                    LeaseHolderSpan(
                        lease=lease, holder="pod-b", started_at=NOW - timedelta(hours=4)
                    ),
                ]
                history.append(
                    LeaseTransition(
                        lease=lease,
                        from_holder="pod-a",
                        to_holder="pod-b",
                        observed_at=NOW - timedelta(hours=4),
                    )
                )
            LeaseHolderSpan.objects.bulk_create(spans)
            LeaseTransition.objects.bulk_create(history)
        self.size = per_cluster


def make_fleet() -> Fleet:
    clusters = [make_cluster(name) for name in CLUSTERS]
    for cluster in clusters:
        WatchCoverage.objects.create(
            cluster=cluster, started_at=NOW - timedelta(days=8), last_seen_at=NOW
        )
    account = NksAccount.objects.create(name="fleet", api_url="https://nks.example.com")
    nks = [
        NksCluster.objects.create(
            account=account,
            uuid=f"00000000-0000-0000-0000-{cluster.pk:012d}",
            name=cluster.name,
            status="CREATE_COMPLETE",
            health_status="HEALTHY",
            freshness="FRESH",
            polled_at=NOW,
            refreshed_at=NOW,
            kube_cluster=cluster,
        )
        for cluster in clusters
    ]
    groups = [
        NksNodegroup.objects.create(
            cluster=nks_cluster,
            uuid=f"{nks_cluster.pk}-{name}",
            name=name,
            role="worker",
            status="UPDATE_COMPLETE",
            node_count=3,
            ready=3,
            not_ready=0,
            polled_at=NOW,
        )
        for nks_cluster in nks
        for name in NODEGROUPS
    ]
    resize = ResizeRequest.objects.create(
        username="someone",
        cluster=nks[0],
        nodegroup=groups[0],
        nodegroup_name=groups[0].name,
        from_count=3,
        to_count=4,
        reason="more room",
        state="succeeded",
    )
    for index in range(6):
        Incident.objects.create(
            rule=Rule.LEASE_EXPIRED,
            key=f"lease_expired:alpha/kube-node-lease/node-{index:04d}",
            state=IncidentState.FIRING if index % 2 else IncidentState.RESOLVED,
            severity=Severity.CRITICAL if index % 3 else Severity.WARNING,
            cluster="alpha",
            title=f"Lease kube-node-lease/node-{index:04d} expired",
            since=NOW - timedelta(minutes=index),
            opened_at=NOW - timedelta(minutes=index),
            last_seen_at=NOW,
            resolved_at=None if index % 2 else NOW,
        )
    fleet = Fleet(clusters=clusters, nks=nks, nodegroup=groups[0], resize=resize)
    fleet.paths = {
        "node": "/leases/clusters/alpha/nodes/node-0005/",
        "nks_cluster": f"/clusters/{nks[0].uuid}/",
        "nodegroup": f"/clusters/{nks[0].uuid}/nodegroups/{groups[0].name}/",
        "resize": f"/clusters/resizes/{resize.pk}/",
    }
    return fleet


def queries_of(client: Client, path: str, target: str = "") -> int:
    """How many queries one render of `path` (or of its region `target`) takes."""
    headers = {"HX-Request": "true", "HX-Target": target} if target else {}
    client.get(path, headers=headers)  # the session, the preferences: read once, like a tab
    with CaptureQueriesContext(connection) as captured:
        response = client.get(path, headers=headers)
    assert response.status_code == 200, (path, target, response.status_code)
    if target:
        assert f'id="{target}"' in response.content.decode()
    return len(captured.captured_queries)


def counts_at_two_sizes(
    client: Client, fleet: Fleet, pages: list[tuple[str, str]], small: int = 20, large: int = 200
) -> dict[tuple[str, str], tuple[int, int]]:
    """(path, target) -> (queries at `small` leases per cluster, at `large`)."""
    fleet.grow_to(small)
    before = {page: queries_of(client, *page) for page in pages}
    fleet.grow_to(large)
    return {page: (before[page], queries_of(client, *page)) for page in pages}
