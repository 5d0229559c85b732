"""Benchmark: what the overview, node, watchers, NKS and alerts pages (and each of their
HTMX regions) cost at two fleet sizes, uncached, through Django's test client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/pages_cost.py [--sizes 2000,100000] [--clusters 50] [--runs 5] \\
        [--db-prefix bench_]

For each size it (re)creates a database `<db-prefix>pages_<size>` (`bench_pages_<size>` by
default), migrates it and bulk-loads a fleet over `--clusters` clusters (bench/fleet_data.py
builds the rows): node heartbeat leases (most of them) with their expiry schedule, a few %
election leases with holder history (spans, transitions, watch coverage), one Node per
heartbeat lease over a fifth of them (20,000 Nodes at 100,000 leases), one NKS cluster per
Kubernetes cluster with its nodegroups and health samples, and open incidents. Then it
renders each page and region `--runs` times in a child process of its own and prints, per
size, the median and worst time, the number of queries and their database time; and at the
end the ratio of the largest size to the smallest. The shared cache is off
(LEASE_TABLE_CACHE_SECONDS=0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchdb import add_database_option  # noqa: E402
from bench.serving import timed_client_gets  # noqa: E402

# Election leases are a few % of a fleet's leases; node heartbeats are the rest.
ELECTION_SHARE = 0.03
NODES_PER_LEASE = 0.2
NODEGROUPS_PER_CLUSTER = 4
INCIDENTS_PER_LEASE = 0.002


def populate(size: int, clusters: int) -> dict[str, str]:
    """The fleet of `size` leases; returns the paths to measure (and the session key)."""
    from django.contrib.auth.models import User
    from django.utils import timezone

    from alerts.models import Incident
    from bench.fleet_data import (
        current_clusters,
        lease_incident,
        lease_row,
        migrate,
        nks_account,
        nks_cluster_row,
        node_row,
        nodegroup_row,
        store_history,
        store_leases,
        tenure,
        vacuum_analyze,
    )
    from bench.serving import signed_in_session
    from leases.models import ConditionStatus, Lease, Node, NodeReadyChange
    from nks.models import HealthSample, NksCluster, NksNodegroup, ResizeRequest

    migrate()
    random.seed(size)
    now = timezone.now()
    ahead = now + timedelta(hours=2)  # nothing renews during the run: keep the data current
    kube = current_clusters(
        [f"c{index:02d}" for index in range(clusters)],
        now,
        current_until=ahead,
        observed_since=now - timedelta(days=2),
        last_list_at=now - timedelta(days=2),
        nodes_watch="watching",
    )
    per_cluster = size // clusters
    elections = max(1, int(per_cluster * ELECTION_SHARE))
    nodes = max(1, int(size * NODES_PER_LEASE) // clusters)
    leases: list[Lease] = []
    node_rows: list[Node] = []
    for cluster in kube:
        for index in range(per_cluster):
            election = index < elections
            if election:
                namespace = f"team-{index % 7}"
                name = f"controller-{index:04d}"
                holder = f"pod-{random.getrandbits(32):08x}"
                duration = 3_600
            else:
                namespace, name = "kube-node-lease", f"node-{index:05d}"
                holder, duration = name, 3_600
            renewed = now - timedelta(seconds=random.uniform(0, 10))
            if index % 97 == 5:
                renewed, duration = now - timedelta(minutes=10), 40  # a few expired
            if index % 89 == 7:
                renewed, duration = now - timedelta(seconds=30), 40  # a few expiring soon
            if index % 211 == 3:
                holder = ""
            leases.append(
                lease_row(
                    cluster,
                    namespace,
                    name,
                    uid=f"{cluster.pk}-{index}",
                    holder=holder,
                    renewed=renewed,
                    duration=duration,
                    acquire_time=renewed - timedelta(hours=1),
                    lease_transitions=3,
                    resource_version=str(index),
                    created_at=now - timedelta(days=3),
                )
            )
            if not election and index - elections < nodes:
                node_rows.append(
                    node_row(
                        cluster,
                        name,
                        provider_id=f"openstack:///{cluster.pk:04d}{index:08d}",
                        nodegroup=f"ng-{(index - elections) % NODEGROUPS_PER_CLUSTER}",
                        ready=index % 101 != 0,
                        observed_at=now,
                        uid=f"n-{cluster.pk}-{index}",
                        conditions={"Ready": {"status": "True", "reason": "KubeletReady"}},
                        ready_since=now - timedelta(days=1),
                        kubelet_version="v1.30.1",
                        internal_address="10.0.0.1",
                        created_at=now - timedelta(days=3),
                    )
                )
    store_leases(leases)
    Node.objects.bulk_create(node_rows, batch_size=5_000)
    election_ids = list(
        Lease.objects.exclude(namespace="kube-node-lease").values_list("id", flat=True)
    )
    spans, transitions = [], []
    for lease_id in election_ids:
        # Two days of holders with a gap or two: the availability figures have work to do.
        start = now - timedelta(days=2)
        for turn in range(6):
            end = start + timedelta(hours=8)
            span, transition = tenure(
                lease_id,
                f"pod-{turn}",
                start,
                None if turn == 5 else end,
                previous=f"pod-{turn - 1}",
                lease_transitions=turn,
            )
            spans.append(span)
            transitions.append(transition)
            start = end + timedelta(seconds=random.choice([0, 0, 30, 600]))
    store_history(spans, transitions)
    node_ids = list(Node.objects.values_list("id", flat=True)[: max(10, len(node_rows) // 50)])
    NodeReadyChange.objects.bulk_create(
        (
            NodeReadyChange(
                node_id=node_id,
                from_status=ConditionStatus.TRUE,
                to_status=ConditionStatus.FALSE,
                observed_at=now - timedelta(hours=turn),
            )
            for node_id in node_ids
            for turn in range(3)
        ),
        batch_size=5_000,
    )

    account = nks_account(now, name="bench")
    nks_clusters = NksCluster.objects.bulk_create(
        nks_cluster_row(
            account, cluster, f"00000000-0000-0000-0000-{cluster.pk:012d}", nodes, nodes, now
        )
        for cluster in kube
    )
    NksNodegroup.objects.bulk_create(
        nodegroup_row(
            nks_cluster,
            f"ng-{nks_cluster.pk}-{group}",
            f"ng-{group}",
            nodes // NODEGROUPS_PER_CLUSTER,
            now,
            min_node_count=1,
            max_node_count=10_000,
        )
        for nks_cluster in nks_clusters
        for group in range(NODEGROUPS_PER_CLUSTER)
    )
    HealthSample.objects.bulk_create(
        HealthSample(
            cluster=nks_cluster,
            taken_at=now - timedelta(minutes=10 * turn),
            health="healthy",
            freshness="FRESH",
            nodes_ready=nodes,
            nodes_not_ready=0,
        )
        for nks_cluster in nks_clusters
        for turn in range(144)
    )
    incidents = max(5, int(size * INCIDENTS_PER_LEASE))
    Incident.objects.bulk_create(
        lease_incident(
            "c00",
            "kube-node-lease",
            f"node-{index:05d}",
            since=now - timedelta(minutes=index),
            resolved_at=None if index % 2 else now,
            opened_at=now - timedelta(minutes=index),
            last_seen_at=now,
        )
        for index in range(incidents)
    )
    vacuum_analyze()

    user = User.objects.create_superuser("bench", "bench@example.com", "x")
    first = nks_clusters[0]
    nodegroup = NksNodegroup.objects.filter(cluster=first).order_by("name").first()
    assert nodegroup is not None
    resize = ResizeRequest.objects.create(
        username="bench",
        cluster=first,
        nodegroup=nodegroup,
        nodegroup_name=nodegroup.name,
        from_count=3,
        to_count=4,
        reason="bench",
        state="succeeded",
    )
    return {
        "session": signed_in_session(user),
        "node": f"/leases/clusters/c00/nodes/node-{elections:05d}/",
        "nks_cluster": f"/clusters/{first.uuid}/",
        "nodegroup": f"/clusters/{first.uuid}/nodegroups/{nodegroup.name}/",
        "resize": f"/clusters/resizes/{resize.pk}/",
    }


def existing_paths() -> dict[str, str]:
    """The paths of a fleet loaded earlier (--reuse), with a new session for its user."""
    from django.contrib.auth.models import User

    from bench.serving import signed_in_session
    from leases.models import Node
    from nks.models import NksCluster, ResizeRequest

    first = NksCluster.objects.order_by("pk").first()
    node = Node.objects.filter(cluster__name="c00").order_by("pk").first()
    resize = ResizeRequest.objects.order_by("pk").first()
    assert first is not None and node is not None and resize is not None
    return {
        "session": signed_in_session(User.objects.get(username="bench")),
        "node": f"/leases/clusters/c00/nodes/{node.name}/",
        "nks_cluster": f"/clusters/{first.uuid}/",
        "nodegroup": f"/clusters/{first.uuid}/nodegroups/{resize.nodegroup_name}/",
        "resize": f"/clusters/resizes/{resize.pk}/",
    }


def targets(paths: dict[str, str]) -> list[tuple[str, str, str]]:
    """(label, path, HX-Target or "") of every page and region measured."""
    overview = [
        "stale-data",
        "firing",
        "lease-problems",
        "nks-overview",
        "nks-nodegroups",
        "lease-overview",
        "workers",
    ]
    return [
        ("overview", "/", ""),
        *[(f"overview#{region}", "/", region) for region in overview],
        ("node page", paths["node"], ""),
        ("node page#node-detail", paths["node"], "node-detail"),
        ("watchers /leases/clusters/", "/leases/clusters/", ""),
        ("NKS clusters", "/clusters/", ""),
        ("NKS clusters#nks-clusters", "/clusters/", "nks-clusters"),
        ("NKS cluster", paths["nks_cluster"], ""),
        ("NKS cluster#nks-cluster", paths["nks_cluster"], "nks-cluster"),
        ("nodegroup", paths["nodegroup"], ""),
        ("nodegroup#nks-nodegroup", paths["nodegroup"], "nks-nodegroup"),
        ("nodegroup#resize-progress", paths["nodegroup"], "resize-progress"),
        ("resizes", "/clusters/resizes/", ""),
        ("resizes#resize-table", "/clusters/resizes/", "resize-table"),
        ("resize", paths["resize"], ""),
        ("alerts", "/alerts/", ""),
        ("alerts#incidents", "/alerts/", "incidents"),
        ("alerts#stale-data", "/alerts/", "stale-data"),
    ]


def measure(paths: dict[str, str], runs: int) -> dict[str, dict[str, float]]:
    from django.test import Client

    client = Client()
    client.cookies["sessionid"] = paths["session"]
    results: dict[str, dict[str, float]] = {}
    for label, path, target in targets(paths):
        headers = {"HX-Request": "true", "HX-Target": target} if target else {}
        sample = timed_client_gets(client, path, runs, {"headers": headers}, warm_up=True)
        if sample.status != 200:
            raise RuntimeError(f"{label}: {path} answered {sample.status}")
        results[label] = {
            "median_ms": sample.median_ms,
            "max_ms": max(sample.times_ms),
            "db_ms": statistics.median(sample.database_ms),
            "queries": sample.queries,
            "bytes": sample.bytes,
        }
    return results


def child(size: int, clusters: int, runs: int, reuse: bool) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ["LEASE_TABLE_CACHE_SECONDS"] = "0"
    import django
    from django.conf import settings

    django.setup()
    settings.DEBUG = True  # queries are recorded only with DEBUG (CaptureQueriesContext)
    settings.ALLOWED_HOSTS = ["*"]
    started = time.perf_counter()
    paths = existing_paths() if reuse else populate(size, clusters)
    print(f"# ready: {size} leases in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    print(json.dumps(measure(paths, runs)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="2000,100000")
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument(
        "--reuse", action="store_true", help="measure databases kept by --keep-database"
    )
    add_database_option(parser)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.clusters, args.runs, args.reuse)
        return
    from bench.benchdb import child_per_size

    by_size = child_per_size(
        __file__,
        [int(value) for value in args.sizes.split(",")],
        lambda size: f"{args.db_prefix}pages_{size}",
        ["--clusters", str(args.clusters), "--runs", str(args.runs)]
        + (["--reuse"] if args.reuse else []),
        {"REQUIRE_SERVICES": ""},
        keep=args.keep_database,
        reuse=args.reuse,
    )
    sizes = sorted(by_size)
    small, large = sizes[0], sizes[-1]
    header = f"{'page / region':32}" + "".join(
        f" | {size:>7} ms  max  db ms  queries" for size in sizes
    )
    print(header + " | ratio")
    for label in by_size[small]:
        cells = "".join(
            f" | {row['median_ms']:10.1f} {row['max_ms']:5.0f} {row['db_ms']:6.1f}"
            f" {row['queries']:8.0f}"
            for size in sizes
            for row in (by_size[size][label],)
        )
        ratio = by_size[large][label]["median_ms"] / max(by_size[small][label]["median_ms"], 0.01)
        print(f"{label:32}{cells} | {ratio:5.1f}x")


if __name__ == "__main__":
    main()
