"""Benchmark: one full NKS poll, over real HTTP into PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/nks_poll.py

The fake NKS runs in a child process (so it does not share this process's GIL) with 100
clusters of 3 nodegroups and 100 ms of latency on every call. The real poll runs here: the
client lists the clusters, fetches each cluster's detail, nodegroup list, every nodegroup's
detail and the events concurrently (NKS_POLL_WORKERS, default 32), and the poller upserts
everything into PostgreSQL. Printed for the first poll (token request, all inserts) and a
steady-state one (updates): the wall time (fetch and store apart), the number of HTTP calls,
and the serial lower bound (calls x latency) with the speed-up over it.
Target (issue #4): one full poll in under 5 s.

It creates and drops its own database (`bench_nks_poll`) on the server of DATABASE_URL.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from bench.benchdb import create_bench_database, drop_bench_database  # noqa: E402

CLUSTERS = 100
LATENCY = 0.100
TARGET_SECONDS = 5.0
BENCH_DATABASE = "bench_nks_poll"


def fake_nks_process(commands: Connection) -> None:
    """The fake NKS, driven by commands from the benchmark over a pipe."""
    from fakes.nks import FakeNks

    fake = FakeNks(scenario=f"clusters:{CLUSTERS}", latency=LATENCY).start()
    commands.send({"url": fake.url, **fake.credentials()})
    while True:
        command = commands.recv()
        if command == "requests":
            commands.send(len(fake.requests_seen()))
        elif command == "clear":
            fake.clear_requests()
            commands.send("cleared")
        elif command == "stop":
            fake.stop()
            commands.send("stopped")
            return


def ask(pipe: Connection, command: str) -> Any:
    pipe.send(command)
    return pipe.recv()


def use_bench_database() -> str:
    """Point DATABASE_URL at a fresh benchmark database; returns the maintenance URL."""
    url, admin = create_bench_database(BENCH_DATABASE)
    os.environ["DATABASE_URL"] = url
    return admin


def report(label: str, result: Any, calls_seen: int) -> bool:
    store = result.store
    serial = result.http_calls * LATENCY
    print(
        f"{label}: wall {result.seconds:.2f} s (fetch {result.fetch_seconds:.2f} s, "
        f"store {result.seconds - result.fetch_seconds:.2f} s); {result.http_calls} HTTP calls "
        f"(the fake saw {calls_seen}); serial lower bound {result.http_calls} x "
        f"{LATENCY * 1000:.0f} ms = {serial:.1f} s ({serial / result.seconds:.0f}x faster); "
        f"{store.clusters} clusters, {store.nodegroups} nodegroups, {store.events_written} "
        f"events written, {store.samples} samples"
    )
    return result.seconds < TARGET_SECONDS


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ.setdefault("LOG_LEVEL", "warning")
    admin = use_bench_database()
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    server = context.Process(target=fake_nks_process, args=(theirs,), daemon=True)
    server.start()
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        from nks.accounts import forget_clients
        from nks.poller import poll_account
        from nks.services import register_nks_account

        call_command("migrate", verbosity=0)
        call_command("createcachetable", verbosity=0)  # the poll lock without REDIS_URL
        fake = ours.recv()
        account, _ = register_nks_account(
            "bench",
            api_url=fake["url"],
            identity_url=fake["identity_url"],
            tenant_id=fake["tenant_id"],
            username=fake["username"],
            password=fake["password"],
        )
        print(
            f"NKS poll: {CLUSTERS} clusters x 3 nodegroups, {LATENCY * 1000:.0f} ms per call, "
            f"{settings.NKS_POLL_WORKERS} concurrent calls, PostgreSQL "
            f"({connections['default'].settings_dict['HOST']})"
        )
        ok = True
        for label in ("poll 1 (token, all inserts)", "poll 2 (steady state, updates)"):
            ask(ours, "clear")
            result = poll_account(account.pk)
            if not result.ok:
                sys.exit(f"the poll failed: {result.error}")
            ok = report(label, result, ask(ours, "requests")) and ok
        print(f"target: one full poll under {TARGET_SECONDS:.0f} s: {'met' if ok else 'MISSED'}")
        forget_clients()
        connections.close_all()
    finally:
        ask(ours, "stop")
        server.join(timeout=10)
        drop_bench_database(BENCH_DATABASE, admin)


if __name__ == "__main__":
    main()
