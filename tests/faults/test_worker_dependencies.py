"""The watch worker under its own dependencies' outages: PostgreSQL refusing every
connection for a while, Redis (the lock's store) killed and restarted empty, three times in
a row each; and a worker SIGKILLed while it flushes.

Seen before: a 30 s PostgreSQL or Redis outage killed the housekeeping thread ("Exception
in thread watch-housekeeping-1"), a second watcher took over while the first one's streams
stayed open, and connections grew at every outage (API server 6 -> 9 -> 10, PostgreSQL
3 -> 4 -> 7). Now no thread dies, the lock stays with its watcher (or is handed over after
the old one closed its streams), nothing is lost, and connections come back to where they
were.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from alerts.models import Incident, IncidentState, Rule
from fakes.kube import FakeApiServer
from leases.models import LeaseState
from leases.services import run_watcher
from tests.faults.harness import (
    TOKEN,
    Evaluator,
    Figures,
    campaign,
    database_connections,
    database_matches_server,
    eventually,
    false_incidents,
    false_notifications,
    is_current,
    register,
    row,
    states_now,
    watcher_threads,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.faults]

OUTAGES = 3
OUTAGE_SECONDS = 6.0


@pytest.fixture
def thread_deaths() -> Iterator[list[str]]:
    """Every exception that ends a thread (threading's excepthook), for the test to assert
    there was none."""
    deaths: list[str] = []
    previous = threading.excepthook

    def hook(arguments: threading.ExceptHookArgs) -> None:
        name = arguments.thread.name if arguments.thread else "?"
        deaths.append(f"{name}: {arguments.exc_type.__name__}: {arguments.exc_value}")
        previous(arguments)

    threading.excepthook = hook
    try:
        yield deaths
    finally:
        threading.excepthook = previous


def _admin() -> psycopg.Connection[Any]:
    """A connection to the server's maintenance database: the test database is the one
    made unavailable."""
    params = django_settings.DATABASES["default"]
    return psycopg.connect(
        host=params["HOST"] or "127.0.0.1",
        port=int(params["PORT"] or 5432),
        user=params["USER"] or "postgres",
        dbname="postgres",
        autocommit=True,
    )


def database_outage(seconds: float) -> None:
    """PostgreSQL as a restart leaves it, for this test database alone (the other tests
    running beside this one use theirs): every session ended, no new one accepted for
    `seconds`, then accepted again."""
    name = connection.settings_dict["NAME"]
    with _admin() as admin:
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        try:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [name],
            )
            time.sleep(seconds)
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
    connection.close()  # this thread's session was ended too


def test_three_database_outages_under_a_running_watcher_leave_nothing_behind(
    postgres_database: None, server: FakeApiServer, thread_deaths: list[str]
) -> None:
    figures = Figures(f"{OUTAGES} PostgreSQL outages of {OUTAGE_SECONDS:.0f} s")
    with campaign(server) as run:
        cluster = run.cluster
        time.sleep(2)
        threads = watcher_threads()
        # The watcher's own connections: the fewest seen, as the renewers' and the probe's
        # short requests come and go.
        api_connections = settled(lambda: server.open_connections)
        sessions = settled(database_connections)
        for outage in range(OUTAGES):
            database_outage(OUTAGE_SECONDS)
            back = timezone.now()
            figures[f"current after outage {outage + 1}"] = eventually(
                lambda back=back: is_current(cluster, since=back), 20
            )
            eventually(lambda: database_matches_server(server, cluster), 10)
            assert watcher_threads() == threads, "a thread of the watcher died or was added"
        # Nothing left behind: the streams and sessions of before, not more.
        eventually(lambda: settled(lambda: server.open_connections) <= api_connections, 10)
        eventually(lambda: settled(database_connections) <= sessions, 10)
        assert LeaseState.EXPIRED not in states_now(cluster)
    figures.print()
    assert thread_deaths == []
    assert false_incidents() == []
    assert false_notifications() == []


def settled(count: Callable[[], int], samples: int = 10) -> int:
    """The fewest of `samples` counts 0.1 s apart: what stays open, not what passes by."""
    seen = []
    for _ in range(samples):
        seen.append(count())
        time.sleep(0.1)
    return min(seen)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateRedis:
    """A redis-server of this test's own (as CI runs Redis: no persistence), so killing it
    touches no other test."""

    def __init__(self, folder: Path) -> None:
        self.port = _free_port()
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def private_redis(redis_url: str, tmp_path: Path) -> Iterator[PrivateRedis]:
    if not shutil.which("redis-server"):
        pytest.fail("redis-server is not installed")
    redis = PrivateRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.kill()


def test_redis_killed_and_restarted_empty_three_times_the_watcher_keeps_its_lock(
    server: FakeApiServer, private_redis: PrivateRedis, settings: Any, thread_deaths: list[str]
) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "locks": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": private_redis.url,
            "KEY_PREFIX": "faults:lock",
            "TIMEOUT": 30,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 2},
        },
    }
    figures = Figures(f"{OUTAGES} Redis kills and empty restarts of {OUTAGE_SECONDS:.0f} s")
    with campaign(server, lock_owner="fault-watcher") as run:
        cluster, lock = run.cluster, run.lock
        assert lock is not None
        threads = watcher_threads()
        api_connections = settled(lambda: server.open_connections)
        for outage in range(OUTAGES):
            private_redis.kill()
            time.sleep(OUTAGE_SECONDS)
            private_redis.start()  # empty: a restart without persistence loses every key
            figures[f"lock regained after restart {outage + 1}"] = eventually(
                lambda: lock.current_owner() == "fault-watcher", 5
            )
            assert not run.watcher.stop.is_set(), "the watcher gave up its cluster"
            assert watcher_threads() == threads
            eventually(lambda: is_current(cluster), 10)
        eventually(lambda: database_matches_server(server, cluster), 10)
        # The API client's pool may hold one idle connection more than at the start (a probe
        # and a list that overlapped under load); a connection left behind by each outage
        # would add one per outage.
        eventually(lambda: settled(lambda: server.open_connections) <= api_connections + 1, 10)
    figures.print()
    assert thread_deaths == []
    assert false_incidents() == []
    assert false_notifications() == []


def _worker_env() -> dict[str, str]:
    params = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = (
        f"postgres://{params['USER'] or 'postgres'}@{params['HOST'] or '127.0.0.1'}:"
        f"{params['PORT'] or 5432}/{params['NAME']}"
    )
    env["LOG_LEVEL"] = "info"
    return env


def test_a_worker_killed_while_it_flushes_is_taken_over_and_nothing_is_lost(
    postgres_database: None, redis_url: str, tmp_path: Path
) -> None:
    # 300 node leases renewing every 10 s: about 30 renewals a second, so a flush is always
    # being written or about to be when the worker dies.
    server = FakeApiServer(token=TOKEN, scenario="nodes:300", bookmark_interval=60.0).start()
    figures = Figures("SIGKILL of a watch worker while it flushes")
    log = (tmp_path / "worker.log").open("wb")
    try:
        cluster = register(server)
        evaluator = Evaluator().start()
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "watch_leases", "--cluster", cluster.name],
            cwd=Path(__file__).resolve().parents[2],
            env=_worker_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            eventually(lambda: is_current(cluster) and row(cluster).events_total > 100, 30)
            events = row(cluster).events_total
            eventually(lambda: row(cluster).events_total > events, 5)  # flushing right now
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=10)
            killed_at = time.monotonic()
        finally:
            if worker.poll() is None:
                worker.kill()
        figures["stale after"] = eventually(lambda: row(cluster).is_stale(), 15)
        eventually(
            lambda: Incident.objects.filter(
                rule=Rule.SOURCE_STALE, state=IncidentState.FIRING
            ).exists(),
            30,
        )
        figures["source_stale after"] = time.monotonic() - killed_at
        # Another worker takes the cluster over once the dead one's lock expires.
        stop = threading.Event()
        successor = threading.Thread(
            target=_keep_trying, args=(cluster.pk, stop), name="watcher-successor", daemon=True
        )
        successor.start()
        try:
            back = timezone.now()
            eventually(lambda: is_current(cluster, since=back), 40)
            figures["taken over and current after"] = time.monotonic() - killed_at
            eventually(lambda: database_matches_server(server, cluster), 15)
            assert row(cluster).watcher_id != ""
            # A lease duration of current data later: the nodes kept renewing throughout.
            time.sleep(12)
            assert LeaseState.EXPIRED not in states_now(cluster)
        finally:
            stop.set()
            successor.join(timeout=30)
        evaluator.stop()
    finally:
        log.close()
        server.stop()
    figures.print()
    assert false_incidents() == []
    assert false_notifications() == []


def _keep_trying(cluster_id: int, stop: threading.Event) -> None:
    """A worker's watch task as ensure_watchers starts it, again and again until it gets
    the lock (the dead worker's expires after LOCK_TTL_SECONDS)."""
    try:
        while not stop.is_set():
            if run_watcher(cluster_id, owner="successor", stop=stop):
                return
            stop.wait(1)
    finally:
        connection.close()
