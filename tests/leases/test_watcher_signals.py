"""`watch_leases` stops cleanly on SIGTERM and SIGINT (issue 10, section 0.3): the cluster's
lock is released at once and its row says disconnected, also when the command runs in the
background, where a shell starts it with SIGINT ignored.

The command runs in its own process against the fake API server, on the test database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest
from django.db import connections

from fakes.kube import FakeApiServer
from leases.locks import watcher_lock
from leases.models import KubeCluster
from tests.conftest import REPO_ROOT
from tests.leases.test_watcher import eventually, leader_spec, register

pytestmark = pytest.mark.django_db(transaction=True)


def test_database_url() -> str:
    """The database this test runs on, for the command's process."""
    db = connections["default"].settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db["HOST"] or "127.0.0.1"
    return f"postgres://{db['USER']}{password}@{host}:{db['PORT'] or 5432}/{db['NAME']}"


test_database_url.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def ignore_sigint() -> None:
    # What a non-interactive shell does to a job it starts with `&`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_command(cluster: str, preexec: Callable[[], None] | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DATABASE_URL": test_database_url()}
    env.pop("DJANGO_ENV", None)
    return subprocess.Popen(
        [sys.executable, "manage.py", "watch_leases", "--cluster", cluster],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=preexec,  # only sets a signal disposition: safe before exec
    )


@pytest.mark.parametrize(
    ("signum", "preexec"),
    [
        (signal.SIGTERM, None),
        (signal.SIGINT, None),
        (signal.SIGINT, ignore_sigint),
    ],
    ids=["sigterm", "sigint", "sigint-in-the-background"],
)
def test_a_signal_releases_the_lock_and_marks_the_cluster_disconnected(
    apiserver: FakeApiServer, signum: signal.Signals, preexec: Callable[[], None] | None
) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    lock = watcher_lock(cluster.id, owner="")
    process = start_command(cluster.name, preexec)
    try:
        eventually(lambda: KubeCluster.objects.get(pk=cluster.pk).connected, timeout=30)
        assert apiserver.wait_for_watches(1)
        owner = lock.current_owner()
        assert owner is not None and owner == KubeCluster.objects.get(pk=cluster.pk).watcher_id
        process.send_signal(signum)
        output, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output.decode(errors="replace")
    row = KubeCluster.objects.get(pk=cluster.pk)
    assert not row.connected, "a stopped watcher must not read as connected"
    assert lock.current_owner() is None, "the lock must be free for another worker at once"
    # The fake notices a closed watch at its next write (a bookmark within 0.5 s).
    eventually(lambda: apiserver.store.open_watch_count == 0, timeout=5)
