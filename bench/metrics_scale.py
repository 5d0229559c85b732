"""Benchmark: `/metrics` and one alert evaluation at 2,000 and 100,000 leases, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/metrics_scale.py [--sizes 2000,100000] [--clusters 50] \\
        [--db-prefix bench_]

For each size a child process gets a database of its own (`<db-prefix>metrics_<size>`,
`bench_metrics_<size>` by default, dropped and re-created on the server of DATABASE_URL),
migrates it and bulk-loads a fleet like the one of issue 22 (bench/fleet_data.py builds the
rows): 50 clusters, mostly node heartbeat leases, 2 % election leases (three control-plane
leases per cluster, the rest leader elections, one leader-k8s slot group of three per
cluster), each election lease with a week of holder spans and transitions, each
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
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchdb import add_database_option  # noqa: E402
from bench.serving import percentile  # noqa: E402

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
    add_database_option(parser)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


# --- the child: one size, its own database -------------------------------------------------


def populate(total: int, clusters: int) -> None:
    from django.utils import timezone

    from bench.fleet_data import (
        current_clusters,
        lease_row,
        migrate,
        store_history,
        store_leases,
        tenure,
        vacuum_analyze,
    )
    from leases.models import Lease, LeaseTransition, schedule_expiry

    migrate()
    random.seed(22)
    now = timezone.now()
    fleet = current_clusters(
        [f"cluster-{index:02d}" for index in range(clusters)],
        now,
        current_until=now,
        observed_since=now - timedelta(days=8),
        connected_since=now - timedelta(days=8),
        last_event_at=now,
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
            slot = name.startswith("jobs-slot-")
            leases.append(
                lease_row(
                    cluster,
                    namespace,
                    name,
                    uid=f"{cluster.pk}-{index}",
                    holder=holder,
                    renewed=renewed,
                    duration=duration,
                    acquire_time=now - timedelta(days=2),
                    lease_transitions=3,
                    resource_version=str(index + 2),
                    created_at=now - timedelta(days=9),
                    group_name="jobs" if slot else "",
                    group_slot=int(name.rsplit("-", 1)[1]) if slot else None,
                )
            )
    store_leases(leases)
    election = list(Lease.objects.exclude(lease_class="node_heartbeat").order_by("id"))
    expired = random.sample(election, TROUBLED_LEADERS)
    Lease.objects.filter(pk__in=[lease.pk for lease in expired]).update(
        renew_time=now - timedelta(seconds=300),
        expires_at=now - timedelta(seconds=285),
        lease_duration_seconds=15,
    )
    # update() skips Lease.save: their schedule is written again as ingest does.
    schedule_expiry(Lease.objects.filter(pk__in=[lease.pk for lease in expired]))
    spans = []
    transitions = []
    for lease in election:
        starts = [
            now - timedelta(days=7, hours=1),
            now - timedelta(days=3),
            now - timedelta(days=2),
        ]
        for number, start in enumerate(starts):
            last = number == len(starts) - 1
            span, transition = tenure(
                lease.pk,
                lease.holder if last else f"old-{number}",
                start,
                None if last else starts[number + 1] - timedelta(seconds=20),
                previous=f"old-{number - 1}" if number else "",
            )
            spans.append(span)
            transitions.append(transition)
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
    store_history(spans, transitions)
    vacuum_analyze()


def prove_current() -> None:
    from django.utils import timezone

    from leases.models import KubeCluster

    now = timezone.now()
    KubeCluster.objects.update(leases_as_of=now, nodes_as_of=now, last_flush_at=now)


def measure() -> dict[str, Any]:
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from alerts.evaluation import run_evaluation
    from alerts.expiry_schedule import next_lease_due
    from bench.fleet_data import lease_rows_read

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
    print(json.dumps(figures))


# --- the parent: one child per size, then the table ----------------------------------------


def main() -> None:
    args = parse_args()
    if args.child:
        child(args.child, args.clusters)
        return
    from bench.benchdb import child_per_size

    sizes = [int(size) for size in args.sizes.split(",")]
    results = child_per_size(
        __file__,
        sizes,
        lambda size: f"{args.db_prefix}metrics_{size}",
        ["--clusters", str(args.clusters)],
        {"DJANGO_ENV": "development", "DEBUG": "false"},
        keep=args.keep_database,
    )
    for size, figures in results.items():
        loaded = figures["load_seconds"]
        print(f"\n== {size:,} leases, {args.clusters} clusters (loaded in {loaded} s)")
        print(
            f"/metrics: median {statistics.median(figures['metrics_ms']):.1f} ms, "
            f"p95 {percentile(figures['metrics_ms'], 95):.1f} ms, "
            f"{figures['metrics_bytes']:,} bytes, "
            f"(gzip: {figures['metrics_gzip_bytes'] or 'not offered'}), "
            f"{figures['metrics_series']:,} series, {figures['metrics_queries']} queries"
        )
        largest = ", ".join(f"{n} {c}" for n, c in figures["metrics_families"])
        print(f"  largest families: {largest}")
        print(
            f"evaluation: median {statistics.median(figures['eval_ms']):.1f} ms, "
            f"p95 {percentile(figures['eval_ms'], 95):.1f} ms, "
            f"{figures['eval_queries']} queries, "
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
