"""Benchmark: what the overview, node, watchers, NKS and alerts pages (and each of their
HTMX regions) cost at two fleet sizes, uncached, through Django's test client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/pages_cost.py [--sizes 2000,100000] [--clusters 50] [--runs 5]

For each size it (re)creates a database `bench_pages_<size>`, migrates it and bulk-loads a
fleet over `--clusters` clusters: node heartbeat leases (most of them), a few % election
leases with holder history (spans, transitions, watch coverage), one Node per heartbeat lease
over a fifth of them (20,000 Nodes at 100,000 leases), one NKS cluster per Kubernetes cluster
with its nodegroups and health samples, and open incidents. Then it renders each page and
region `--runs` times in a child process of its own and prints, per size, the median and
worst time, the number of queries and their database time; and at the end the ratio of the
largest size to the smallest. The shared cache is off (LEASE_TABLE_CACHE_SECONDS=0).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Election leases are a few % of a fleet's leases; node heartbeats are the rest.
ELECTION_SHARE = 0.03
NODES_PER_LEASE = 0.2
NODEGROUPS_PER_CLUSTER = 4
INCIDENTS_PER_LEASE = 0.002


def populate(size: int, clusters: int) -> dict[str, str]:
    """The fleet of `size` leases; returns the paths to measure (and the session key)."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from alerts.models import Incident, IncidentState, Rule, Severity
    from dashboard.natural import natural_key
    from leases.classify import classify_lease
    from leases.models import (
        ConditionStatus,
        KubeCluster,
        Lease,
        LeaseHolderSpan,
        LeaseLibrary,
        LeaseTransition,
        Node,
        NodeReadyChange,
        WatchCoverage,
    )
    from nks.models import HealthSample, NksAccount, NksCluster, NksNodegroup

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    random.seed(size)
    now = timezone.now()
    ahead = now + timedelta(hours=2)  # nothing renews during the run: keep the data current
    kube = KubeCluster.objects.bulk_create(
        KubeCluster(
            name=f"c{index:02d}",
            connected=True,
            connected_since=now - timedelta(days=2),
            last_event_at=ahead,
            last_flush_at=ahead,
            last_list_at=now - timedelta(days=2),
            resource_version="1",
            leases_as_of=ahead,
            nodes_as_of=ahead,
            leases_observed_since=now - timedelta(days=2),
            nodes_observed_since=now - timedelta(days=2),
            nodes_watch="watching",
        )
        for index in range(clusters)
    )
    WatchCoverage.objects.bulk_create(
        WatchCoverage(cluster=cluster, started_at=now - timedelta(days=2), last_seen_at=ahead)
        for cluster in kube
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
                Lease(
                    cluster=cluster,
                    namespace=namespace,
                    name=name,
                    uid=f"{cluster.pk}-{index}",
                    lease_class=classify_lease(namespace, name, {}),
                    holder=holder,
                    acquire_time=renewed - timedelta(hours=1),
                    renew_time=renewed,
                    lease_duration_seconds=duration,
                    expires_at=renewed + timedelta(seconds=duration),
                    lease_transitions=3,
                    resource_version=str(index),
                    created_at=now - timedelta(days=3),
                    observed_at=renewed,
                    name_key=natural_key(name),
                    library=LeaseLibrary.PLAIN,
                    identity=holder,
                )
            )
            if not election and index - elections < nodes:
                group = f"ng-{(index - elections) % NODEGROUPS_PER_CLUSTER}"
                node_rows.append(
                    Node(
                        cluster=cluster,
                        name=name,
                        uid=f"n-{cluster.pk}-{index}",
                        provider_id=f"openstack:///{cluster.pk:04d}{index:08d}",
                        conditions={"Ready": {"status": "True", "reason": "KubeletReady"}},
                        ready=ConditionStatus.FALSE if index % 101 == 0 else ConditionStatus.TRUE,
                        ready_since=now - timedelta(days=1),
                        nodegroup_label=group,
                        labels={"magnum.openstack.org/nodegroup": group},
                        kubelet_version="v1.30.1",
                        internal_address="10.0.0.1",
                        created_at=now - timedelta(days=3),
                        observed_at=now,
                    )
                )
    Lease.objects.bulk_create(leases, batch_size=5_000)
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
            spans.append(
                LeaseHolderSpan(
                    lease_id=lease_id,
                    holder=f"pod-{turn}",
                    identity=f"pod-{turn}",
                    started_at=start,
                    ended_at=None if turn == 5 else end,
                )
            )
            transitions.append(
                LeaseTransition(
                    lease_id=lease_id,
                    from_holder=f"pod-{turn - 1}",
                    to_holder=f"pod-{turn}",
                    observed_at=start,
                    lease_transitions=turn,
                )
            )
            start = end + timedelta(seconds=random.choice([0, 0, 30, 600]))
    LeaseHolderSpan.objects.bulk_create(spans, batch_size=5_000)
    LeaseTransition.objects.bulk_create(transitions, batch_size=5_000)
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

    account = NksAccount.objects.create(name="bench", api_url="https://nks.example.com")
    nks_clusters = NksCluster.objects.bulk_create(
        NksCluster(
            account=account,
            uuid=f"00000000-0000-0000-0000-{cluster.pk:012d}",
            name=cluster.name,
            status="CREATE_COMPLETE",
            health_status="HEALTHY",
            health="healthy",
            freshness="FRESH",
            health_timestamp=now,
            api_ok=True,
            node_count=nodes,
            nodes_ready=nodes,
            nodes_not_ready=0,
            polled_at=now,
            refreshed_at=now,
            kube_cluster=cluster,
        )
        for cluster in kube
    )
    NksNodegroup.objects.bulk_create(
        NksNodegroup(
            cluster=nks_cluster,
            uuid=f"ng-{nks_cluster.pk}-{group}",
            name=f"ng-{group}",
            role="worker",
            status="UPDATE_COMPLETE",
            node_count=nodes // NODEGROUPS_PER_CLUSTER,
            min_node_count=1,
            max_node_count=10_000,
            ready=nodes // NODEGROUPS_PER_CLUSTER,
            not_ready=0,
            polled_at=now,
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
        Incident(
            rule=Rule.LEASE_EXPIRED,
            key=f"lease_expired:c00/kube-node-lease/node-{index:05d}",
            state=IncidentState.FIRING if index % 2 else IncidentState.RESOLVED,
            severity=Severity.WARNING,
            cluster="c00",
            title=f"Lease kube-node-lease/node-{index:05d} expired",
            since=now - timedelta(minutes=index),
            opened_at=now - timedelta(minutes=index),
            last_seen_at=now,
            resolved_at=None if index % 2 else now,
        )
        for index in range(incidents)
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")

    user = User.objects.create_superuser("bench", "bench@example.com", "x")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "dashboard.oidc.PasswordBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    first = nks_clusters[0]
    from nks.models import ResizeRequest

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
        "session": str(session.session_key),
        "node": f"/leases/clusters/c00/nodes/node-{elections:05d}/",
        "nks_cluster": f"/clusters/{first.uuid}/",
        "nodegroup": f"/clusters/{first.uuid}/nodegroups/{nodegroup.name}/",
        "resize": f"/clusters/resizes/{resize.pk}/",
    }


def existing_paths() -> dict[str, str]:
    """The paths of a fleet loaded earlier (--reuse), with a new session for its user."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    from leases.models import Node
    from nks.models import NksCluster, ResizeRequest

    user = User.objects.get(username="bench")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "dashboard.oidc.PasswordBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.create()
    first = NksCluster.objects.order_by("pk").first()
    node = Node.objects.filter(cluster__name="c00").order_by("pk").first()
    resize = ResizeRequest.objects.order_by("pk").first()
    assert first is not None and node is not None and resize is not None
    return {
        "session": str(session.session_key),
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
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.cookies["sessionid"] = paths["session"]
    results: dict[str, dict[str, float]] = {}
    for label, path, target in targets(paths):
        headers = {"HX-Request": "true", "HX-Target": target} if target else {}
        times, db_times, queries = [], [], 0
        for turn in range(runs + 1):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(path, headers=headers)
                elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise RuntimeError(f"{label}: {path} answered {response.status_code}")
            if turn == 0:
                continue  # warm the templates and the connection
            times.append(elapsed * 1000)
            db_times.append(sum(float(q["time"]) for q in captured.captured_queries) * 1000)
            queries = len(captured.captured_queries)
        results[label] = {
            "median_ms": statistics.median(times),
            "max_ms": max(times),
            "db_ms": statistics.median(db_times),
            "queries": queries,
            "bytes": len(response.content),
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
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.clusters, args.runs, args.reuse)
        return
    from bench.benchdb import create_bench_database, drop_bench_database

    by_size: dict[int, dict[str, dict[str, float]]] = {}
    for size in [int(value) for value in args.sizes.split(",")]:
        name = f"bench_pages_{size}"
        if args.reuse:
            base = urlsplit(os.environ["DATABASE_URL"])
            url = urlunsplit(base._replace(path=f"/{name}"))
            admin = urlunsplit(base._replace(path="/postgres"))
        else:
            url, admin = create_bench_database(name)
        env = {**os.environ, "DATABASE_URL": url, "REQUIRE_SERVICES": ""}
        env.pop("REDIS_URL", None)
        output = subprocess.run(
            [sys.executable, __file__, "--child", str(size), "--clusters", str(args.clusters)]
            + ["--runs", str(args.runs)]
            + (["--reuse"] if args.reuse else []),
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if output.returncode:
            sys.exit(output.stderr)
        print(output.stderr.strip(), file=sys.stderr)
        by_size[size] = json.loads(output.stdout.strip().splitlines()[-1])
        if not (args.keep_database or args.reuse):
            drop_bench_database(name, admin)
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
