"""Benchmark: the lease pages at 2,000 and at 100,000 leases, in one run, uncached.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/lease_pages.py
        [--sizes 2000,100000] [--repeat 7] [--explain] [--db-prefix bench_]

Builds a fleet of 50 clusters (98 % node heartbeat leases, 2 % leader elections, some of
them leader-k8s slot groups, holder history for the elections, about 1 % expired and a few
flapping) in database `<db-prefix>table_pages` (`bench_table_pages`: dropped and
re-created), grows it from one size to the next, and for each page and region the Leases
pages serve (the Leases page, its table region problems first, unfiltered and filtered, its
second page and the cluster order, a lease page, the groups page, a group page, the API's
first pages) prints the median and p95 time of `--repeat` requests through Django's test
client (no gunicorn, no shared cache), the queries per request and their database time, and
the ratio of the largest size to the smallest. Targets (issue 22): at most 2x, and under
300 ms.
`--explain` prints PostgreSQL's plan of the table region's statement at each size.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.benchdb import (  # noqa: E402
    add_database_option,
    create_bench_database,
    drop_bench_database,
)
from bench.serving import percentile, timed_client_gets  # noqa: E402

CLUSTERS = 50
ELECTION_SHARE = 50  # one lease in 50 is a leader election
FILTERED = "cluster=edge-07&class=node_heartbeat&state=held"


@dataclass
class Figure:
    median_ms: float
    p95_ms: float
    queries: int
    database_ms: float


def grow(start: int, stop: int) -> None:
    """Leases number `start` .. `stop` of the fleet, spread over the clusters."""
    from django.utils import timezone

    from bench.fleet_data import flapping, lease_row, store_leases
    from leases.models import KubeCluster, LeaseTransition

    now = timezone.now()
    rng = random.Random(start)
    clusters = list(KubeCluster.objects.order_by("name"))
    leases = []
    for index in range(start, stop):
        number = index // CLUSTERS
        group = ""
        if index % ELECTION_SHARE == 0:
            namespace = f"team-{number % 40:02d}"
            if number % 4 == 0:
                group = f"workers-{number // 16}"
                name = f"{group}-slot-{(number // 4) % 4}"
            else:
                name = f"controller-{number:05d}"
            holder = f"pod-{rng.getrandbits(32):08x}"
        else:
            namespace, name = "kube-node-lease", f"node-{number:05d}"
            holder = name
        renewed = now - timedelta(seconds=rng.uniform(0, 8))
        # Nothing renews the leases while the pages are read: a long duration keeps the held
        # ones held from the first request to the last; a few are long expired.
        duration = 3_600
        if index % 97 == 0:
            renewed, duration = renewed - timedelta(minutes=10), 40
        leases.append(
            lease_row(
                clusters[index % CLUSTERS],
                namespace,
                name,
                uid=f"uid-{index}",
                holder=holder,
                renewed=renewed,
                duration=duration,
                acquire_time=renewed - timedelta(hours=1),
                lease_transitions=rng.randint(0, 20),
                resource_version=str(index),
                group_name=group,
                group_slot=(number // 4) % 4 if group else None,
            )
        )
    created = store_leases(leases)
    elections = [lease.pk for lease in created if lease.lease_class != "node_heartbeat"]
    history = [
        LeaseTransition(
            lease_id=lease_id,
            from_holder="pod-a",
            to_holder="pod-b",
            observed_at=now - timedelta(seconds=rng.uniform(0, 86_400)),
            lease_transitions=1,
        )
        for lease_id in elections
        for _ in range(5)
    ]
    # A few flap: three holder changes in the last five minutes.
    history += flapping(elections[:: max(1, len(elections) // 10)], now, rng)
    LeaseTransition.objects.bulk_create(history, batch_size=5_000)


def client() -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    from dashboard.models import ApiToken

    user, _ = User.objects.get_or_create(username="bench")
    web = Client()
    web.force_login(user)
    api = Client()
    _, token = ApiToken.issue(user, name=f"bench-{time.time()}")
    api.defaults["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    api.get("/api/v1/leader-groups")  # a token's first use is recorded
    return web, api


def targets() -> dict[str, tuple[str, str, dict[str, str]]]:
    """name -> (client, path, headers)."""
    from leases.models import Lease

    table = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}
    lease = Lease.objects.filter(lease_class="leader_election", group_name="").order_by("id")[0]
    cluster = lease.cluster.name
    slot = Lease.objects.exclude(group_name="").order_by("id")[0]
    return {
        "Leases page": ("web", "/leases/", {}),
        "table region, problems first": ("web", "/leases/", table),
        "table region, filtered": ("web", f"/leases/?{FILTERED}", table),
        "table region, elections": ("web", "/leases/?class=leader_election", table),
        "table region, page 2": ("web", "next", table),
        "table region, cluster order": ("web", "/leases/?sort=cluster", table),
        "lease page": ("web", f"/leases/{cluster}/{lease.namespace}/{lease.name}/", {}),
        "groups page": ("web", "/leases/groups/", {}),
        "group page": (
            "web",
            f"/leases/clusters/{slot.cluster.name}/groups/{slot.namespace}/{slot.group_name}/",
            {},
        ),
        "API leases, first page": ("api", "/api/v1/leases", {}),
        "API leases, problems first": ("api", "/api/v1/leases?sort=problems", {}),
        "API lease": ("api", f"/api/v1/leases/{cluster}/{lease.namespace}/{lease.name}", {}),
        "API leader groups": ("api", "/api/v1/leader-groups", {}),
    }


def next_page(web: Any) -> str:
    import re

    body = web.get("/leases/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="lease-table")
    found = re.search(r'href="([^"]*[?&]after=[^"]+)"', body.content.decode())
    assert found is not None, "no next page"
    return found.group(1).replace("&amp;", "&")


def measure(repeat: int) -> dict[str, Figure]:
    web, api = client()
    clients = {"web": web, "api": api}
    figures = {}
    for name, (which, path, headers) in targets().items():
        if path == "next":
            path = next_page(web)
        sample = timed_client_gets(clients[which], path, repeat, headers)
        assert sample.status == 200, (name, sample.status)
        figures[name] = Figure(
            sample.median_ms,
            percentile(sample.times_ms, 95),
            sample.queries,
            sample.database_ms[-1],
        )
    return figures


def explain() -> None:
    from django.db import connection
    from django.utils import timezone

    from dashboard.flapping import flap_policy
    from leases.models import KubeCluster
    from leases.queries import LeaseFilters, table_page

    def explaining(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        # The driver's own cursor: through Django's, the EXPLAIN would come back here.
        cursor = context["cursor"].cursor
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", params)
        print("\n".join(row[0] for row in cursor.fetchall()))
        return execute(sql, params, many, context)

    ids = dict(KubeCluster.objects.values_list("name", "pk"))
    policy = flap_policy()
    for filters in (LeaseFilters(), LeaseFilters(cluster="edge-07", state="held")):
        print(f"-- plan of the table region, {filters.params() or 'no filter'}:")
        with connection.execute_wrapper(explaining):
            table_page(filters, timezone.now(), ids, policy, None, 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="2000,100000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--explain", action="store_true")
    add_database_option(parser)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    database = f"{args.db_prefix}table_pages"
    url, admin = create_bench_database(database)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("LOG_LEVEL", "warning")
    os.environ["LEASE_TABLE_CACHE_SECONDS"] = "0"
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.conf import settings
    from django.utils import timezone

    from bench.fleet_data import current_clusters, migrate, vacuum_analyze

    settings.ALLOWED_HOSTS = ["*"]
    try:
        migrate()
        now = timezone.now()
        current_clusters(
            [f"edge-{number:02d}" for number in range(CLUSTERS)],
            now,
            # Proved current for the whole run (nothing watches these clusters).
            current_until=now + timedelta(hours=1),
            observed_since=now - timedelta(days=1),
            coverage=False,
            connected_since=now,
            last_event_at=now,
        )
        results: dict[int, dict[str, Figure]] = {}
        built = 0
        for size in sizes:
            grow(built, size)
            built = size
            vacuum_analyze()
            if args.explain:
                explain()
            results[size] = measure(args.repeat)
        first, last = sizes[0], sizes[-1]
        print(
            f"\n{'page':34} " + " ".join(f"{f'{size:,} leases':>26}" for size in sizes) + "  ratio"
        )
        print(f"{'':34} " + " ".join(f"{'median/p95 ms, q, db ms':>26}" for _ in sizes))
        for name in results[first]:
            cells = []
            for size in sizes:
                figure = results[size][name]
                cells.append(
                    f"{figure.median_ms:7.1f}/{figure.p95_ms:6.1f} {figure.queries:3d} "
                    f"{figure.database_ms:6.1f}"
                )
            ratio = results[last][name].median_ms / results[first][name].median_ms
            print(f"{name:34} " + " ".join(f"{cell:>26}" for cell in cells) + f"  {ratio:4.1f}x")
        print("targets: at most 2x the smallest size, and under 300 ms")
    finally:
        from django.db import connections

        connections.close_all()
        drop_bench_database(database, admin)


if __name__ == "__main__":
    main()
