"""What every fault test runs: a fake API server over real HTTP, clients that renew leases
through it as client-go electors and kubelets do, the cluster's watcher, and the alert
evaluation as beat runs it. A test breaks one part and asserts what the dashboard said.

The clients write over HTTP, so a stalled or killed server stops their renewals as a real
one does: nothing here writes behind the server's back. "Justified" is then what the
server's own state shows: while it is frozen nobody can renew, and an alert about that
time would be false.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import yaml
from django.db import connection
from django.utils import timezone

from alerts import evaluation
from alerts.models import Incident, Notification, Rule
from dashboard.locks import ExpiringLock
from fakes.kube import FakeApiServer, kubeconfig_document
from leases.locks import watcher_lock
from leases.models import KubeCluster, Lease, LeaseState, lease_state
from leases.services import register_kube_cluster
from leases.watcher import (
    CANDIDATES_INTERVAL_SECONDS,
    FLUSH_INTERVAL_SECONDS,
    Backoff,
    LeaseWatcher,
)
from tests.leases.test_watcher import RunningWatcher, database_matches_server

TOKEN = "fault-campaign-token-7c1e"


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def eventually(check: Callable[[], object], timeout: float, message: str = "") -> float:
    """Wait until `check()` is true; the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            if check():
                return time.monotonic() - started
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(message or f"condition not met within {timeout} s")
        time.sleep(0.05)


@dataclass(frozen=True)
class HeldLease:
    namespace: str
    name: str
    holder: str
    duration: int


LEADERS = [
    HeldLease("kube-system", "kube-scheduler", "master-0_5f1c", 4),
    HeldLease("kube-system", "kube-controller-manager", "master-0_88a2", 4),
    HeldLease("ops", "my-operator", "operator-7d9-abc", 4),
]
NODES = [HeldLease("kube-node-lease", f"worker-{index}", f"worker-{index}", 8) for index in (1, 2)]


class Renewers:
    """Lease holders renewing over HTTP every `period` s, each request with `timeout` s (as
    client-go's elector and the kubelet's lease controller do): merge patches of renewTime.
    A stalled server leaves them waiting; a dead one refuses them; either way the store
    keeps the last renewal that got through."""

    def __init__(self, server: FakeApiServer, leases: list[HeldLease], period: float = 1.0) -> None:
        self.server = server
        self.leases = leases
        self.period = period
        self.failures = 0
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="renewers", daemon=True)
        for lease in leases:
            server.store.apply_lease(
                lease.namespace,
                lease.name,
                {
                    "holderIdentity": lease.holder,
                    "leaseDurationSeconds": lease.duration,
                    "acquireTime": now_micro(),
                    "renewTime": now_micro(),
                    "leaseTransitions": 0,
                },
            )

    def start(self) -> Renewers:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for lease in self.leases:
                if self._stop.is_set():
                    return
                self._renew(lease)

    def _renew(self, lease: HeldLease) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{lease.namespace}/leases/{lease.name}"
        body = orjson.dumps({"spec": {"renewTime": now_micro()}})
        client = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=1.0)
        try:
            client.request(
                "PATCH",
                path,
                body=body,
                headers={
                    "Authorization": f"Bearer {TOKEN}",
                    "Content-Type": "application/merge-patch+json",
                },
            )
            response = client.getresponse()
            response.read()
            if response.status == 200:
                self.renewals += 1
            else:
                self.failures += 1
        except OSError:
            self.failures += 1  # refused, reset or timed out: the next period tries again
        finally:
            client.close()


class Evaluator:
    """The alert evaluation as beat runs it (every `interval` s), in its own thread."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evaluator", daemon=True)

    def start(self) -> Evaluator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=20)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    summary = evaluation.run_evaluation(dispatch=False)
                except Exception as exc:  # an outage of its own store: the next tick retries
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    connection.close()
                    continue
                if summary is not None:
                    self.errors.extend(summary.errors)
        finally:
            connection.close()


def register(server: FakeApiServer, name: str = "prod") -> KubeCluster:
    kubeconfig = yaml.safe_dump(kubeconfig_document(server.url, token=TOKEN, context_name=name))
    cluster, _ = register_kube_cluster(name, kubeconfig=kubeconfig)
    return cluster


def running_watcher(cluster: KubeCluster, **options: Any) -> RunningWatcher:
    """The cluster's watcher in a thread (the watcher tests' runner), with the product's own
    timings rather than those tests' faster ones."""
    options.setdefault("backoff", Backoff())
    options.setdefault("flush_interval", FLUSH_INTERVAL_SECONDS)
    options.setdefault("candidates_interval", CANDIDATES_INTERVAL_SECONDS)
    return RunningWatcher(cluster, **options)


def row(cluster: KubeCluster) -> KubeCluster:
    return KubeCluster.objects.get(pk=cluster.pk)


def is_current(cluster: KubeCluster, since: datetime | None = None) -> bool:
    """The cluster's data is current (and, with `since`, proved past that moment)."""
    current = row(cluster)
    if current.is_stale() or current.leases_as_of is None:
        return False
    return since is None or current.leases_as_of >= since


def states_now(cluster: KubeCluster) -> set[LeaseState]:
    """Every lease's state as the pages judge it now."""
    current = row(cluster)
    now = timezone.now()
    return {
        lease_state(lease.holder, lease.expires_at, now, current.leases_as_of)
        for lease in Lease.objects.filter(cluster=cluster).live()
    }


# Incidents an API server fault may justify: the dashboard saying its data is old.
SOURCE_RULES = {Rule.SOURCE_STALE}


def false_incidents() -> list[str]:
    """Incidents (any state, resolved too) that no fault here justifies: every lease kept
    being renewed whenever the server let it."""
    return [
        f"{incident.key} ({incident.state})"
        for incident in Incident.objects.exclude(rule__in=SOURCE_RULES)
    ]


def false_notifications() -> list[str]:
    return [
        notification.subject
        for notification in Notification.objects.all()
        if "lease watcher" not in notification.subject
    ]


@dataclass
class Figures:
    """What a fault test measured, printed for the closing note (`-s` shows it)."""

    name: str
    values: dict[str, float] = field(default_factory=dict)

    def __setitem__(self, key: str, value: float) -> None:
        self.values[key] = round(value, 2)

    def print(self) -> None:
        shown = ", ".join(f"{key} {value} s" for key, value in self.values.items())
        print(f"\nFAULT {self.name}: {shown}")


def database_connections() -> int:
    """This database's open connections (PostgreSQL); -1 elsewhere."""
    if connection.vendor != "postgresql":
        return -1
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        (count,) = cursor.fetchone()
    return int(count)


def watcher_threads() -> list[str]:
    return sorted(
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith(("watch-", "watcher"))
    )


@dataclass
class Campaign:
    """One fault test's running parts."""

    server: FakeApiServer
    cluster: KubeCluster
    watcher: LeaseWatcher
    renewers: Renewers
    evaluator: Evaluator
    lock: ExpiringLock | None


@contextmanager
def campaign(
    server: FakeApiServer,
    leases: list[HeldLease] | None = None,
    *,
    lock_owner: str | None = None,
    **watcher: Any,
) -> Iterator[Campaign]:
    """Renewers, the watcher and the evaluation running against `server`, until the data is
    current and equals the server's; all stopped afterwards, and no watcher thread left.
    With `lock_owner`, the watcher holds its cluster's lock as a worker's does."""
    renewers = Renewers(server, leases if leases is not None else [*LEADERS, *NODES]).start()
    cluster = register(server)
    lock = None
    if lock_owner is not None:
        lock = watcher_lock(cluster.pk, lock_owner)
        assert lock.acquire()
        watcher["lock"] = lock
    evaluator = Evaluator().start()
    try:
        with running_watcher(cluster, **watcher) as running:
            eventually(
                lambda: is_current(cluster) and not row(cluster).nodes_stale(),
                15,
                "the data never became current",
            )
            eventually(lambda: database_matches_server(server, cluster), 10)
            yield Campaign(server, cluster, running, renewers, evaluator, lock)
    finally:
        evaluator.stop()
        renewers.stop()
    assert watcher_threads() == [], "a watcher thread outlived its watcher"
