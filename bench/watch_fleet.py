"""Benchmark (issue 22): 50 clusters shared by watch worker processes, a SIGKILL, a joiner.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \\
        bench/watch_fleet.py [--clusters 50] [--leases 2000] [--nodes 400] [--workers 2] \\
        [--concurrency 52] [--redis-db 6]

One instance: a PostgreSQL database (<--db-prefix>watch_fleet, dropped and re-created), a Redis
database (--redis-db, flushed), a child process serving --clusters fake API servers over real
HTTP (fakes/kube/fleet.py; its held Leases last an hour, so nothing changes while this runs and
every history row after the start is a duplicate), and --workers `watch` workers started as
the Procfile starts them (Celery, thread pool). Printed, each as it happens:

1. the time until every cluster is watched and every Lease and Node stored, the clusters each
   worker holds (from the lock owners and the clusters' `watcher_id`), and the PostgreSQL
   connections of each worker (pg_stat_activity, told apart by application_name);
2. `check_alerts --no-send` (the incidents the fleet's own expired Leases open: the baseline);
3. SIGKILL of the worker holding the most clusters: the time until each of its clusters is
   watched again by another, and held again within the share;
4. a new worker joins: the time until it holds its share, and whether the others kept their
   process (nobody restarted);
5. history rows and incidents before the kill and at the end (any new one is a duplicate or a
   false incident: the data never changed).

A benchmark prints figures; it exits 0 unless the fleet never became watched.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchdb import (  # noqa: E402
    add_database_option,
    create_bench_database,
    drop_bench_database,
)

PYTHON = str(REPO / ".venv" / "bin" / "python")
CELERY = str(REPO / ".venv" / "bin" / "celery")
TOKEN = "watch-fleet-bench-token"
HISTORY_TABLES = (
    "leases_leasetransition",
    "leases_leaseholderspan",
    "leases_nodereadychange",
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def query(url: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        return connection.execute(sql, params or []).fetchall()


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until `check` holds (polled every 0.25 s), None after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.25)
    log(f"{what}: not within {timeout:.0f} s")
    return None


class Instance:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.database = f"{args.db_prefix}watch_fleet"
        self.url, self.admin = create_bench_database(self.database)
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DATABASE_", "REDIS_"))
        }
        self.env.update(
            DATABASE_URL=self.url,
            REDIS_URL=f"redis://127.0.0.1:6379/{args.redis_db}",
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            DASHBOARD_VAR_DIR=str(workdir / "var"),
        )
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.fleet: subprocess.Popen[bytes] | None = None
        self.evaluator_stop = threading.Event()

    # --- the pieces -------------------------------------------------------------------
    def manage(self, *command: str) -> str:
        return subprocess.run(
            [PYTHON, "manage.py", *command],
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def start_fleet(self) -> list[dict[str, str]]:
        out = self.workdir / "fleet.json"
        self.fleet = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "fakes.kube.fleet",
                "--clusters",
                str(self.args.clusters),
                "--leases",
                str(self.args.leases),
                "--nodes",
                str(self.args.nodes),
                "--token",
                TOKEN,
                "--out",
                str(out),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "fleet.log").open("wb"),
        )
        if wait_for("fake API servers", out.exists, 300) is None:
            sys.exit("the fake API servers did not start: see fleet.log")
        clusters: list[dict[str, str]] = json.loads(out.read_text())["clusters"]
        return clusters

    def register(self, clusters: list[dict[str, str]]) -> None:
        self.manage("migrate", "--verbosity", "0")
        self.manage("createcachetable", "--verbosity", "0")
        script = (
            "import json, sys, yaml\n"
            "from pathlib import Path\n"
            "from io import StringIO\n"
            "from django.core.management import call_command\n"
            "from fakes.kube import kubeconfig_document\n"
            "for c in json.load(open(sys.argv[1])):\n"
            "    p = Path(sys.argv[2]) / (c['name'] + '.yaml')\n"
            f"    doc = kubeconfig_document(c['url'], token={TOKEN!r}, context_name='fleet')\n"
            "    open(p, 'w').write(yaml.safe_dump(doc))\n"
            "    call_command('add_kube_cluster', c['name'], kubeconfig=p, stdout=StringIO())\n"
        )
        listed = self.workdir / "clusters.json"
        listed.write_text(json.dumps(clusters))
        subprocess.run(
            [
                PYTHON,
                "-c",
                f"import django; django.setup()\n{script}",
                str(listed),
                str(self.workdir),
            ],
            cwd=REPO,
            env=self.env,
            check=True,
        )

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                CELERY,
                "-A",
                "dashboard",
                "worker",
                "--queues",
                "watch",
                "--pool",
                "threads",
                "--concurrency",
                str(self.args.concurrency),
                "--hostname",
                f"{name}@%h",
                "--loglevel",
                "WARNING",
                "--without-heartbeat",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=REPO,
            env={**self.env, "PGAPPNAME": f"watch-fleet-{name}"},
            stdout=(self.workdir / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.workers[name] = process
        return process

    def stop(self) -> None:
        self.evaluator_stop.set()
        for process in [*self.workers.values(), self.fleet]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.workers.values(), self.fleet]:
            if process is None:
                continue
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    # --- what is seen -----------------------------------------------------------------
    def holders(self) -> dict[str, str]:
        """cluster name -> the worker (name in this bench) whose process watches it."""
        pids = {process.pid: name for name, process in self.workers.items()}
        rows = query(self.url, "SELECT name, coalesce(watcher_id, '') FROM leases_kubecluster")
        held = {}
        for cluster, watcher in rows:
            # watcher_id is host:pid:token
            parts = watcher.split(":")
            pid = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else 0
            held[cluster] = pids.get(pid, "")
        return held

    def alive(self) -> set[str]:
        return {name for name, process in self.workers.items() if process.poll() is None}

    def spread(self) -> Counter[str]:
        return Counter(worker for worker in self.holders().values() if worker)

    def all_watched_by(self, workers: set[str]) -> bool:
        held = self.holders()
        return len(held) == self.args.clusters and all(w in workers for w in held.values())

    def stored(self) -> tuple[int, int]:
        (row,) = query(
            self.url,
            "SELECT (SELECT count(*) FROM leases_lease), (SELECT count(*) FROM leases_node)",
        )
        return int(row[0]), int(row[1])

    def connections(self) -> dict[str, int]:
        rows = query(
            self.admin,
            "SELECT application_name, count(*) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name LIKE 'watch-fleet-%%' GROUP BY 1",
            [self.database],
        )
        return {name.removeprefix("watch-fleet-"): int(count) for name, count in rows}

    def history(self) -> dict[str, int]:
        counts = {
            table: query(self.url, f"SELECT count(*) FROM {table}")[0][0]
            for table in HISTORY_TABLES
        }
        counts["incidents"] = query(self.url, "SELECT count(*) FROM alerts_incident")[0][0]
        return counts

    def incidents(self) -> list[str]:
        rows = query(
            self.url,
            "SELECT rule, state, cluster, since, opened_at FROM alerts_incident ORDER BY id",
        )
        return [
            f"{rule} {state} {cluster} since {since:%H:%M:%S.%f} opened {opened:%H:%M:%S}"
            if opened
            else f"{rule} {state} {cluster} (not opened)"
            for rule, state, cluster, since, opened in rows
        ]

    def evaluate(self) -> None:
        self.manage("check_alerts", "--no-send")

    def incident_keys(self) -> set[tuple[str, str]]:
        return {
            (key, state) for key, state in query(self.url, "SELECT key, state FROM alerts_incident")
        }

    def start_evaluator(self) -> None:
        """Evaluate as beat does, every few seconds, from now to the end: a false incident
        while a worker's clusters wait for their takeover would open here."""

        def evaluate_forever() -> None:
            while not self.evaluator_stop.wait(2):
                self.evaluate()

        threading.Thread(target=evaluate_forever, daemon=True).start()

    def settled(self, seconds: float) -> set[tuple[str, str]]:
        """The incidents once `seconds` of evaluations have passed (past the grouping delay,
        ALERT_GROUP_SECONDS, so what is real in the fleet's own data has opened)."""
        time.sleep(seconds)
        return self.incident_keys()


def run(args: argparse.Namespace) -> int:
    share = math.ceil(args.clusters / args.workers)
    with tempfile.TemporaryDirectory(prefix="bench-watch-fleet-") as directory:
        workdir = Path(directory)
        (workdir / "var").mkdir()
        instance = Instance(args, workdir)
        subprocess.run(
            ["redis-cli", "-n", str(args.redis_db), "flushdb"], check=True, capture_output=True
        )
        try:
            clusters = instance.start_fleet()
            instance.register(clusters)
            expected = (
                sum(int(c["leases"]) for c in clusters),
                sum(int(c["nodes"]) for c in clusters),
            )
            log(f"{args.clusters} clusters registered ({args.leases} Leases, {args.nodes} Nodes)")
            names = [f"w{index + 1}" for index in range(args.workers)]
            for name in names:
                instance.start_worker(name)
            seconds = wait_for(
                "every cluster watched, every object stored",
                lambda: instance.all_watched_by(set(names)) and instance.stored() == expected,
                180,
            )
            if seconds is None:
                return 1
            log(
                f"every cluster watched and every object stored after {seconds:.1f} s; "
                f"clusters per worker {dict(sorted(instance.spread().items()))} (share {share})"
            )
            balanced = wait_for(
                "no worker above its share plus one",
                lambda: max(instance.spread().values()) <= share + 1,
                90,
            )
            spread = instance.spread()
            if balanced is not None:
                log(
                    f"no worker above its share plus one {balanced:.1f} s later: clusters per "
                    f"worker {dict(sorted(spread.items()))}"
                )
            peak_connections: Counter[str] = Counter()
            for _ in range(8):
                for name, count in instance.connections().items():
                    peak_connections[name] = max(peak_connections[name], count)
                time.sleep(0.5)
            per_cluster = {
                name: round(peak_connections[name] / max(spread[name], 1), 2) for name in names
            }
            log(
                f"PostgreSQL connections per worker (peak of 8 readings) "
                f"{dict(sorted(peak_connections.items()))}; per cluster held {per_cluster}"
            )
            instance.start_evaluator()
            baseline = instance.settled(args.settle_seconds)
            before = instance.history()
            log(f"history and incidents before the kill: {before}")

            spread = instance.spread()
            log(f"clusters per worker before the kill {dict(sorted(spread.items()))}")
            victim = max(names, key=lambda name: spread[name])
            pid_others = {n: p.pid for n, p in instance.workers.items() if n != victim}
            instance.workers[victim].send_signal(signal.SIGKILL)
            instance.workers[victim].wait()
            killed = victim
            log(f"SIGKILL {killed} (it held {spread[killed]} clusters)")
            survivors = instance.alive()
            taken = wait_for(
                "the killed worker's clusters watched again",
                lambda: instance.all_watched_by(survivors),
                120,
            )
            if taken is not None:
                log(
                    f"every cluster watched again after {taken:.1f} s; clusters per worker "
                    f"{dict(sorted(instance.spread().items()))}"
                )

            joiner = f"w{args.workers + 1}"
            instance.start_worker(joiner)
            live = len(instance.alive())
            joined_share = math.ceil(args.clusters / live)
            joined = wait_for(
                f"{joiner} holds its share",
                lambda: instance.spread()[joiner] >= joined_share - 1,
                120,
            )
            time.sleep(3)
            restarted = [
                n
                for n, pid in pid_others.items()
                if instance.workers[n].pid != pid or instance.workers[n].poll() is not None
            ]
            if joined is not None:
                log(
                    f"{joiner} joined and holds {instance.spread()[joiner]} clusters after "
                    f"{joined:.1f} s (share {joined_share}); clusters per worker "
                    f"{dict(sorted(instance.spread().items()))}; restarted: {restarted or 'none'}"
                )
            at_end = instance.settled(args.settle_seconds)
            after = instance.history()
            new = {key: after[key] - before[key] for key in before}
            log(f"history and incidents at the end: {after}; new since before the kill: {new}")
            for line in instance.incidents():
                log(f"  incident: {line}")
            log(
                "incidents (key, state) new or changed since before the kill: "
                f"{sorted(at_end - baseline) or 'none'}"
            )
        finally:
            instance.stop()
            drop_bench_database(instance.database, instance.admin)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--leases", type=int, default=2000, help="in all, over the clusters")
    parser.add_argument("--nodes", type=int, default=400, help="in all, over the clusters")
    parser.add_argument("--workers", type=int, default=2, help="watch workers at the start")
    parser.add_argument(
        "--concurrency", type=int, default=52, help="threads per worker (above the clusters)"
    )
    parser.add_argument("--redis-db", type=int, default=6, help="flushed")
    add_database_option(parser)
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=75,
        help="evaluations before the kill and at the end (past ALERT_GROUP_SECONDS)",
    )
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
