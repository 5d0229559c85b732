"""Benchmark: `/metrics` and one alert evaluation at 2,000 and 100,000 leases, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/metrics_scale.py [--sizes 2000,100000] [--clusters 50]

For each size a child process gets a database of its own (`bench_metrics_<size>`, dropped
and re-created on the server of DATABASE_URL), migrates it and bulk-loads a fleet like the
one of issue 22: 50 clusters, mostly node heartbeat leases, 2 % election leases (three
control-plane leases per cluster, the rest leader elections, one leader-k8s slot group of
three per cluster), each election lease with a week of holder spans and transitions, each
cluster watched for the last eight days. Healthy leases are renewed with an hour-long
duration, so their state does not drift while the benchmark runs.

What can be in trouble is the same number at every size (20 expired node leases, 5
expired election leases, 5 flapping leases, 2 fencing-token reuses), so the 100k/2k ratio
shows what healthy leases cost. Each cluster's data is proved current (`leases_as_of`)
right before each measurement, as a live watcher does about once a second.

Printed, per size: `/metrics` (median and p95 of 5 GETs through Django's handler, bytes
plain and gzipped, series, the largest families, queries), one evaluation (`run_evaluation`
without dispatch, plus the read that finds the next lease due, `next_lease_due`; median and
p95 of 5 after a first run that opens the incidents; its queries and the rows PostgreSQL
read from the leases table: sequential reads plus index fetches), and the 100k/2k ratios.
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
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TROUBLED_NODES = 20
TROUBLED_LEADERS = 5
FLAPPING = 5
FENCING = 2
ROUNDS = 5


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="2000,100000", help="comma-separated lease counts")
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--keep-database", action="store_true")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


# --- the child: one size, its own database -------------------------------------------------


def populate(total: int, clusters: int) -> None:
    from django.core.management import call_command
    from django.utils import timezone

    from dashboard.natural import natural_key
    from leases.classify import classify_lease
    from leases.models import (
        KubeCluster,
        Lease,
        LeaseHolderSpan,
        LeaseTransition,
        WatchCoverage,
    )

    try:
        from leases.models import schedule_expiry
    except ImportError:  # before the expiry schedule (the "before" figures)
        schedule_expiry = None

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    random.seed(22)
    now = timezone.now()
    rows = [
        KubeCluster(
            name=f"cluster-{index:02d}",
            connected=True,
            connected_since=now - timedelta(days=8),
            last_event_at=now,
            last_flush_at=now,
            leases_as_of=now,
            nodes_as_of=now,
            leases_observed_since=now - timedelta(days=8),
            nodes_observed_since=now - timedelta(days=8),
            resource_version="1",
            events_total=1000 * index,
        )
        for index in range(clusters)
    ]
    fleet = KubeCluster.objects.bulk_create(rows)
    WatchCoverage.objects.bulk_create(
        WatchCoverage(cluster=c, started_at=now - timedelta(days=8), last_seen_at=now)
        for c in fleet
    )
    per_cluster = total // clusters
    elections = max(4 + 3, round(per_cluster * 0.02))
    leases: list[Lease] = []
    node_trouble = set(random.sample(range(clusters * (per_cluster - elections)), TROUBLED_NODES))
    node_index = 0
    for cluster in fleet:
        for index in range(per_cluster):
            if index < 3:
                namespace = "kube-system"
                name = ("kube-controller-manager", "kube-scheduler", "cloud-controller-manager")[
                    index
                ]
                holder = f"master-{index}_{random.getrandbits(64):016x}"
            elif index < 6:
                namespace, name = "apps", f"jobs-slot-{index - 3}"
                holder = f"{random.getrandbits(64):016x}"
            elif index < elections:
                namespace = f"team-{index % 20:02d}"
                name = f"controller-{index:04d}-leader"
                holder = f"pod-{random.getrandbits(32):08x}"
            else:
                namespace, name = "kube-node-lease", f"node-{index:05d}"
                holder = name
            troubled = False
            if namespace == "kube-node-lease":
                troubled = node_index in node_trouble
                node_index += 1
            if troubled:
                renewed, duration = now - timedelta(seconds=300), 40
            else:
                renewed, duration = now - timedelta(seconds=random.uniform(0, 10)), 3600
            leases.append(
                Lease(
                    cluster=cluster,
                    namespace=namespace,
                    name=name,
                    uid=f"{cluster.pk}-{index}",
                    lease_class=classify_lease(namespace, name, {}),
                    holder=holder,
                    identity=holder,
                    acquire_time=now - timedelta(days=2),
                    renew_time=renewed,
                    lease_duration_seconds=duration,
                    expires_at=renewed + timedelta(seconds=duration),
                    lease_transitions=3,
                    resource_version=str(index + 2),
                    created_at=now - timedelta(days=9),
                    observed_at=renewed,
                    name_key=natural_key(name),
                    group_name="jobs" if name.startswith("jobs-slot-") else "",
                    group_slot=int(name.rsplit("-", 1)[1]) if name.startswith("jobs-") else None,
                    library="leader_k8s" if name.startswith("jobs-slot-") else "plain",
                )
            )
    Lease.objects.bulk_create(leases, batch_size=5000)
    election = list(Lease.objects.exclude(lease_class="node_heartbeat").order_by("id"))
    expired = random.sample(election, TROUBLED_LEADERS)
    Lease.objects.filter(pk__in=[lease.pk for lease in expired]).update(
        renew_time=now - timedelta(seconds=300),
        expires_at=now - timedelta(seconds=285),
        lease_duration_seconds=15,
    )
    if schedule_expiry is not None:
        # bulk_create and update() skip Lease.save: the schedule is written as ingest does.
        schedule_expiry(Lease.objects.only("holder", "expires_at", "lease_duration_seconds"))
    spans: list[LeaseHolderSpan] = []
    transitions: list[LeaseTransition] = []
    for lease in election:
        starts = [
            now - timedelta(days=7, hours=1),
            now - timedelta(days=3),
            now - timedelta(days=2),
        ]
        for number, start in enumerate(starts):
            last = number == len(starts) - 1
            spans.append(
                LeaseHolderSpan(
                    lease=lease,
                    holder=lease.holder if last else f"old-{number}",
                    started_at=start,
                    ended_at=None if last else starts[number + 1] - timedelta(seconds=20),
                )
            )
            transitions.append(
                LeaseTransition(
                    lease=lease,
                    from_holder=f"old-{number - 1}" if number else "",
                    to_holder=lease.holder if last else f"old-{number}",
                    observed_at=start,
                )
            )
    for lease in random.sample(election, FLAPPING):
        for step in range(5):
            transitions.append(
                LeaseTransition(
                    lease=lease,
                    from_holder=f"flap-{step}",
                    to_holder=f"flap-{step + 1}",
                    observed_at=now - timedelta(seconds=60 * (step + 1)),
                )
            )
    for lease in random.sample([lease for lease in election if lease.group_name], FENCING):
        transitions.append(
            LeaseTransition(
                lease=lease,
                from_holder="other",
                to_holder="old-0",
                observed_at=now - timedelta(minutes=30),
                fencing_reused=True,
            )
        )
    LeaseHolderSpan.objects.bulk_create(spans, batch_size=5000)
    LeaseTransition.objects.bulk_create(transitions, batch_size=5000)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def prove_current() -> None:
    from django.utils import timezone

    from leases.models import KubeCluster

    now = timezone.now()
    KubeCluster.objects.update(leases_as_of=now, nodes_as_of=now, last_flush_at=now)


def lease_rows_read() -> int:
    """Rows of the leases table read so far in this transaction (PostgreSQL's own count)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = 'leases_lease'"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def measure() -> dict[str, Any]:
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from alerts.evaluation import run_evaluation
    from alerts.expiry_schedule import next_lease_due

    client = Client()
    times: list[float] = []
    body = b""
    queries = 0
    for _ in range(ROUNDS):
        prove_current()
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
            times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
        body, queries = response.content, len(captured)
    packed = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_ACCEPT_ENCODING="gzip")
    gzip_bytes = len(packed.content) if packed.get("Content-Encoding") == "gzip" else None
    lines = [line for line in body.decode().splitlines() if line and not line.startswith("#")]
    families = Counter(line.split("{", 1)[0].split(" ", 1)[0] for line in lines)

    prove_current()
    first = run_evaluation(dispatch=False)
    assert first is not None and not first.errors, first
    eval_times: list[float] = []
    eval_queries = 0
    rows_read = 0
    for _ in range(ROUNDS):
        prove_current()
        with transaction.atomic(), CaptureQueriesContext(connection) as captured:
            before = lease_rows_read()
            started = time.perf_counter()
            summary = run_evaluation(dispatch=False)
            # What dispatch adds besides queueing a task: finding the next lease due.
            next_lease_due(timezone.now())
            eval_times.append(time.perf_counter() - started)
            rows_read = lease_rows_read() - before
        assert summary is not None and not summary.errors, summary
        eval_queries = len(captured) - 2  # less the two reads of the row count
    from alerts.models import Incident

    return {
        "metrics_ms": [round(t * 1000, 1) for t in times],
        "metrics_bytes": len(body),
        "metrics_gzip_bytes": gzip_bytes,
        "metrics_series": len(lines),
        "metrics_queries": queries,
        "metrics_families": families.most_common(6),
        "eval_ms": [round(t * 1000, 1) for t in eval_times],
        "eval_queries": eval_queries,
        "eval_lease_rows_read": rows_read,
        "open_incidents": Incident.objects.filter(resolved_at__isnull=True).count(),
    }


def child(size: int, clusters: int) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("LOG_LEVEL", "warning")
    django.setup()
    started = time.perf_counter()
    populate(size, clusters)
    load_seconds = time.perf_counter() - started
    figures = measure()
    figures["load_seconds"] = round(load_seconds, 1)
    print("RESULT " + json.dumps(figures))


# --- the parent: one child per size, then the table ----------------------------------------


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.child, args.clusters)
        return
    from bench.benchdb import create_bench_database, drop_bench_database

    sizes = [int(size) for size in args.sizes.split(",")]
    results: dict[int, dict[str, Any]] = {}
    for size in sizes:
        name = f"bench_metrics_{size}"
        url, admin = create_bench_database(name)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("REDIS_")},
            "DATABASE_URL": url,
            "DJANGO_ENV": "development",
            "DEBUG": "false",
        }
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(size), "--clusters", str(args.clusters)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
                cwd=REPO,
            )
            if done.returncode != 0:
                sys.exit(f"size {size} failed:\n{done.stdout}\n{done.stderr}")
            line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
            results[size] = json.loads(line.removeprefix("RESULT "))
        finally:
            if not args.keep_database:
                drop_bench_database(name, admin)
    for size, figures in results.items():
        loaded = figures["load_seconds"]
        print(f"\n== {size:,} leases, {args.clusters} clusters (loaded in {loaded} s)")
        print(
            f"/metrics: median {statistics.median(figures['metrics_ms']):.1f} ms, "
            f"p95 {p95(figures['metrics_ms']):.1f} ms, {figures['metrics_bytes']:,} bytes, "
            f"(gzip: {figures['metrics_gzip_bytes'] or 'not offered'}), "
            f"{figures['metrics_series']:,} series, {figures['metrics_queries']} queries"
        )
        largest = ", ".join(f"{n} {c}" for n, c in figures["metrics_families"])
        print(f"  largest families: {largest}")
        print(
            f"evaluation: median {statistics.median(figures['eval_ms']):.1f} ms, "
            f"p95 {p95(figures['eval_ms']):.1f} ms, {figures['eval_queries']} queries, "
            f"{figures['eval_lease_rows_read']:,} lease rows read, "
            f"{figures['open_incidents']} open incidents"
        )
    if len(sizes) >= 2:
        low, high = results[sizes[0]], results[sizes[-1]]

        def ratio(key: str, median: bool = False) -> str:
            a, b = low[key], high[key]
            if median:
                a, b = statistics.median(a), statistics.median(b)
            return f"{b / a:.1f}x" if a else "n/a"

        print(f"\n{sizes[-1]:,}/{sizes[0]:,}:")
        print(
            f"  /metrics time {ratio('metrics_ms', True)}, bytes {ratio('metrics_bytes')}, "
            f"series {ratio('metrics_series')}, queries {ratio('metrics_queries')}"
        )
        print(
            f"  evaluation time {ratio('eval_ms', True)}, queries {ratio('eval_queries')}, "
            f"lease rows read {ratio('eval_lease_rows_read')}"
        )


if __name__ == "__main__":
    main()
