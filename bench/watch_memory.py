"""Benchmark: the watch worker's memory per stored Lease and Node, in a real watcher process.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/watch_memory.py

The fake API server runs in a child process, seeded with the objects of one case; the
watcher is `manage.py watch_leases` in a process of its own (the loop the Celery task runs),
reading that server over real HTTP and writing into PostgreSQL. Its resident set size is
read from /proc while it lists, and once every object is stored, the list is done and the
watcher has settled. Cases:
  - an empty cluster: the process's own size, which the other cases are measured against;
  - 2,000 and 100,000 node heartbeat Leases;
  - 2,000 and 20,000 Nodes (without Leases: their cost apart).
Printed per case: objects, seconds until stored, the settled RSS and the peak RSS (VmHWM),
and bytes per stored object: (settled RSS - the empty cluster's) / objects; and for each
resource the marginal bytes per object between its two sizes, which the fixed costs
(imports, connections, a page in flight) do not blur.
Target (issue 22): at most about 2 KB per stored Lease and Node; 100,000 Leases listed in
bounded memory (the peak does not grow with the list as the objects it holds would).

It creates and drops its own database (`bench_watch_memory`, or $BENCH_DATABASE). `--quick`
runs the small cases only.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.benchdb import create_bench_database, drop_bench_database  # noqa: E402

BENCH_DATABASE = os.environ.get("BENCH_DATABASE", "bench_watch_memory")
SETTLE_SECONDS = 3.0
STORE_TIMEOUT_SECONDS = 600.0


@dataclass(frozen=True)
class Case:
    label: str
    leases: int = 0
    nodes: int = 0

    @property
    def objects(self) -> int:
        return self.leases + self.nodes


@dataclass(frozen=True)
class Figures:
    case: Case
    seconds: float  # from the watcher's start until every object was stored and listed
    rss: int  # bytes, settled
    peak: int  # bytes, VmHWM


def fake_server_process(commands: Connection, case: Case) -> None:
    """The fake API server with the case's objects, until told to stop."""
    from fakes.kube import FakeApiServer

    server = FakeApiServer(bookmark_interval=5.0).start()
    if case.leases:
        server.store.seed_node_leases(case.leases)
    if case.nodes:
        server.store.seed_nodes(case.nodes, with_leases=False)
    commands.send(server.url)
    commands.recv()
    server.stop()


def memory_of(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in {"VmRSS", "VmHWM"}:
            values[name] = int(rest.split()[0]) * 1024
    return values["VmRSS"], values["VmHWM"]


def stored(cluster_id: int, case: Case) -> bool:
    """Every object of the case is a row, and both lists have completed."""
    from leases.models import KubeCluster, Lease, Node

    cluster = KubeCluster.objects.get(pk=cluster_id)
    if cluster.leases_as_of is None or cluster.nodes_as_of is None:
        return False
    return (
        Lease.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True).count() >= case.leases
        and Node.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True).count()
        >= case.nodes
    )


def run_case(context: multiprocessing.context.SpawnContext, case: Case) -> Figures:
    import yaml

    from fakes.kube import kubeconfig_document
    from leases.services import register_kube_cluster

    parent, child = context.Pipe()
    server = context.Process(target=fake_server_process, args=(child, case), daemon=True)
    server.start()
    url = parent.recv()
    kubeconfig = yaml.safe_dump(kubeconfig_document(url, token=None, context_name=case.label))
    cluster, _ = register_kube_cluster(case.label, kubeconfig=kubeconfig, replace=True)
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    watcher = subprocess.Popen(
        [sys.executable, str(REPO_ROOT / "manage.py"), "watch_leases", "--cluster", case.label],
        env=env,
        cwd=REPO_ROOT,
    )
    try:
        started = time.monotonic()
        while not stored(cluster.id, case):
            if watcher.poll() is not None:
                raise SystemExit(f"the watcher of {case.label} ended ({watcher.returncode})")
            if time.monotonic() - started > STORE_TIMEOUT_SECONDS:
                raise SystemExit(f"{case.label}: not stored within {STORE_TIMEOUT_SECONDS} s")
            time.sleep(0.2)
        seconds = time.monotonic() - started
        time.sleep(SETTLE_SECONDS)
        rss, peak = memory_of(watcher.pid)
        return Figures(case, seconds, rss, peak)
    finally:
        watcher.send_signal(signal.SIGTERM)
        try:
            watcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
        parent.send("stop")
        server.join(timeout=30)


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    url, admin = create_bench_database(BENCH_DATABASE)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("LOG_LEVEL", "warning")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)  # the embedded default's shared cache
    context = multiprocessing.get_context("spawn")
    cases = [
        Case("empty"),
        Case("leases-2k", leases=2_000),
        Case("nodes-2k", nodes=2_000),
    ]
    if not quick:
        cases += [Case("leases-100k", leases=100_000), Case("nodes-20k", nodes=20_000)]
    try:
        results = {}
        for case in cases:
            figures = run_case(context, case)
            results[case.label] = figures
            base = results["empty"].rss
            per_object = (figures.rss - base) / case.objects if case.objects else 0.0
            print(
                f"{case.label:>12}: {case.objects:>7,} objects stored in "
                f"{figures.seconds:6.1f} s; RSS {figures.rss / 2**20:7.1f} MiB "
                f"(peak {figures.peak / 2**20:7.1f} MiB); "
                + (f"{per_object:,.0f} bytes per stored object" if case.objects else "baseline"),
                flush=True,
            )
        for small, large in (("leases-2k", "leases-100k"), ("nodes-2k", "nodes-20k")):
            if small in results and large in results:
                a, b = results[small], results[large]
                marginal = (b.rss - a.rss) / (b.case.objects - a.case.objects)
                print(f"marginal {small} -> {large}: {marginal:,.0f} bytes per object")
        print("target: about 2 KB per stored Lease and Node (issue 22)")
    finally:
        from django.db import connections

        connections.close_all()
        drop_bench_database(BENCH_DATABASE, admin)


if __name__ == "__main__":
    main()
