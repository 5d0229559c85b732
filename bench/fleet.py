"""Benchmark (issue 22): a fleet of 50 clusters at 2,000 and at 100,000 leases, in one run.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/fleet.py \\
        [--sizes 2000,100000] [--repeat 5] [--redis-dbs 6,7] [--json fleet.json] \\
        [--keep-databases] [--db-prefix bench_] [--env NAME=VALUE ...]

Each size is an instance of its own: a PostgreSQL database (<db-prefix>fleet_2k and
<db-prefix>fleet_100k, by default bench_fleet_2k and bench_fleet_100k: dropped and
re-created), a Redis database (--redis-dbs, flushed), and a child process serving
50 fake API servers (fakes/kube/fleet.py: ~98 % node heartbeat Leases, Nodes for a fifth of
the leases, ~2 % elections, a third of them leader-k8s). For each instance, in turn:

1. the clusters are registered (`add_kube_cluster`), then the real watcher runs
   (`manage.py watch_leases`, every cluster in one process) until every Lease and Node is
   stored: the time that takes, the watcher's CPU and its PostgreSQL backends' CPU, its peak
   RSS (the kernel's VmHWM of its process tree) per stored Lease and Node, and the most
   PostgreSQL connections it holds at once (pg_stat_activity by application_name, sampled
   until the end; the warning before a size that may lack connections uses what the size
   before measured);
2. history is bulk-loaded behind it (holder changes and holder spans of the elections, a few
   flapping node leases, Ready changes, resolved incidents, an NKS account with a cluster and
   two nodegroups per Kubernetes cluster), then VACUUM ANALYZE, as autovacuum would leave it;
3. the alert evaluation runs as `check_alerts --no-send` does, --repeat + 1 times in one
   process: the first run (which opens the incidents) apart, then median and p95 time,
   queries, the CPU time of its PostgreSQL backend and the process's peak RSS; then one more
   run in one transaction, for the lease rows PostgreSQL read for it alone;
4. gunicorn (DJANGO_ENV=development, DEBUG=false, 2 sync workers, LEASE_TABLE_CACHE_SECONDS=0)
   serves while the watcher keeps running (so the data stays current, as in production), and
   each page the issue names (overview, Leases, a lease, a node, groups, a group, Nodes, NKS
   clusters, an NKS cluster, a nodegroup, alerts), each of its regions (found in the page's
   own HTML: elements with an id and an hx-get to the page), the API's first page of leases
   and of leader groups, and /metrics are fetched once to warm up and then --repeat
   times, one request at a time: median and p95 time, the body's bytes, the CPU time per
   request of gunicorn's workers and of their PostgreSQL backends (from /proc; the backends
   are told apart by application_name), and the workers' peak RSS afterwards.

Then a markdown table per kind of figure, the 100k/2k ratio (last size over first), and
PASS/FAIL against the issue's targets: a page, region or API page at most 2x and under
300 ms (median) at the largest size; /metrics at most 2 MiB and 1 s; one evaluation at most
1 s (steady state) and at most 2x; the watcher at most 2 KiB of peak RSS per stored Lease and
Node. A benchmark prints figures: it asserts nothing, and exits 0 unless a request failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.benchdb import (  # noqa: E402
    add_database_option,
    create_bench_database,
    drop_bench_database,
)
from bench.serving import (  # noqa: E402
    PYTHON,
    Client,
    backends_cpu,
    cpu_seconds,
    cpu_spent,
    free_connections,
    free_port,
    log_line,
    percentile,
    process_tree,
    start,
    start_gunicorn,
    status_bytes,
    stop,
    tree_cpu_seconds,
    tree_peak_rss,
    wait_until_serving,
)

FAKE_TOKEN = "fleet-bench-apiserver-token"
METRICS_TOKEN = "fleet-bench-metrics-token"
BENCH_USER = "fleet-bench"
# PostgreSQL backends are told apart by the application_name libpq takes from PGAPPNAME.
WEB_APP_NAME = "fleet-bench-web"
WATCH_APP_NAME = "fleet-bench-watch"
LOADER_APP_NAME = "fleet-bench-loader"

# The targets (issue 22), at the largest size.
TARGET_RATIO = 2.0
TARGET_PAGE_MS = 300.0
TARGET_METRICS_BYTES = 2 * 1024 * 1024
TARGET_METRICS_MS = 1_000.0
TARGET_EVALUATION_MS = 1_000.0
TARGET_WATCHER_BYTES_PER_OBJECT = 2_048
# Measured on the code before issue 22 (a thread per resource and one for housekeeping, each
# with its own connection): 50 clusters need 151, over PostgreSQL's default of 100.
WATCHER_CONNECTIONS_PER_CLUSTER = 3
# A fifth of the leases have their Node (20,000 Nodes at 100,000 leases, 400 at 2,000).
NODES_PER_LEASE = 0.2


# --- figures --------------------------------------------------------------------------------


@dataclass
class RequestFigures:
    """One URL's figures at one size."""

    label: str
    kind: str  # page, region, api, metrics
    path: str
    target: str = ""  # the HX-Target of a region
    status: int = 0
    times_ms: list[float] = field(default_factory=list)
    bytes: int = 0
    app_cpu_ms: float | None = None
    db_cpu_ms: float | None = None
    worker_peak_rss_mb: float | None = None
    note: str = ""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms) if self.times_ms else float("nan")

    @property
    def p95_ms(self) -> float:
        return percentile(self.times_ms, 95)


@dataclass
class WatcherFigures:
    leases: int = 0
    nodes: int = 0
    sync_seconds: float = float("nan")
    cpu_seconds: float = float("nan")
    peak_rss_bytes: int = 0  # at the moment everything was stored
    peak_rss_bytes_end: int = 0  # after the pages were measured (the watcher kept running)
    processes: int = 0
    # PostgreSQL connections the watcher held at once (pg_stat_activity, by its
    # application_name, sampled every 0.2 s): until every object was stored, and all along.
    db_connections_sync: int = 0
    db_connections_peak: int = 0
    db_cpu_seconds: float | None = None  # its backends' CPU until every object was stored

    @property
    def bytes_per_object(self) -> float:
        stored = self.leases + self.nodes
        return self.peak_rss_bytes_end / stored if stored else float("nan")


@dataclass
class EvaluationFigures:
    first_ms: float = float("nan")
    first_queries: int = 0
    times_ms: list[float] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)
    db_cpu_ms: list[float] = field(default_factory=list)
    lease_rows_read: int | None = None  # by one run, its own backend's reads
    peak_rss_bytes: int = 0  # of the evaluating process (Django and all), after every run
    summary: str = ""


@dataclass
class InstanceFigures:
    size: int
    nodes: int
    clusters: int
    database: str
    redis_url: str
    phases_seconds: dict[str, float] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    watcher: WatcherFigures = field(default_factory=WatcherFigures)
    evaluation: EvaluationFigures = field(default_factory=EvaluationFigures)
    requests: list[RequestFigures] = field(default_factory=list)


def size_label(size: int) -> str:
    if size % 1000 == 0:
        return f"{size // 1000}k"
    return str(size)


def stored_counts(connection: Any) -> tuple[int, int]:
    row = connection.execute(
        "SELECT (SELECT count(*) FROM leases_lease), (SELECT count(*) FROM leases_node)"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# --- the Django side, run in a child process with the instance's environment ----------------


def run_django_phase(env: dict[str, str], phase: str, payload: dict[str, Any], log: Path) -> Any:
    """Run `phase` of this file under Django in a child process; its JSON answer."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(payload, handle)
    answer = Path(handle.name).with_suffix(".answer.json")
    try:
        with log.open("ab") as output:
            subprocess.run(
                [PYTHON, __file__, "--django-phase", phase, handle.name, str(answer)],
                cwd=REPO,
                env={**env, "PGAPPNAME": LOADER_APP_NAME},
                stdout=output,
                stderr=subprocess.STDOUT,
                check=True,
            )
        return json.loads(answer.read_text())
    finally:
        Path(handle.name).unlink(missing_ok=True)
        answer.unlink(missing_ok=True)


def phase_register(payload: dict[str, Any]) -> dict[str, Any]:
    """Migrate, a signed-in superuser (session and API token), the fleet's clusters."""
    from io import StringIO

    import yaml
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from bench.fleet_data import migrate
    from bench.serving import signed_in_session
    from fakes.kube import kubeconfig_document

    migrate()
    user = User.objects.create_superuser(BENCH_USER, email="fleet@example.invalid")
    session = signed_in_session(user)
    token = StringIO()
    call_command(
        "create_api_token", BENCH_USER, name="fleet bench", stdout=token, stderr=StringIO()
    )
    kubeconfigs = Path(payload["workdir"]) / "kubeconfigs"
    kubeconfigs.mkdir(exist_ok=True)
    for cluster in payload["clusters"]:
        path = kubeconfigs / f"{cluster['name']}.yaml"
        document = kubeconfig_document(cluster["url"], token=FAKE_TOKEN, context_name="fleet")
        path.write_text(yaml.safe_dump(document), encoding="utf-8")
        call_command("add_kube_cluster", cluster["name"], kubeconfig=path, stdout=StringIO())
    return {"session": session, "api_token": token.getvalue().strip()}


def phase_history(payload: dict[str, Any]) -> dict[str, Any]:
    """Bulk-load the history the pages read, behind the watcher's back (it reads none of it
    back), then pick the detail pages to measure."""
    import random
    import uuid
    from datetime import timedelta

    from django.urls import reverse
    from django.utils import timezone

    from alerts.models import Incident, Notice
    from bench.fleet_data import (
        flapping,
        lease_incident,
        nks_account,
        nks_cluster_row,
        nodegroup_row,
        store_history,
        vacuum_analyze,
    )
    from fakes.kube.fleet import NODEGROUPS, instance_uuid, nodegroup_of
    from leases.models import (
        KubeCluster,
        Lease,
        LeaseClass,
        LeaseHolderSpan,
        LeaseLibrary,
        LeaseTransition,
        Node,
        NodeReadyChange,
    )
    from nks.models import NksCluster, NksNodegroup

    rng = random.Random(22)
    now = timezone.now()
    day = 86_400.0
    transitions: list[LeaseTransition] = []
    spans: list[LeaseHolderSpan] = []
    elections = list(
        Lease.objects.exclude(lease_class=LeaseClass.NODE_HEARTBEAT).values_list(
            "id", "library", "holder", "identity"
        )
    )
    for lease_id, library, holder, identity in elections:
        changes = 12 if library == LeaseLibrary.LEADER_K8S else 4
        # Past tenures, oldest first, all ended before the watcher first saw the lease (its
        # open span starts then).
        moments = sorted(now - timedelta(seconds=rng.uniform(600, day)) for _ in range(changes))
        previous = f"pod-{rng.getrandbits(32):08x}"
        for index, moment in enumerate(moments):
            following = holder if index == len(moments) - 1 else f"pod-{rng.getrandbits(32):08x}"
            transitions.append(
                LeaseTransition(
                    lease_id=lease_id,
                    from_holder=previous,
                    to_holder=following,
                    observed_at=moment,
                    lease_transitions=index + 1,
                    from_identity=previous,
                    to_identity=identity if following == holder else following,
                )
            )
            started = moments[index - 1] if index else moment - timedelta(hours=2)
            spans.append(
                LeaseHolderSpan(
                    lease_id=lease_id,
                    holder=previous,
                    identity=previous,
                    started_at=started,
                    ended_at=moment,
                )
            )
            previous = following
    # One node lease in fifty flaps (three holder changes in the last five minutes), so the
    # grouped flapping queries have work to do.
    node_leases = list(
        Lease.objects.filter(lease_class=LeaseClass.NODE_HEARTBEAT).values_list("id", flat=True)
    )
    transitions += flapping(node_leases[::50], now, rng, holders=("kubelet-b", "kubelet-a"))
    store_history(spans, transitions)

    ready_changes = [
        NodeReadyChange(
            node_id=node_id,
            from_status="True",
            to_status="False",
            reason="KubeletNotReady",
            transitioned_at=now - timedelta(seconds=rng.uniform(0, day)),
            observed_at=now - timedelta(seconds=rng.uniform(0, day)),
        )
        for node_id in Node.objects.values_list("id", flat=True)[::10]
    ]
    NodeReadyChange.objects.bulk_create(ready_changes, batch_size=5_000)

    # Resolved incidents of the last week: one per fifty leases.
    names = list(
        Lease.objects.select_related("cluster").values_list("cluster__name", "namespace", "name")
    )
    incidents = []
    for index in range(max(10, len(names) // 50)):
        cluster, namespace, name = rng.choice(names)
        since = now - timedelta(seconds=rng.uniform(3_600, 7 * day))
        incidents.append(
            lease_incident(
                cluster,
                namespace,
                name,
                since=since,
                resolved_at=since + timedelta(minutes=5),
                key_suffix=f"#{index}",
                link=f"/leases/{cluster}/{namespace}/{name}/",
                opened_at=since + timedelta(seconds=30),
                last_seen_at=since + timedelta(minutes=5),
                resolution="The lease is held again.",
                open_notice=Notice.MAILED,
                resolve_notice=Notice.MAILED,
            )
        )
    Incident.objects.bulk_create(incidents, batch_size=5_000)

    # NKS: one account, a cluster per Kubernetes cluster, two nodegroups each, polled now.
    account = nks_account(now)
    node_groups: list[NksNodegroup] = []
    nks_clusters = []
    for kube in KubeCluster.objects.order_by("name"):
        nodes = list(Node.objects.filter(cluster=kube).values_list("name", "ready"))
        ready = sum(1 for _, status in nodes if status == "True")
        nks = nks_cluster_row(
            account,
            kube,
            str(uuid.uuid5(uuid.NAMESPACE_URL, kube.name)),
            len(nodes),
            ready,
            now,
            api="OK",
            kube_version="v1.33.4",
            node_addresses=[],
        )
        nks_clusters.append(nks)
        for position, group in enumerate(NODEGROUPS):
            members = [
                name for index, (name, _) in enumerate(nodes) if nodegroup_of(index) == group
            ]
            node_groups.append(
                nodegroup_row(
                    nks,
                    str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kube.name}/{group}")),
                    group,
                    len(members),
                    now,
                    is_default=position == 0,
                    min_node_count=1,
                    max_node_count=len(members) * 2 + 1,
                    autoscaler_enabled=False,
                    kube_version="v1.33.4",
                    flavor_id="m2.c4m8",
                    node_addresses=[
                        {"name": name, "instance": instance_uuid(kube.name, name)}
                        for name in members[:3]
                    ],
                    detail_fetched_at=now,
                )
            )
    NksCluster.objects.bulk_create(nks_clusters)
    NksNodegroup.objects.bulk_create(node_groups)
    vacuum_analyze()

    # The detail pages: an election with history in the middle cluster, a NotReady node,
    # a slot group, the middle NKS cluster and its first nodegroup.
    middle = KubeCluster.objects.order_by("name")[KubeCluster.objects.count() // 2]
    lease = (
        Lease.objects.filter(cluster=middle, library=LeaseLibrary.LEADER_K8S).order_by("id").first()
        or Lease.objects.filter(cluster=middle).exclude(lease_class=LeaseClass.NODE_HEARTBEAT)[0]
    )
    node = (
        Node.objects.filter(cluster=middle).exclude(ready="True").order_by("id").first()
        or Node.objects.filter(cluster=middle).order_by("id")[0]
    )
    grouped = Lease.objects.exclude(group_name="").select_related("cluster").order_by("id").first()
    nks = NksCluster.objects.get(kube_cluster=middle)
    urls = {
        "lease": reverse("leases:detail", args=[middle.name, lease.namespace, lease.name]),
        "node": reverse("leases:node", args=[middle.name, node.name]),
        "nks_cluster": reverse("nks:cluster", args=[nks.uuid]),
        "nodegroup": reverse("nks:nodegroup", args=[nks.uuid, NODEGROUPS[0]]),
    }
    if grouped is not None:
        urls["group"] = reverse(
            "leases:group", args=[grouped.cluster.name, grouped.namespace, grouped.group_name]
        )
    rows = {
        "lease transitions": LeaseTransition.objects.count(),
        "holder spans": LeaseHolderSpan.objects.count(),
        "Ready changes": NodeReadyChange.objects.count(),
        "incidents": Incident.objects.count(),
        "NKS clusters": NksCluster.objects.count(),
        "NKS nodegroups": NksNodegroup.objects.count(),
    }
    return {"urls": urls, "rows": rows}


def phase_evaluate(payload: dict[str, Any]) -> dict[str, Any]:
    """`check_alerts --no-send`, repeat + 1 times in this process: time, queries, the CPU
    time of this process's PostgreSQL backend (on this host), and this process's peak RSS;
    then once more inside one transaction, for the lease rows PostgreSQL read for it alone
    (the watcher reads the same table meanwhile: a server-wide count would add its reads).
    One transaction instead of one per rule changes when the writes commit, not what is
    read; that run is not timed."""
    import resource
    from io import StringIO

    from django.core.management import call_command
    from django.db import connection, reset_queries, transaction
    from django.test.utils import CaptureQueriesContext

    from bench.fleet_data import lease_rows_read

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    runs = []
    summary = ""
    for _ in range(payload["repeat"] + 1):
        output = StringIO()
        db_before = cpu_seconds(backend)
        # The query log keeps 9,000 entries: past that a capture counts 0 (the first run at
        # 100k makes about 8,600), so each run starts with an empty log.
        reset_queries()
        with CaptureQueriesContext(connection) as queries:
            started = time.perf_counter()
            call_command("check_alerts", no_send=True, stdout=output, stderr=StringIO())
            elapsed = time.perf_counter() - started
        db_after = cpu_seconds(backend)
        db_ms = (db_after - db_before) * 1000 if db_before is not None and db_after else None
        runs.append({"ms": elapsed * 1000, "queries": len(queries), "db_ms": db_ms})
        summary = output.getvalue().strip()
    with transaction.atomic():
        before = lease_rows_read()
        call_command("check_alerts", no_send=True, stdout=StringIO(), stderr=StringIO())
        lease_rows = lease_rows_read() - before
    # ru_maxrss is in KiB on Linux.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"runs": runs, "summary": summary, "peak_rss_bytes": peak, "lease_rows": lease_rows}


PHASES = {"register": phase_register, "history": phase_history, "evaluate": phase_evaluate}


def django_phase_main(phase: str, payload_path: str, answer_path: str) -> int:
    import django

    django.setup()
    payload = json.loads(Path(payload_path).read_text())
    answer = PHASES[phase](payload)
    Path(answer_path).write_text(json.dumps(answer))
    return 0


TAG = re.compile(rb"<(?:section|article|div|aside|main|nav|table|tbody)\b[^>]*>", re.I)
ATTRIBUTE = re.compile(rb'\s(id|hx-get)="([^"]*)"')


def regions_of(body: bytes, page_path: str) -> list[str]:
    """The ids of the live regions a page polls itself into: an element with an id and an
    hx-get back to the same page (templates/*: the partial's name is the DOM id)."""
    found: list[str] = []
    for tag in TAG.findall(body):
        attributes = {name.decode(): value.decode() for name, value in ATTRIBUTE.findall(tag)}
        hx_get = attributes.get("hx-get")
        if (
            "id" in attributes
            and hx_get is not None
            and urlsplit(hx_get).path == page_path
            and attributes["id"] not in found
        ):
            found.append(attributes["id"])
    return found


def measure_request(
    client: Client,
    figures: RequestFigures,
    repeat: int,
    gunicorn: subprocess.Popen[bytes],
    admin_url: str,
    database: str,
) -> RequestFigures:
    status, body = client.get(figures.path, target=figures.target, kind=figures.kind)  # warm-up
    workers = [pid for pid in process_tree(gunicorn.pid) if pid != gunicorn.pid]
    app_before = sum(cpu_seconds(pid) or 0.0 for pid in workers)
    db_before = backends_cpu(admin_url, database, WEB_APP_NAME)
    for _ in range(repeat):
        started = time.perf_counter()
        status, body = client.get(figures.path, target=figures.target, kind=figures.kind)
        figures.times_ms.append((time.perf_counter() - started) * 1000)
    db_after = backends_cpu(admin_url, database, WEB_APP_NAME)
    app_after = sum(cpu_seconds(pid) or 0.0 for pid in workers)
    figures.status = status
    figures.bytes = len(body)
    figures.app_cpu_ms = (app_after - app_before) * 1000 / repeat
    figures.db_cpu_ms = cpu_spent(db_before, db_after) * 1000 / repeat if db_after else None
    figures.worker_peak_rss_mb = max(status_bytes(pid, "VmHWM") for pid in workers) / 2**20
    if status != 200:
        figures.note = f"HTTP {status}"
    elif figures.target and f'id="{figures.target}"'.encode() not in body[:2_000]:
        figures.note = "not the region"
    return figures


def request_plan(client: Client, urls: dict[str, str]) -> list[RequestFigures]:
    """Every page the issue names and each region it polls itself into (found in the page's
    own HTML), the API's first pages and /metrics."""
    pages = [
        ("overview", "overview", "/"),
        ("Leases page", "Leases", "/leases/"),
        ("lease page", "lease page", urls["lease"]),
        ("node page", "node page", urls["node"]),
        ("groups page", "groups page", "/leases/groups/"),
        ("group page", "group page", urls.get("group")),
        ("Nodes (clusters) page", "Nodes", "/leases/clusters/"),
        ("NKS clusters page", "NKS clusters", "/clusters/"),
        ("NKS cluster page", "NKS cluster", urls["nks_cluster"]),
        ("nodegroup page", "nodegroup", urls["nodegroup"]),
        ("alerts page", "alerts", "/alerts/"),
    ]
    plan = []
    for label, short, path in pages:
        if path is None:
            continue
        plan.append(RequestFigures(label, "page", path))
        status, body = client.get(path)
        regions = regions_of(body, path) if status == 200 else []
        if path == "/leases/":
            # The table is the region the issue names; measured first, and even if the page
            # stopped naming it.
            regions = ["lease-table", *(region for region in regions if region != "lease-table")]
        plan += [
            RequestFigures(f"{short} #{region}", "region", path, target=region)
            for region in regions
        ]
    plan += [
        RequestFigures("API leases, first page", "api", "/api/v1/leases"),
        RequestFigures("API leader groups", "api", "/api/v1/leader-groups"),
        RequestFigures("/metrics", "metrics", "/metrics"),
    ]
    return plan


# --- one instance ---------------------------------------------------------------------------


class ConnectionPeak(threading.Thread):
    """The most connections `application` held at once on `database`, sampled from
    pg_stat_activity on a connection of its own until stop()."""

    def __init__(self, admin_url: str, database: str, application: str) -> None:
        super().__init__(daemon=True)
        self.admin_url, self.database, self.application = admin_url, database, application
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as connection:
            while not self.done.wait(0.2):
                row = connection.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = %s AND application_name = %s",
                    [self.database, self.application],
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)

    def stop(self) -> int:
        self.done.set()
        self.join(timeout=5)
        return self.peak


@dataclass
class Instance:
    size: int
    clusters: int
    redis_db: int
    repeat: int
    workdir: Path
    extra_env: dict[str, str]
    watcher_env: dict[str, str]
    keep_database: bool
    db_prefix: str = "bench_"
    # What the watcher of an earlier size held per cluster, when one ran.
    watcher_connections_per_cluster: float | None = None

    @property
    def label(self) -> str:
        return size_label(self.size)

    @property
    def database(self) -> str:
        return f"{self.db_prefix}fleet_{self.label}"

    @property
    def nodes(self) -> int:
        return round(self.size * NODES_PER_LEASE)


@contextlib.contextmanager
def timed(figures: InstanceFigures, phase: str) -> Iterator[None]:
    started = time.monotonic()
    log_line(f"{size_label(figures.size)}: {phase}…")
    yield
    figures.phases_seconds[phase] = round(time.monotonic() - started, 1)


def run_instance(instance: Instance) -> InstanceFigures:
    import redis

    workdir = instance.workdir / instance.label
    workdir.mkdir()
    log = workdir / "log.txt"
    url, admin_url = create_bench_database(instance.database)
    redis_url = f"redis://127.0.0.1:6379/{instance.redis_db}"
    redis.Redis.from_url(redis_url).flushdb()
    env = {
        **{
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DJANGO_", "REDIS_", "PG")) and key != "DATABASE_URL"
        },
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "DJANGO_ENV": "development",
        "DEBUG": "false",
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "DASHBOARD_VAR_DIR": str(workdir),
        "LOG_LEVEL": "warning",
        "LEASE_TABLE_CACHE_SECONDS": "0",
        "METRICS_TOKEN": METRICS_TOKEN,
        **instance.extra_env,
    }
    figures = InstanceFigures(
        size=instance.size,
        nodes=instance.nodes,
        clusters=instance.clusters,
        database=instance.database,
        redis_url=redis_url,
    )
    fleet = watcher = gunicorn = None
    connections: ConnectionPeak | None = None
    try:
        with timed(figures, "fake API servers loaded"):
            fleet_file = workdir / "fleet.json"
            fleet = start(
                [
                    PYTHON,
                    "-m",
                    "fakes.kube.fleet",
                    f"--clusters={instance.clusters}",
                    f"--leases={instance.size}",
                    f"--nodes={instance.nodes}",
                    f"--token={FAKE_TOKEN}",
                    f"--out={fleet_file}",
                ],
                env,
                log,
            )
            deadline = time.monotonic() + 600
            while not fleet_file.exists():
                if fleet.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the fake fleet did not start: see {log}")
                time.sleep(0.2)
            clusters = json.loads(fleet_file.read_text())["clusters"]
            served = (
                sum(cluster["leases"] for cluster in clusters),
                sum(cluster["nodes"] for cluster in clusters),
            )
        with timed(figures, "migrated, clusters registered"):
            login = run_django_phase(
                env, "register", {"clusters": clusters, "workdir": str(workdir)}, log
            )
        with timed(figures, "watcher: every Lease and Node stored"):
            import psycopg

            most, free = free_connections(admin_url)
            measured = instance.watcher_connections_per_cluster
            per_cluster = WATCHER_CONNECTIONS_PER_CLUSTER if measured is None else measured
            needed = math.ceil(per_cluster * instance.clusters) + 8
            if free < needed:
                said = (
                    f"the watcher of the size before held {measured:.2f} per cluster"
                    if measured is not None
                    else f"the watcher held {WATCHER_CONNECTIONS_PER_CLUSTER} per cluster "
                    "before issue 22"
                )
                log_line(
                    f"warning: {free} of PostgreSQL's {most} connections are free and "
                    f"{instance.clusters} clusters may need {needed}: {said}"
                )
            # Opened before the watcher starts, so polling never competes for a connection.
            poll = psycopg.connect(url, autocommit=True)
            started = time.monotonic()
            watcher = start(
                [PYTHON, "manage.py", "watch_leases"],
                {**env, **instance.watcher_env, "PGAPPNAME": WATCH_APP_NAME},
                log,
            )
            connections = ConnectionPeak(admin_url, instance.database, WATCH_APP_NAME)
            connections.start()
            progress, progressed_at = (0, 0), started
            while (counts := stored_counts(poll)) != served:
                if watcher.poll() is not None:
                    raise RuntimeError(f"the watcher exited with {watcher.returncode}: see {log}")
                if counts != progress:
                    progress, progressed_at = counts, time.monotonic()
                elif time.monotonic() - progressed_at > 120:
                    raise RuntimeError(
                        f"the watcher stored {counts} of {served} and nothing more for 2 "
                        f"minutes (short of database connections? see {log})"
                    )
                time.sleep(0.25)
            figures.watcher = WatcherFigures(
                leases=counts[0],
                nodes=counts[1],
                sync_seconds=round(time.monotonic() - started, 2),
                cpu_seconds=round(tree_cpu_seconds(watcher.pid), 2),
                peak_rss_bytes=tree_peak_rss(watcher.pid),
                processes=len(process_tree(watcher.pid)),
                db_connections_sync=connections.peak,
                db_cpu_seconds=round(
                    sum(backends_cpu(admin_url, instance.database, WATCH_APP_NAME).values()), 2
                ),
            )
            poll.close()
        with timed(figures, "history bulk-loaded, VACUUM ANALYZE"):
            history = run_django_phase(env, "history", {}, log)
            figures.rows = {
                "leases": figures.watcher.leases,
                "nodes": figures.watcher.nodes,
                **history["rows"],
            }
        with timed(figures, "alert evaluation"):
            evaluated = run_django_phase(env, "evaluate", {"repeat": instance.repeat}, log)
            first, *steady = evaluated["runs"]
            figures.evaluation = EvaluationFigures(
                first_ms=first["ms"],
                first_queries=first["queries"],
                times_ms=[run["ms"] for run in steady],
                queries=[run["queries"] for run in steady],
                db_cpu_ms=[run["db_ms"] for run in steady if run["db_ms"] is not None],
                lease_rows_read=evaluated["lease_rows"],
                peak_rss_bytes=evaluated["peak_rss_bytes"],
                summary=evaluated["summary"],
            )
        with timed(figures, "pages"):
            port = free_port()
            gunicorn = start_gunicorn(port, {**env, "PGAPPNAME": WEB_APP_NAME}, log)
            client = Client(port, login["session"], login["api_token"], METRICS_TOKEN)
            wait_until_serving(client, gunicorn, timeout=120)
            for request in request_plan(client, history["urls"]):
                measure_request(client, request, instance.repeat, gunicorn, admin_url, url_db(url))
                figures.requests.append(request)
                log_line(
                    f"{instance.label}: {request.label}: {request.median_ms:.0f} ms, "
                    f"{request.bytes} B {request.note}"
                )
        figures.watcher.peak_rss_bytes_end = tree_peak_rss(watcher.pid)
        figures.watcher.db_connections_peak = connections.stop()
        return figures
    finally:
        if connections is not None:
            connections.stop()
        stop(gunicorn)
        stop(watcher)
        stop(fleet)
        if not instance.keep_database:
            drop_bench_database(instance.database, admin_url)


def url_db(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


# --- the report -----------------------------------------------------------------------------


def ratio(small: float | None, large: float | None) -> float | None:
    if small is None or large is None or small != small or large != large or small <= 0:
        return None
    return large / small


def fmt(value: float | None, digits: int = 0) -> str:
    if value is None or value != value:
        return "?"
    return f"{value:,.{digits}f}"


def fmt_ratio(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}x"


def fmt_bytes(value: float) -> str:
    if value >= 2**20:
        return f"{value / 2**20:.1f} MiB"
    if value >= 10_240:
        return f"{value / 1024:.0f} KiB"
    return f"{value:,.0f} B"


def verdict(checks: list[tuple[str, bool | None]]) -> tuple[str, str]:
    """("PASS"/"FAIL"/"?", the targets) from (target, met) pairs; None: not measurable."""
    targets = ", ".join(name for name, _ in checks)
    if any(met is False for _, met in checks):
        failed = ", ".join(name for name, met in checks if met is False)
        return f"FAIL ({failed})", targets
    if any(met is None for _, met in checks):
        return "?", targets
    return "PASS", targets


def request_verdict(small: RequestFigures, large: RequestFigures) -> tuple[str, str]:
    if large.note or small.note:
        return f"FAIL ({large.note or small.note})", ""
    time_ratio = ratio(small.median_ms, large.median_ms)
    if large.kind == "metrics":
        return verdict(
            [
                ("≤ 2 MiB", large.bytes <= TARGET_METRICS_BYTES),
                ("≤ 1 s", large.median_ms <= TARGET_METRICS_MS),
            ]
        )
    return verdict(
        [
            (f"≤ {TARGET_RATIO:.0f}x", None if time_ratio is None else time_ratio <= TARGET_RATIO),
            (f"< {TARGET_PAGE_MS:.0f} ms", large.median_ms < TARGET_PAGE_MS),
        ]
    )


def report(results: list[InstanceFigures], repeat: int) -> str:
    small, large = results[0], results[-1]
    a, b = size_label(small.size), size_label(large.size)
    lines = [
        f"### Fleet: {small.clusters} clusters, {a} against {b} leases "
        f"({small.nodes:,} / {large.nodes:,} Nodes), PostgreSQL, one run",
        "",
        f"Median and p95 of {repeat} GETs, one at a time, after one warm-up; gunicorn 2 sync "
        "workers, no shared cache (LEASE_TABLE_CACHE_SECONDS=0); the watcher keeps running. "
        "db ms: CPU of the workers' PostgreSQL backends per request; app ms: CPU of the "
        "gunicorn workers per request; peak: the larger worker's peak RSS afterwards.",
        "",
        f"| what | median ms {a} | {b} | ratio | p95 ms {a} | {b} | db ms {a} | {b} "
        f"| app ms {a} | {b} | bytes {a} | {b} | peak MiB {a} | {b} | target | result |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    by_label = {request.label: request for request in small.requests}
    for big in large.requests:
        little = by_label.get(big.label)
        if little is None:
            lines.append(f"| {big.label} | | {fmt(big.median_ms)} | | | | | | | | | | | | | ? |")
            continue
        result, targets = request_verdict(little, big)
        lines.append(
            f"| {big.label} | {fmt(little.median_ms)} | {fmt(big.median_ms)} "
            f"| {fmt_ratio(ratio(little.median_ms, big.median_ms))} "
            f"| {fmt(little.p95_ms)} | {fmt(big.p95_ms)} "
            f"| {fmt(little.db_cpu_ms, 1)} | {fmt(big.db_cpu_ms, 1)} "
            f"| {fmt(little.app_cpu_ms, 1)} | {fmt(big.app_cpu_ms, 1)} "
            f"| {fmt_bytes(little.bytes)} | {fmt_bytes(big.bytes)} "
            f"| {fmt(little.worker_peak_rss_mb)} | {fmt(big.worker_peak_rss_mb)} "
            f"| {targets} | {result} |"
        )

    es, el = small.evaluation, large.evaluation
    eval_ratio = ratio(
        statistics.median(es.times_ms) if es.times_ms else None,
        statistics.median(el.times_ms) if el.times_ms else None,
    )
    large_median = statistics.median(el.times_ms) if el.times_ms else float("nan")
    eval_result, eval_targets = verdict(
        [
            ("≤ 1 s", large_median <= TARGET_EVALUATION_MS if el.times_ms else None),
            (f"≤ {TARGET_RATIO:.0f}x", None if eval_ratio is None else eval_ratio <= TARGET_RATIO),
        ]
    )

    def median_of(values: Sequence[float]) -> float | None:
        return statistics.median(values) if values else None

    lines += [
        "",
        f"| alert evaluation (`check_alerts --no-send`) | {a} | {b} | ratio | target | result |",
        "|---|---:|---:|---:|---|---|",
        f"| median ms (steady, {repeat} runs) | {fmt(median_of(es.times_ms))} "
        f"| {fmt(large_median)} | {fmt_ratio(eval_ratio)} | {eval_targets} | {eval_result} |",
        f"| p95 ms | {fmt(percentile(es.times_ms, 95))} | {fmt(percentile(el.times_ms, 95))} "
        f"| {fmt_ratio(ratio(percentile(es.times_ms, 95), percentile(el.times_ms, 95)))} | | |",
        f"| queries per run | {fmt(median_of(es.queries))} | {fmt(median_of(el.queries))} "
        f"| {fmt_ratio(ratio(median_of(es.queries), median_of(el.queries)))} | | |",
        f"| db CPU ms per run | {fmt(median_of(es.db_cpu_ms), 1)} "
        f"| {fmt(median_of(el.db_cpu_ms), 1)} "
        f"| {fmt_ratio(ratio(median_of(es.db_cpu_ms), median_of(el.db_cpu_ms)))} | | |",
        f"| lease rows read by one run (PostgreSQL's count) | {fmt(es.lease_rows_read)} "
        f"| {fmt(el.lease_rows_read)} | {fmt_ratio(ratio(es.lease_rows_read, el.lease_rows_read))} "
        "| | |",
        f"| peak RSS of the evaluating process | {fmt_bytes(es.peak_rss_bytes)} "
        f"| {fmt_bytes(el.peak_rss_bytes)} "
        f"| {fmt_ratio(ratio(es.peak_rss_bytes, el.peak_rss_bytes))} | | |",
        f"| first run ms (opens the incidents) / queries | {fmt(es.first_ms)} / "
        f"{es.first_queries:,} | {fmt(el.first_ms)} / {el.first_queries:,} | | | |",
    ]

    ws, wl = small.watcher, large.watcher
    # The fixed cost of a Python process with Django dominates at the small size: what each
    # further object costs is the difference between the sizes.
    marginal = (
        (wl.peak_rss_bytes_end - ws.peak_rss_bytes_end)
        / ((wl.leases + wl.nodes) - (ws.leases + ws.nodes))
        if len(results) > 1 and (wl.leases + wl.nodes) > (ws.leases + ws.nodes)
        else float("nan")
    )
    memory_result, memory_targets = verdict(
        [
            (
                "≤ 2 KiB per stored Lease and Node",
                wl.bytes_per_object <= TARGET_WATCHER_BYTES_PER_OBJECT,
            )
        ]
    )
    lines += [
        "",
        f"| watcher (`watch_leases`, {small.clusters} clusters, one process) | {a} | {b} "
        "| ratio | target | result |",
        "|---|---:|---:|---:|---|---|",
        f"| Leases + Nodes stored | {ws.leases:,} + {ws.nodes:,} | {wl.leases:,} + {wl.nodes:,} "
        "| | | |",
        f"| seconds until every one was stored | {fmt(ws.sync_seconds, 1)} "
        f"| {fmt(wl.sync_seconds, 1)} | {fmt_ratio(ratio(ws.sync_seconds, wl.sync_seconds))} "
        "| | |",
        f"| watcher CPU s until then | {fmt(ws.cpu_seconds, 1)} | {fmt(wl.cpu_seconds, 1)} "
        f"| {fmt_ratio(ratio(ws.cpu_seconds, wl.cpu_seconds))} | | |",
        f"| peak RSS when stored | {fmt_bytes(ws.peak_rss_bytes)} | {fmt_bytes(wl.peak_rss_bytes)} "
        f"| {fmt_ratio(ratio(ws.peak_rss_bytes, wl.peak_rss_bytes))} | | |",
        f"| peak RSS at the end | {fmt_bytes(ws.peak_rss_bytes_end)} "
        f"| {fmt_bytes(wl.peak_rss_bytes_end)} "
        f"| {fmt_ratio(ratio(ws.peak_rss_bytes_end, wl.peak_rss_bytes_end))} | | |",
        f"| peak RSS per stored Lease and Node | {fmt_bytes(ws.bytes_per_object)} "
        f"| {fmt_bytes(wl.bytes_per_object)} | | {memory_targets} | {memory_result} |",
        f"| each further Lease or Node ({a} → {b}) | | {fmt_bytes(marginal)} | | | |",
        f"| its PostgreSQL backends' CPU s until then | {fmt(ws.db_cpu_seconds, 1)} "
        f"| {fmt(wl.db_cpu_seconds, 1)} | {fmt_ratio(ratio(ws.db_cpu_seconds, wl.db_cpu_seconds))} "
        "| | |",
        f"| watcher DB connections (peak until stored / all along) "
        f"| {ws.db_connections_sync} / {ws.db_connections_peak} "
        f"| {wl.db_connections_sync} / {wl.db_connections_peak} | | | |",
        f"| watcher DB connections per cluster (peak) "
        f"| {fmt(ws.db_connections_peak / small.clusters, 2)} "
        f"| {fmt(wl.db_connections_peak / large.clusters, 2)} | | "
        f"{WATCHER_CONNECTIONS_PER_CLUSTER} before issue 22 | |",
    ]
    lines += [
        "",
        "Setup (seconds): "
        + per_size(results, lambda result: [f"{p} {s}" for p, s in result.phases_seconds.items()]),
        "",
        "Rows: " + per_size(results, lambda result: [f"{c:,} {n}" for n, c in result.rows.items()]),
    ]
    return "\n".join(lines)


def per_size(results: list[InstanceFigures], items: Callable[[InstanceFigures], list[str]]) -> str:
    """`2k: a, b; 100k: c, d` of each size's items."""
    return "; ".join(
        f"{size_label(result.size)}: " + ", ".join(items(result)) for result in results
    )


def as_json(
    results: list[InstanceFigures], args: argparse.Namespace, seconds: float
) -> dict[str, Any]:
    def request_json(request: RequestFigures) -> dict[str, Any]:
        return {**asdict(request), "median_ms": request.median_ms, "p95_ms": request.p95_ms}

    return {
        "sizes": [result.size for result in results],
        "repeat": args.repeat,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "seconds": round(seconds, 1),
        "instances": [
            {
                **{key: value for key, value in asdict(result).items() if key != "requests"},
                "watcher": {
                    **asdict(result.watcher),
                    "bytes_per_object": result.watcher.bytes_per_object,
                },
                "requests": [request_json(request) for request in result.requests],
            }
            for result in results
        ],
    }


# --- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--sizes", default="2000,100000", help="leases per instance, in all")
    parser.add_argument("--repeat", type=int, default=5, help="timed GETs (and evaluations) each")
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument(
        "--redis-dbs", default="6,7", help="a Redis database number per size (flushed)"
    )
    parser.add_argument(
        "--watcher-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for the watcher only (DB_CONN_MAX_AGE=0: it holds a database "
        "connection per thread, 3 per cluster, and returns them between uses with 0)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep-databases", action="store_true")
    add_database_option(parser)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for every process (e.g. to switch off a new page cache)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    redis_dbs = [int(number) for number in args.redis_dbs.split(",")]
    if len(redis_dbs) < len(sizes):
        sys.exit("--redis-dbs needs a database number per size")
    extra_env = dict(item.split("=", 1) for item in args.env)
    watcher_env = dict(item.split("=", 1) for item in args.watcher_env)
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as workdir:
        for size, redis_db in zip(sizes, redis_dbs, strict=False):
            instance = Instance(
                size=size,
                clusters=args.clusters,
                redis_db=redis_db,
                repeat=args.repeat,
                workdir=Path(workdir),
                extra_env=extra_env,
                watcher_env=watcher_env,
                keep_database=args.keep_databases,
                db_prefix=args.db_prefix,
                watcher_connections_per_cluster=(
                    results[-1].watcher.db_connections_peak / args.clusters if results else None
                ),
            )
            results.append(run_instance(instance))
    seconds = time.monotonic() - started
    print(report(results, args.repeat))
    print(
        f"\n{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end; "
        f"the whole run took {seconds / 60:.1f} min."
    )
    if args.json:
        args.json.write_text(json.dumps(as_json(results, args, seconds), indent=2))
    failed = any(request.note for result in results for request in result.requests)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--django-phase":
        sys.exit(django_phase_main(*sys.argv[2:]))
    sys.exit(main())
