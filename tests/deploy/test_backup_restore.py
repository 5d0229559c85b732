"""A backup restores: `pg_dump -Fc` of a working database, `pg_restore` into a fresh one, and
the dashboard reads it, secrets included, as the README's "Backups and restore" says.

The database is filled by the product's own code (a watched cluster whose leases the watcher
ingests from the fake API server over real HTTP, an NKS account with a password, an alert
channel, an incident the evaluator opens). The dump and restore are the real PostgreSQL
tools; the restored copy is then served by a new Django process pointed at it by
DATABASE_URL, once with the same encryption keys and once with other keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import psycopg.sql
import pytest
import yaml
from cryptography.fernet import Fernet
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from alerts.evaluation import run_evaluation
from alerts.models import AlertChannel, ChannelKind, Incident
from fakes.kube import FakeApiServer, kubeconfig_document
from leases.models import KubeCluster, Lease, LeaseTransition
from leases.services import register_kube_cluster
from leases.watcher import LeaseWatcher
from nks.models import NksAccount
from nks.services import register_nks_account
from tests.conftest import run_django, skip_or_fail

pytestmark = pytest.mark.django_db(transaction=True)

CLUSTER = "backup-prod"
TOKEN = "kube-token-restore-7c1e"
NKS_PASSWORD = "nks-password-restore-93ab"
CHANNEL_URL = "https://hooks.example.com/services/T000/B000/restore-secret-path"
SIGNING_SECRET = "webhook-signing-restore-5d20"
SUPERUSER = "restorer"

# A fresh process's view of the restored database, printed as one JSON line.
READ_RESTORED = r"""
import hashlib, json
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from alerts.models import AlertChannel, Incident
from dashboard.encryption import secret_problem
from leases.models import KubeCluster, Lease, LeaseTransition
from leases.watcher import LeaseWatcher
from nks.accounts import client_for
from nks.client import NksError
from nks.models import NksAccount
from nks.poller import poll_account

def digest(value):
    return hashlib.sha256(str(value).encode()).hexdigest()

# No migration is missing: the dump held the whole schema and its history.
call_command("migrate", check=True, verbosity=0)

cluster = KubeCluster.objects.get(name=CLUSTER)
account = NksAccount.objects.get(name="backup-kr1")
channel = AlertChannel.objects.get(name="backup-hook")
incident = Incident.objects.order_by("pk").first()
out = {
    "counts": {
        "clusters": KubeCluster.objects.count(),
        "leases": Lease.objects.count(),
        "transitions": LeaseTransition.objects.count(),
        "accounts": NksAccount.objects.count(),
        "incidents": Incident.objects.count(),
    },
    "digests": {
        "kubeconfig": digest(cluster.kubeconfig),
        "password": digest(account.password),
        "url": digest(channel.url),
        "signing_secret": digest(channel.signing_secret),
    },
    "problems": [
        secret_problem(value)
        for value in (cluster.kubeconfig, account.password, channel.url, channel.signing_secret)
    ],
}
try:
    client_for(account)
    out["nks_client"] = "built"
except NksError as error:
    out["nks_client"] = str(error)
if RUN_SOURCES:
    # The watcher and the poller read their secrets as they would after a restore (with
    # the right keys they would reach for the outside world: only without them is it safe).
    LeaseWatcher(cluster.pk, owner="restore-check").run(seconds=2)
    out["watch_error"] = KubeCluster.objects.get(pk=cluster.pk).last_error
    poll_account(account.pk)
    out["poll_error"] = NksAccount.objects.get(pk=account.pk).last_error

if not PAGES:
    print("RESULT " + json.dumps(out))
    raise SystemExit(0)
browser = Client(HTTP_HOST="localhost")
browser.force_login(get_user_model().objects.get(username=SUPERUSER))
pages = {
    "overview": "/",
    "leases": "/leases/?cluster=" + CLUSTER,
    "lease": "/leases/" + CLUSTER + "/kube-system/kube-scheduler/",
    "watchers": "/leases/clusters/",
    "nks": "/clusters/",
    "incident": "/alerts/%d/" % incident.pk,
    "cluster_admin": "/admin/leases/kubecluster/%d/change/" % cluster.pk,
    "account_admin": "/admin/nks/nksaccount/%d/change/" % account.pk,
    "channel_admin": "/admin/alerts/alertchannel/%d/change/" % channel.pk,
}
out["incident_title"] = incident.title
out["pages"] = {}
for name, url in pages.items():
    response = browser.get(url)
    out["pages"][name] = {"status": response.status_code, "body": response.content.decode()}
print("RESULT " + json.dumps(out))
"""


def _now_micro(offset: float = 0.0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _spec(holder: str, *, duration: int = 15, renewed_ago: float = 0.0) -> dict[str, Any]:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": _now_micro(-renewed_ago),
        "renewTime": _now_micro(-renewed_ago),
        "leaseTransitions": 0,
    }


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _eventually(check: Callable[[], bool], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


@pytest.fixture
def postgres_tools(postgres_database: None) -> None:
    """pg_dump and pg_restore, at least as new as the server (an older pg_dump refuses)."""
    missing = [tool for tool in ("pg_dump", "pg_restore") if shutil.which(tool) is None]
    if missing:
        skip_or_fail(
            f"needs {' and '.join(missing)} (apt-get install -y postgresql-client)",
            required_by="REQUIRE_SERVICES",
        )
    version = subprocess.run(
        ["pg_dump", "--version"], capture_output=True, text=True, check=True
    ).stdout
    found = re.search(r"(\d+)\.\d+", version)
    assert found, f"pg_dump printed no version: {version!r}"
    tools_major = int(found.group(1))
    server_major = connection.pg_version // 10000
    if tools_major < server_major:
        skip_or_fail(
            f"pg_dump {tools_major} cannot dump a PostgreSQL {server_major} server",
            required_by="REQUIRE_SERVICES",
        )


def _libpq_env(database: str) -> dict[str, str]:
    """Where the test database lives, for the PostgreSQL tools: in the environment, so the
    password never shows in a process list."""
    params = connection.settings_dict
    env = {**os.environ, "PGDATABASE": database}
    for variable, key in (
        ("PGHOST", "HOST"),
        ("PGPORT", "PORT"),
        ("PGUSER", "USER"),
        ("PGPASSWORD", "PASSWORD"),
    ):
        if params.get(key):
            env[variable] = str(params[key])
    return env


def _database_url(database: str) -> str:
    params = connection.settings_dict
    user = quote(str(params.get("USER") or ""), safe="")
    password = quote(str(params.get("PASSWORD") or ""), safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = params.get("HOST") or "127.0.0.1"
    port = params.get("PORT") or "5432"
    return f"postgres://{credentials}{host}:{port}/{database}"


@pytest.fixture
def fresh_database(postgres_tools: None) -> Iterator[str]:
    """An empty database beside the test database, named after it, dropped afterwards."""
    base = str(connection.settings_dict["NAME"]).removeprefix("test_")
    name = f"{base}_restored_{uuid.uuid4().hex[:8]}"
    params = connection.settings_dict

    def admin(statement: str) -> None:
        with psycopg.connect(
            dbname="postgres",
            host=params.get("HOST") or None,
            port=params.get("PORT") or None,
            user=params.get("USER") or None,
            password=params.get("PASSWORD") or None,
            autocommit=True,  # CREATE and DROP DATABASE refuse to run in a transaction
        ) as conn:
            conn.execute(psycopg.sql.SQL(statement).format(psycopg.sql.Identifier(name)))

    # template0: nothing an administrator added to template1 ends up in the restore.
    admin("CREATE DATABASE {} TEMPLATE template0")
    try:
        yield name
    finally:
        admin("DROP DATABASE IF EXISTS {} WITH (FORCE)")


def _fill_through_the_product() -> dict[str, Any]:
    """Rows as the running product writes them; returns what a restore must give back."""
    apiserver = FakeApiServer(token=TOKEN, bookmark_interval=0.5).start()
    try:
        store = apiserver.store
        store.apply_lease("kube-system", "kube-scheduler", _spec("master-0_a"))
        store.apply_lease("kube-node-lease", "worker-1", _spec("worker-1", duration=40))
        # Last renewed five minutes ago: expired, so the evaluator has something to say.
        store.apply_lease(
            "kube-system", "kube-controller-manager", _spec("master-1_b", renewed_ago=300)
        )
        kubeconfig = yaml.safe_dump(
            kubeconfig_document(apiserver.url, token=TOKEN, context_name=CLUSTER)
        )
        cluster, _ = register_kube_cluster(CLUSTER, kubeconfig=kubeconfig)
        stop = threading.Event()
        watcher = LeaseWatcher(cluster.pk, owner="backup-test", stop=stop, flush_interval=0.05)

        def watch() -> None:
            try:
                watcher.run()
            finally:
                connection.close()  # this thread's session must not outlive the database

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            _eventually(lambda: Lease.objects.filter(cluster=cluster).count() == 3, what="list")
            store.apply_lease("kube-system", "kube-scheduler", _spec("master-2_c"))
            _eventually(
                lambda: LeaseTransition.objects.filter(lease__name="kube-scheduler").exists(),
                what="the holder change",
            )
        finally:
            watcher._request_stop()
            thread.join(timeout=10)
        assert not thread.is_alive(), "the watcher did not stop"
    finally:
        apiserver.stop()

    register_nks_account(
        "backup-kr1",
        api_url="https://kr1-api-kubernetes.example.com",
        identity_url="https://api-identity-infrastructure.example.com",
        tenant_id="0123456789abcdef",
        username="oncall@example.com",
        password=NKS_PASSWORD,
    )
    AlertChannel.objects.create(
        name="backup-hook", kind=ChannelKind.WEBHOOK, url=CHANNEL_URL, signing_secret=SIGNING_SECRET
    )
    # Later than the watcher saw: its data is stale and the expired leader is past its grace.
    run_evaluation(timezone.now() + timedelta(minutes=10), dispatch=False)
    assert Incident.objects.exists(), "the evaluator opened no incident to back up"
    get_user_model().objects.create_superuser(SUPERUSER, "restorer@example.com", "unused-pass")
    return {
        "counts": {
            "clusters": KubeCluster.objects.count(),
            "leases": Lease.objects.count(),
            "transitions": LeaseTransition.objects.count(),
            "accounts": NksAccount.objects.count(),
            "incidents": Incident.objects.count(),
        },
        "digests": {
            "kubeconfig": _digest(kubeconfig),
            "password": _digest(NKS_PASSWORD),
            "url": _digest(CHANNEL_URL),
            "signing_secret": _digest(SIGNING_SECRET),
        },
        "incident_title": Incident.objects.order_by("pk")[0].title,
    }


def _read_restored(
    database: str, keys: list[str], tmp_path: Path, *, run_sources: bool, pages: bool = True
) -> Any:
    env = {
        "DATABASE_URL": _database_url(database),
        "SECRETS_ENCRYPTION_KEYS": ",".join(keys),
        "SECRET_KEY": settings.SECRET_KEY,
        "DASHBOARD_VAR_DIR": str(tmp_path / f"var-{uuid.uuid4().hex[:6]}"),
        # Nothing cached by this test's process may answer for the restored database.
        "CACHE_KEY_PREFIX": f"restore-{uuid.uuid4().hex}",
    }
    if os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = os.environ["REDIS_URL"]
    names = {"CLUSTER": CLUSTER, "SUPERUSER": SUPERUSER, "RUN_SOURCES": run_sources, "PAGES": pages}
    code = "".join(f"{name} = {value!r}\n" for name, value in names.items())
    result = run_django(code + READ_RESTORED, env=env, timeout=120)
    assert result.returncode == 0, f"the restored database could not be read:\n{result.stderr}"
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def _secrets_in(body: str) -> list[str]:
    """Secrets, or their ciphertext, that a page shows."""
    shown = [
        secret for secret in (TOKEN, NKS_PASSWORD, CHANNEL_URL, SIGNING_SECRET) if secret in body
    ]
    if "fernet:" in body or re.search(r"gAAAAA[A-Za-z0-9_-]{20,}", body):
        shown.append("ciphertext")
    return shown


def test_a_dump_restored_into_a_fresh_database_is_read_with_its_secrets(
    fresh_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The keys are handed to the reading process in SECRETS_ENCRYPTION_KEYS; a _FILE
    # variable inherited beside it would make its settings refuse to start.
    monkeypatch.delenv("SECRETS_ENCRYPTION_KEYS_FILE", raising=False)
    expected = _fill_through_the_product()
    dump = tmp_path / "dashboard.dump"
    source = str(connection.settings_dict["NAME"])
    dumped = subprocess.run(
        ["pg_dump", "--format=custom", f"--file={dump}"],
        env=_libpq_env(source),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert dumped.returncode == 0, dumped.stderr
    restored = subprocess.run(
        ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={fresh_database}", str(dump)],
        env=_libpq_env(fresh_database),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert restored.returncode == 0, restored.stderr

    seen = _read_restored(
        fresh_database, settings.SECRETS_ENCRYPTION_KEYS, tmp_path, run_sources=False
    )
    assert seen["counts"] == expected["counts"]
    assert seen["digests"] == expected["digests"], "a secret did not decrypt to what was stored"
    assert seen["problems"] == [None, None, None, None]
    assert seen["nks_client"] == "built"
    for name, page in seen["pages"].items():
        assert page["status"] == 200, f"{name}: {page['status']}"
        assert _secrets_in(page["body"]) == [], f"{name} shows a secret"
    assert "kube-controller-manager" in seen["pages"]["leases"]["body"]
    assert "master-2_c" in seen["pages"]["lease"]["body"]
    assert CLUSTER in seen["pages"]["watchers"]["body"]
    assert seen["incident_title"] == expected["incident_title"]
    assert no_key_text() not in seen["pages"]["cluster_admin"]["body"]

    # Mid-rotation (a new key first, the old one after it) the old secrets still decrypt.
    rotating = [Fernet.generate_key().decode(), *settings.SECRETS_ENCRYPTION_KEYS]
    mid_rotation = _read_restored(
        fresh_database, rotating, tmp_path, run_sources=False, pages=False
    )
    assert mid_rotation["digests"] == expected["digests"]
    assert mid_rotation["problems"] == [None, None, None, None]

    # The same dump read with other keys: the secrets are refused in words, never shown.
    other_keys = [Fernet.generate_key().decode()]
    lost = _read_restored(fresh_database, other_keys, tmp_path, run_sources=True)
    assert lost["counts"] == expected["counts"], "the rows themselves do not need the keys"
    assert lost["digests"] == {key: _digest("") for key in expected["digests"]}
    assert all(
        problem and "cannot be decrypted with any key in SECRETS_ENCRYPTION_KEYS" in problem
        for problem in lost["problems"]
    ), lost["problems"]
    assert "stored credentials cannot be read" in lost["nks_client"]
    assert "The kubeconfig cannot be read" in lost["watch_error"]
    assert "stored credentials cannot be read" in lost["poll_error"]
    for name, page in lost["pages"].items():
        assert page["status"] == 200, f"{name}: {page['status']} with other keys"
        assert _secrets_in(page["body"]) == [], f"{name} shows a secret or its ciphertext"
    for name in ("cluster_admin", "account_admin", "channel_admin"):
        assert no_key_text() in lost["pages"][name]["body"], f"{name} does not say why"
    # Every page says it at the top, beside the data's age; the watchers page on the row.
    assert "The kubeconfig cannot be read" in lost["pages"]["overview"]["body"]
    assert "The kubeconfig cannot be read" in lost["pages"]["watchers"]["body"]
    assert "stored credentials cannot be read" in lost["pages"]["nks"]["body"]


def no_key_text() -> str:
    """What admin says of a secret no configured key decrypts (English: the test client sends
    no Accept-Language)."""
    return "no configured key decrypts it"
