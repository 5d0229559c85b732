"""Benchmark: how fast the dashboard knows an API server stopped answering, and how fast it
is current again (issue #20).

    .venv/bin/python bench/fault_detection.py [--runs 3] [--stall 30]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres REDIS_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/fault_detection.py

Each run starts a fake kube-apiserver over real HTTP (bookmarks once a minute, as a real
one sends them), three leader leases (4 s) and two node leases (8 s) renewed every second
by clients writing through the server (`tests/faults/harness.py`), the cluster's watcher
with the product's own timings, and the alert evaluation every second. Then, one after
another:

* **stall**: the server freezes (accepts connections, answers nothing, open streams go
  silent) for `--stall` seconds, then resumes. Measured: stale after (the cluster's data
  is stale, from the freeze), source_stale after (the incident fires, from the freeze),
  current after resume.
* **stuck stream**: the Lease watch stream goes silent while the server answers everything
  else. Measured: reconnected after, current after.
* **restart**: the server is killed, comes back 5 s later answering 403 for its first
  second. Measured: current after ready (from the end of the 403 window).

Printed: each run's figures, then the median and max of each, and the incidents that
opened besides source_stale (false alarms: every lease was renewed whenever the server let
it). Targets: stale within 15 s, source_stale within 30 s, current within 5 s of the server
answering, no false incident.

Without DATABASE_URL it uses SQLite in a temporary folder; with it, its own database
(`bench_fault_detection`) on that server, dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

TARGETS = {
    "stale after": 15.0,
    "source_stale after": 30.0,
    "current after resume": 5.0,
    "current after ready": 5.0,
    "stuck stream reconnected after": 15.0,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stall", type=float, default=30.0, help="seconds the server freezes")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    os.environ["DASHBOARD_VAR_DIR"] = str(folder)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    os.environ["ALERT_EMAIL_TO"] = "oncall@example.com"
    admin = ""
    if os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        from bench.benchdb import create_bench_database

        os.environ["DATABASE_URL"], admin = create_bench_database("bench_fault_detection")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    try:
        results = [run_once(index, args.stall) for index in range(args.runs)]
    finally:
        if admin:
            from django.db import connections

            connections.close_all()
            from bench.benchdb import drop_bench_database

            drop_bench_database("bench_fault_detection", admin)
    report(results)


def run_once(index: int, stall_seconds: float) -> dict[str, float]:
    from django.utils import timezone

    from alerts.models import Incident, IncidentState, Rule
    from fakes.kube import FakeApiServer
    from leases.models import KubeCluster
    from tests.faults.harness import (
        TOKEN,
        campaign,
        eventually,
        false_incidents,
        is_current,
        row,
    )

    Incident.objects.all().delete()
    KubeCluster.objects.all().delete()
    figures: dict[str, float] = {}
    server = FakeApiServer(token=TOKEN, bookmark_interval=60.0).start()
    try:
        with campaign(server) as run:
            cluster = run.cluster
            frozen = time.monotonic()
            server.stall()
            figures["stale after"] = eventually(lambda: row(cluster).is_stale(), 60)
            eventually(
                lambda: Incident.objects.filter(
                    rule=Rule.SOURCE_STALE, state=IncidentState.FIRING
                ).exists(),
                60,
            )
            figures["source_stale after"] = time.monotonic() - frozen
            time.sleep(max(0.0, stall_seconds - (time.monotonic() - frozen)))
            resumed = timezone.now()
            server.resume()
            figures["current after resume"] = eventually(
                lambda: is_current(cluster, since=resumed), 60
            )

            leases = run.watcher.leases
            assert leases is not None
            opened = leases.watches_opened
            stuck = timezone.now()
            started = time.monotonic()
            server.stall_watch_streams("leases")
            eventually(lambda: leases.watches_opened > opened, 60)
            figures["stuck stream reconnected after"] = time.monotonic() - started
            eventually(lambda: is_current(cluster, since=stuck), 60)
            figures["stuck stream current after"] = time.monotonic() - started
            server.resume_watch_streams()

            server.kill()
            time.sleep(5)
            server.restart(forbidden_seconds=1.0)
            ready = time.monotonic() + 1.0
            ready_moment = timezone.now()
            eventually(lambda: is_current(cluster, since=ready_moment), 60)
            figures["current after ready"] = max(0.0, time.monotonic() - ready)
    finally:
        server.stop()
    false = false_incidents()
    figures["false incidents"] = float(len(false))
    shown = ", ".join(f"{key} {value:.2f}" for key, value in figures.items())
    print(f"run {index + 1}: {shown}" + (f"  FALSE: {false}" if false else ""), flush=True)
    return figures


def report(results: list[dict[str, float]]) -> None:
    print()
    print(f"{'figure':34} {'median':>8} {'max':>8} {'target':>8}")
    for key in results[0]:
        values = [result[key] for result in results]
        target = TARGETS.get(key)
        shown = f"{target:.0f} s" if target is not None else ("0" if "false" in key else "")
        unit = "" if "false" in key else " s"
        print(
            f"{key:34} {statistics.median(values):>6.2f}{unit:2} {max(values):>6.2f}{unit:2} "
            f"{shown:>8}"
        )


if __name__ == "__main__":
    main()
