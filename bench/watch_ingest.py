"""Benchmark: Lease watch ingest, end to end, over real HTTP into PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/watch_ingest.py

The fake API server runs in a child process (so it does not share this process's GIL) with
15,000 node leases. Printed:
  1. the raw rate of reading and orjson-parsing 100,000 MODIFIED events, no database;
  2. end-to-end events/s of the real watcher (list, watch, coalesce, bulk upsert) for the
     same 100,000 events, its ratio to the raw rate, and the worst staleness (event
     received to row committed);
  3. at a real 15,000-node cluster's rate (1,500 events/s for 10 s): the worst staleness
     and the CPU share of one core used by the watcher process (PostgreSQL's own CPU is
     not included).
Targets (issue #3): >= 15,000 events/s end to end; staleness <= 2 s at full speed and
<= 1 s at 1,500/s; <= 10 % of one core at 1,500 events/s.

It creates and drops its own database (`bench_watch_ingest`) on the server of DATABASE_URL.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.benchdb import create_bench_database, drop_bench_database  # noqa: E402

NODES = 15_000
EVENTS = 100_000
REAL_RATE = 1_500
REAL_SECONDS = 10
BENCH_DATABASE = "bench_watch_ingest"


def fake_server_process(commands: Connection) -> None:
    """The fake API server, driven by commands from the benchmark over a pipe."""
    from fakes.kube import FakeApiServer

    server = FakeApiServer(event_window=EVENTS * 2, bookmark_interval=5.0).start()
    commands.send(server.url)
    prepared = None
    while True:
        command, argument = commands.recv()
        if command == "seed":
            server.store.seed_node_leases(argument)
            commands.send(server.store.resource_version)
        elif command == "prepare":
            prepared = server.store.prepare_renewals(argument)
            commands.send(server.store.resource_version)
        elif command == "publish":
            commands.send(server.store.publish(prepared))
        elif command == "paced":
            count, rate = argument
            commands.send(server.store.emit_renewals(count, rate=rate))
        elif command == "stop":
            server.stop()
            commands.send("stopped")
            return


def ask(pipe: Connection, command: str, argument: object = None) -> object:
    pipe.send((command, argument))
    return pipe.recv()


def use_bench_database() -> str:
    """Point DATABASE_URL at a fresh benchmark database; returns the maintenance URL."""
    url, admin = create_bench_database(BENCH_DATABASE)
    os.environ["DATABASE_URL"] = url
    return admin


def raw_read_rate(url: str, pipe: Connection) -> float:
    """Read and parse the stream with no database: the ceiling for the real watcher."""
    import orjson
    import yaml

    from fakes.kube import kubeconfig_document
    from leases import kube

    kubeconfig = yaml.safe_dump(kubeconfig_document(url, token=None, context_name="bench"))
    api = kube.connect(kube.ClusterConfig(kubeconfig=kubeconfig))
    start_rv = str(ask(pipe, "prepare", EVENTS))
    stream = kube.open_lease_watch(api, start_rv, timeout_seconds=600)
    publisher = threading.Thread(target=ask, args=(pipe, "publish"))
    seen = 0
    started = time.perf_counter()
    publisher.start()
    for line in stream.lines():
        event = orjson.loads(line)
        if event["type"] == "MODIFIED":
            seen += 1
            if seen == EVENTS:
                break
    elapsed = time.perf_counter() - started
    publisher.join()
    stream.close()
    return EVENTS / elapsed


def main() -> None:
    admin = use_bench_database()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("LOG_LEVEL", "warning")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import yaml

    from fakes.kube import kubeconfig_document
    from leases.models import KubeCluster, Lease
    from leases.services import register_kube_cluster
    from leases.watcher import LeaseWatcher

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=fake_server_process, args=(child,), daemon=True)
    server.start()
    url = parent.recv()
    try:
        ask(parent, "seed", NODES)
        print(f"fake API server {url}: {NODES:,} node leases; {EVENTS:,} MODIFIED events per run")

        raw_rate = raw_read_rate(url, parent)
        print(f"raw read + orjson parse (no database): {raw_rate:,.0f} events/s")

        kubeconfig = yaml.safe_dump(kubeconfig_document(url, token=None, context_name="bench"))
        cluster, _ = register_kube_cluster("bench", kubeconfig=kubeconfig, replace=True)
        stop = threading.Event()
        watcher = LeaseWatcher(cluster.id, owner="bench", stop=stop)
        thread = threading.Thread(target=watcher.run, daemon=True)
        list_started = time.perf_counter()
        thread.start()
        while Lease.objects.filter(cluster=cluster).count() < NODES:
            time.sleep(0.05)
        print(
            f"initial list of {NODES:,} leases stored in {time.perf_counter() - list_started:.2f} s"
        )
        time.sleep(1.0)

        final_rv = str(ask(parent, "prepare", EVENTS))
        watcher.max_lag_seconds = 0.0
        started = time.perf_counter()
        final_rv = str(ask(parent, "publish"))
        while KubeCluster.objects.get(pk=cluster.pk).resource_version != final_rv:
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        e2e_rate = EVENTS / elapsed
        full_speed_lag = watcher.max_lag_seconds
        print(
            f"end to end into PostgreSQL: {e2e_rate:,.0f} events/s "
            f"({EVENTS:,} events in {elapsed:.2f} s; {e2e_rate / raw_rate:.0%} of the raw rate)"
        )
        print(f"worst staleness at full speed (received -> committed): {full_speed_lag:.2f} s")

        time.sleep(1.0)
        watcher.max_lag_seconds = 0.0
        cpu_before, wall_before = time.process_time(), time.perf_counter()
        final_rv = str(ask(parent, "paced", (REAL_RATE * REAL_SECONDS, REAL_RATE)))
        while KubeCluster.objects.get(pk=cluster.pk).resource_version != final_rv:
            time.sleep(0.25)
        cpu = time.process_time() - cpu_before
        wall = time.perf_counter() - wall_before
        print(
            f"at {REAL_RATE:,} events/s for {REAL_SECONDS} s: worst staleness "
            f"{watcher.max_lag_seconds:.2f} s; watcher process CPU {cpu / wall:.1%} of one core"
        )
        print(
            "targets: >= 15,000 events/s end to end; staleness <= 2 s at full speed and <= 1 s "
            "at 1,500/s; <= 10 % of one core at 1,500 events/s"
        )
        watcher._request_stop()
        thread.join(timeout=30)
    finally:
        ask(parent, "stop")
        server.join(timeout=10)
        from django.db import connections

        connections.close_all()
        drop_bench_database(BENCH_DATABASE, admin)


if __name__ == "__main__":
    main()
