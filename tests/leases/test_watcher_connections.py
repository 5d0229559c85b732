"""A watched cluster holds at most one PostgreSQL connection (leases.watch_database).

Several clusters, each its own fake API server over real HTTP, watched by one worker (the
`watch_leases` command: the loop the Celery workers run, a thread per cluster), while their
readers go through what makes them write: lists, reconnects after dropped streams, a 410, a
Node watch refused by RBAC, a 503. The test counts the sessions of its database in
pg_stat_activity, other than its own: at most one per cluster.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from fakes.kube import FakeApiServer
from leases.models import KubeCluster
from tests.faults.harness import TOKEN, HeldLease, Renewers, eventually, register

pytestmark = pytest.mark.django_db(transaction=True)

CLUSTERS = 4
LEADER = HeldLease("ops", "leader", "leader-a", 10)
# The command's own thread gives its session back while the watchers run.
WORKER_OWN_CONNECTIONS = 0


def other_sessions() -> list[dict[str, Any]]:
    """This test database's sessions other than the test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [{"pid": pid, "state": state, "query": query} for pid, state, query in cursor]


def all_connected(clusters: list[KubeCluster]) -> bool:
    rows = KubeCluster.objects.filter(pk__in=[cluster.pk for cluster in clusters])
    return all(row.connected and row.nodes_last_list_at is not None for row in rows)


def test_one_worker_watching_several_clusters_holds_one_connection_per_cluster(
    postgres_database: None,
) -> None:
    servers = [FakeApiServer(token=TOKEN).start() for _ in range(CLUSTERS)]
    renewers = [Renewers(server, [LEADER], period=0.5).start() for server in servers]
    clusters = [register(server, name=f"conn-{index}") for index, server in enumerate(servers)]
    # One cluster's Node watch is refused by RBAC from the start: its reader writes failures.
    servers[0].forbid("nodes")
    peak: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def watch() -> None:
        try:
            call_command("watch_leases", "--seconds", "14")
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=watch, name="watch-worker", daemon=True)
    worker.start()
    try:
        eventually(lambda: all_connected(clusters[1:]), 10, "the clusters were not watched")
        # What makes readers write while they run: dropped streams (a reconnect each), a
        # 410 (a list again), an outage answer (a failure, then a reconnect).
        servers[1].drop_next_watches(2)
        servers[1].end_watches()
        servers[2].gone_storm(2)
        servers[2].end_watches()
        servers[3].fail_next_requests(503, 2)
        servers[3].end_watches()
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            sessions = other_sessions()
            if len(sessions) > len(peak):
                peak = sessions
            time.sleep(0.05)
        rows = KubeCluster.objects.in_bulk([cluster.pk for cluster in clusters])
        assert rows[clusters[0].pk].nodes_last_error, "the refused Node watch wrote no failure"
        assert all(rows[cluster.pk].reconnects_total >= 1 for cluster in clusters[1:])
    finally:
        worker.join(timeout=40)
        for renewer in renewers:
            renewer.stop()
        for server in servers:
            server.stop()
    assert not worker.is_alive(), "the watchers did not stop"
    assert errors == []
    assert peak, "no session of the watchers was seen"
    assert len(peak) <= CLUSTERS + WORKER_OWN_CONNECTIONS, peak
    # Once stopped, the watchers give their connections back.
    eventually(lambda: other_sessions() == [], 10, "the watchers left sessions open")
