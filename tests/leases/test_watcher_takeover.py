"""One watcher per cluster across worker processes, and takeover when one is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from django.db import connections

from fakes.kube import FakeApiServer
from leases.locks import LOCK_TTL_SECONDS
from leases.models import KubeCluster, LeaseTransition
from leases.services import clusters_without_watcher
from leases.tasks import watch_cluster
from tests.conftest import REPO_ROOT, reset_celery_connections
from tests.leases.test_watcher import (
    database_matches_server,
    eventually,
    leader_spec,
    register,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _database_url() -> str:
    db = connections["default"].settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _start_worker(queue: str, name: str, redis_url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
    }
    return subprocess.Popen(
        [
            str(REPO_ROOT / ".venv" / "bin" / "celery")
            if (REPO_ROOT / ".venv").exists()
            else "celery",
            "-A",
            "dashboard",
            "worker",
            "--queues",
            queue,
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--hostname",
            f"{name}@%h",
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_a_killed_watcher_is_replaced_without_duplicate_transitions(
    postgres_database: None, redis_url: str, apiserver: FakeApiServer
) -> None:
    apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-a", 1))
    cluster = register(apiserver)
    assert clusters_without_watcher() == [cluster.id]
    # Another test's in-process worker may have closed the app's connection pool.
    reset_celery_connections()
    # A queue of its own, so messages of other test runs cannot reach these workers.
    queue = f"watch-takeover-{uuid.uuid4().hex[:8]}"
    workers = [_start_worker(queue, f"w{number}", redis_url) for number in (1, 2)]
    try:
        # Beat's job: ask for a watcher; both workers get a request, one wins the lock.
        for _ in range(2):
            watch_cluster.apply_async(args=(cluster.id,), queue=queue)
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).connected, timeout=30)
        eventually(lambda: database_matches_server(apiserver, cluster), timeout=10)
        assert apiserver.wait_for_watches(2)
        time.sleep(1.0)
        # Exactly one watcher per cluster: its Lease watch and its Node watch.
        assert apiserver.store.open_watch_count == 2, "exactly one watcher per cluster"

        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-b", 2))
        eventually(lambda: LeaseTransition.objects.count() == 1)

        owner = KubeCluster.objects.get(pk=cluster.pk).watcher_id
        owner_pid = int(owner.split(":")[1])
        (victim,) = [worker for worker in workers if worker.pid == owner_pid]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        killed_at = time.monotonic()
        apiserver.store.apply_lease("operators", "op-leader", leader_spec("op-c", 3))

        def taken_over() -> bool:
            watch_cluster.apply_async(args=(cluster.id,), queue=queue)
            current = KubeCluster.objects.get(pk=cluster.pk)
            return current.watcher_id != owner and current.connected

        eventually(taken_over, timeout=LOCK_TTL_SECONDS + 20)
        takeover_seconds = time.monotonic() - killed_at
        eventually(lambda: database_matches_server(apiserver, cluster), timeout=10)
        eventually(lambda: LeaseTransition.objects.count() == 2, timeout=5)
        time.sleep(1.0)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.terminate()
        for worker in workers:
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
    assert list(LeaseTransition.objects.values_list("from_holder", "to_holder")) == [
        ("op-a", "op-b"),
        ("op-b", "op-c"),
    ]
    assert takeover_seconds < LOCK_TTL_SECONDS + 10
    print(f"takeover after {takeover_seconds:.1f} s", file=sys.stderr)
