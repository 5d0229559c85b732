"""What the benchmarks share to serve and time requests: child processes and what /proc says
of them (CPU, peak RSS), PostgreSQL backends seen from outside (by application_name),
gunicorn and an HTTP client for it, a signed-in session, and timed GETs through Django's
test client. A benchmark keeps only what it measures; this module only measures."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = str(REPO / ".venv" / "bin" / "python")
GUNICORN = str(REPO / ".venv" / "bin" / "gunicorn")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --- figures --------------------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (of 5 samples, p95 is the slowest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


def log_line(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- processes and /proc --------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        # After the ")" that ends the command name: state, ppid, ..., utime (11), stime (12).
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def cpu_seconds(pid: int) -> float | None:
    """CPU time so far of a single-threaded process (a gunicorn sync worker, a PostgreSQL
    backend): the scheduler's nanoseconds on a CPU, summed over its threads, where the kernel
    keeps them (/proc/<pid>/task/*/schedstat), else utime + stime in clock ticks (10 ms)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return (
            sum(
                int((task / "schedstat").read_text().split()[0])
                for task in Path(f"/proc/{pid}/task").iterdir()
            )
            / 1e9
        )
    return lifetime_cpu_seconds(pid)


def lifetime_cpu_seconds(pid: int) -> float | None:
    """utime + stime: every thread's, also of the threads that ended (a watcher's)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def process_tree(root: int) -> list[int]:
    """`root` and every process below it (a watcher may fork workers; gunicorn does)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def status_bytes(pid: int, key: str) -> int:
    """A /proc/<pid>/status memory line (VmHWM: peak RSS; VmRSS: now), in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_peak_rss(root: int) -> int:
    return sum(status_bytes(pid, "VmHWM") for pid in process_tree(root))


def tree_cpu_seconds(root: int) -> float:
    return sum(cpu or 0.0 for cpu in map(lifetime_cpu_seconds, process_tree(root)))


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in a session of its own (stop() ends its whole group), its output in `log`."""
    handle = log.open("ab")
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(process: subprocess.Popen[bytes] | None, timeout: float = 30.0) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- PostgreSQL, seen from outside ----------------------------------------------------------


def backend_pids(admin_url: str, database: str, application: str) -> list[int]:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            [database, application],
        ).fetchall()
    return [pid for (pid,) in rows]


def backends_cpu(admin_url: str, database: str, application: str) -> dict[int, float]:
    """CPU seconds so far of each backend serving `application` (PostgreSQL on this host)."""
    found = {pid: cpu_seconds(pid) for pid in backend_pids(admin_url, database, application)}
    return {pid: cpu for pid, cpu in found.items() if cpu is not None}


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU between two readings; a backend that came meanwhile counts from zero."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def free_connections(admin_url: str) -> tuple[int, int]:
    """(max_connections, how many are free now): the server's connections are shared."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT current_setting('max_connections')::int, "
            "current_setting('max_connections')::int - count(*) FROM pg_stat_activity"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


# --- gunicorn and HTTP ----------------------------------------------------------------------


def start_gunicorn(port: int, env: dict[str, str], log: Path, workers: int = 2) -> Any:
    return start(
        [
            GUNICORN,
            "dashboard.wsgi:application",
            f"--bind=127.0.0.1:{port}",
            f"--workers={workers}",
            "--worker-class=sync",
            # The slowest pages of the code before issue 22 took about a minute.
            "--timeout=600",
            "--log-level=warning",
        ],
        env,
        log,
    )


@dataclass
class Client:
    """GETs to gunicorn as a signed-in browser (session cookie), an API client (bearer
    token) or a scraper of /metrics (its token)."""

    port: int
    session: str
    api_token: str
    metrics_token: str = ""

    def get(self, path: str, *, target: str = "", kind: str = "page") -> tuple[int, bytes]:
        headers = {"Host": "127.0.0.1"}
        if kind == "api":
            headers["Authorization"] = f"Bearer {self.api_token}"
        elif kind == "metrics":
            headers["Authorization"] = f"Bearer {self.metrics_token}"
        else:
            headers["Cookie"] = f"sessionid={self.session}"
        if target:
            headers["HX-Request"] = "true"
            headers["HX-Target"] = target
            headers["HX-Current-URL"] = f"http://127.0.0.1:{self.port}{path}"
        connection = HTTPConnection("127.0.0.1", self.port, timeout=600)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def wait_until_serving(client: Client, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}")
        with contextlib.suppress(OSError):
            status, _ = client.get("/healthz", kind="metrics")
            if status < 500:
                return
        if time.monotonic() > deadline:
            raise RuntimeError("gunicorn did not answer in time")
        time.sleep(0.3)


# --- the Django side (inside a process with Django set up) ----------------------------------


def signed_in_session(user: Any) -> str:
    """The key of a new session signed in as `user` (a cookie for gunicorn or a client)."""
    from importlib import import_module

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

    store = import_module(settings.SESSION_ENGINE).SessionStore()
    store[SESSION_KEY] = str(user.pk)
    store[BACKEND_SESSION_KEY] = "dashboard.oidc.PasswordBackend"
    store[HASH_SESSION_KEY] = user.get_session_auth_hash()
    store.create()
    return str(store.session_key)


@dataclass
class Sample:
    """`repeat` GETs of one URL through Django's test client."""

    times_ms: list[float] = field(default_factory=list)
    database_ms: list[float] = field(default_factory=list)
    queries: int = 0
    bytes: int = 0
    status: int = 0

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)


def timed_client_gets(
    client: Any, path: str, repeat: int, headers: dict[str, str], warm_up: bool = False
) -> Sample:
    """Time `repeat` GETs (after one untimed GET with `warm_up`): each one's time and the
    database time of its queries (Django records them with DEBUG or a capture context), the
    queries of the last one. `headers` as the test client takes them (`HTTP_X_Y` or,
    through `headers=`, `X-Y`)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    sample = Sample()
    for turn in range(repeat + (1 if warm_up else 0)):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = client.get(path, **headers)
            elapsed = time.perf_counter() - started
        sample.status = response.status_code
        if response.status_code != 200:
            return sample
        if warm_up and turn == 0:
            continue  # warm the templates and the connection
        sample.times_ms.append(elapsed * 1000)
        sample.database_ms.append(
            sum(float(query["time"]) for query in captured.captured_queries) * 1000
        )
        sample.queries = len(captured.captured_queries)
        sample.bytes = len(response.content)
    return sample
