"""Secrets at rest: every door stores ciphertext, a wrong key is an error on the row, keys rotate.

The checks read the columns with raw SQL, as an attacker with a database dump would.
"""

from __future__ import annotations

import threading
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from dashboard.encryption import CIPHERTEXT_PREFIX, UnreadableSecret, secret_problem
from fakes.kube import FakeApiServer, kubeconfig_document
from fakes.nks import FakeNks
from leases.models import KubeCluster
from leases.services import register_kube_cluster
from leases.watcher import Backoff, LeaseWatcher
from nks.models import NksAccount
from nks.poller import poll_account
from nks.services import register_nks_account
from tests.conftest import run_django

KUBE_TOKEN = "kube-token-PLAINTEXT-7f3a"


def raw_column(table: str, column: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table}")
        return [row[0] for row in cursor.fetchall()]


def assert_only_ciphertext(table: str, column: str, *plaintexts: str) -> None:
    stored = [value for value in raw_column(table, column) if value]
    assert stored, f"{table}.{column} holds no secret at all"
    for value in stored:
        assert value.startswith(CIPHERTEXT_PREFIX), f"{table}.{column} is not encrypted"
        for plain in plaintexts:
            assert plain not in value, f"{table}.{column} holds the plain text"


def kubeconfig_text(server_url: str = "https://127.0.0.1:6443", name: str = "prod") -> str:
    return yaml.safe_dump(kubeconfig_document(server_url, token=KUBE_TOKEN, context_name=name))


@pytest.fixture
def operator_client(client: Client, django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("olivia")
    user.groups.add(Group.objects.get(name="operators"))
    client.force_login(user)
    return client


# --- Every door stores ciphertext ------------------------------------------------------------


@pytest.mark.django_db
def test_add_kube_cluster_stores_the_kubeconfig_encrypted(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(kubeconfig_text())
    call_command("add_kube_cluster", "prod", "--kubeconfig", str(path), stdout=StringIO())
    assert_only_ciphertext("leases_kubecluster", "kubeconfig", KUBE_TOKEN, "server:")
    assert KUBE_TOKEN in KubeCluster.objects.get(name="prod").kubeconfig


@pytest.mark.django_db
def test_admin_stores_the_kubeconfig_encrypted(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/leases/kubecluster/add/",
        {"name": "prod", "enabled": "on", "source": "kubeconfig", "kubeconfig": kubeconfig_text()},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert_only_ciphertext("leases_kubecluster", "kubeconfig", KUBE_TOKEN)


@pytest.mark.django_db
def test_the_nks_one_click_lease_source_stores_the_kubeconfig_encrypted(
    fake_nks: FakeNks, nks_settings: Any, operator_client: Client
) -> None:
    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    assert poll_account(account.pk).ok
    page = operator_client.get("/clusters/").content.decode()
    assert "prod-api" in page
    cluster_path = next(
        part.split('"')[0]
        for part in page.split('href="')
        if part.startswith("/clusters/") and "prod-api" in part.split("</a>")[0]
    )
    operator_client.post(f"{cluster_path}watch-leases/")
    kubeconfig = KubeCluster.objects.get(name="prod-api").kubeconfig
    assert "fake-nks-" in kubeconfig
    assert_only_ciphertext("leases_kubecluster", "kubeconfig", "fake-nks-")


@pytest.mark.django_db
def test_add_nks_account_stores_the_password_encrypted(
    fake_nks: FakeNks, nks_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NKS_PASSWORD", fake_nks.password)
    call_command(
        "add_nks_account",
        "kr1",
        "--api-url",
        fake_nks.url,
        "--identity-url",
        fake_nks.identity_url,
        "--tenant-id",
        fake_nks.tenant_id,
        "--username",
        fake_nks.username,
        stdout=StringIO(),
    )
    assert_only_ciphertext("nks_nksaccount", "password", fake_nks.password)
    assert NksAccount.objects.get(name="kr1").password == fake_nks.password


@pytest.mark.django_db
def test_admin_stores_the_nks_token_encrypted(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/nks/nksaccount/add/",
        {"name": "minted", "enabled": "on", "api_url": "https://nks.example", "token": "tok-42"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert_only_ciphertext("nks_nksaccount", "token", "tok-42")
    assert NksAccount.objects.get(name="minted").token == "tok-42"


@pytest.mark.django_db(transaction=True)
def test_the_data_migration_encrypts_rows_written_before_it() -> None:
    executor = MigrationExecutor(connection)
    before = [("leases", "0002_renewals_stay_hot"), ("nks", "0001_initial")]
    executor.migrate(before)
    old_apps = executor.loader.project_state(before).apps
    old_apps.get_model("leases", "KubeCluster").objects.create(
        name="old", kubeconfig=kubeconfig_text()
    )
    old_apps.get_model("nks", "NksAccount").objects.create(
        name="old", api_url="https://nks.example", token="tok-from-before"
    )
    assert KUBE_TOKEN in raw_column("leases_kubecluster", "kubeconfig")[0]

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert_only_ciphertext("leases_kubecluster", "kubeconfig", KUBE_TOKEN)
    assert_only_ciphertext("nks_nksaccount", "token", "tok-from-before")
    assert KUBE_TOKEN in KubeCluster.objects.get(name="old").kubeconfig
    assert NksAccount.objects.get(name="old").token == "tok-from-before"


# --- A missing or wrong key is an error on the row -------------------------------------------


@pytest.mark.django_db
def test_a_wrong_key_reads_as_an_unreadable_secret_and_saving_keeps_the_ciphertext(
    settings: Any,
) -> None:
    cluster, _ = register_kube_cluster("prod", kubeconfig=kubeconfig_text())
    original_keys = list(settings.SECRETS_ENCRYPTION_KEYS)
    settings.SECRETS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]

    unreadable = KubeCluster.objects.get(pk=cluster.pk)
    assert isinstance(unreadable.kubeconfig, UnreadableSecret)
    assert unreadable.kubeconfig == ""
    problem = secret_problem(unreadable.kubeconfig)
    assert problem is not None and "SECRETS_ENCRYPTION_KEYS" in problem
    assert KUBE_TOKEN not in repr(unreadable.kubeconfig)
    unreadable.enabled = False
    unreadable.save()  # an unrelated edit must not destroy the secret

    settings.SECRETS_ENCRYPTION_KEYS = original_keys
    assert KUBE_TOKEN in KubeCluster.objects.get(pk=cluster.pk).kubeconfig


@pytest.mark.django_db
def test_plain_text_left_in_a_secret_column_is_refused_not_used() -> None:
    cluster, _ = register_kube_cluster("prod", kubeconfig=kubeconfig_text())
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE leases_kubecluster SET kubeconfig = %s WHERE id = %s",
            [kubeconfig_text(), cluster.pk],
        )
    stored = KubeCluster.objects.get(pk=cluster.pk).kubeconfig
    assert stored == ""
    assert "not encrypted" in (secret_problem(stored) or "")


@pytest.mark.django_db(transaction=True)
def test_a_watcher_with_an_undecryptable_kubeconfig_says_so_and_keeps_running(
    settings: Any,
) -> None:
    server = FakeApiServer(token=KUBE_TOKEN).start()
    try:
        cluster, _ = register_kube_cluster("prod", kubeconfig=kubeconfig_text(server.url))
        settings.SECRETS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
        stop = threading.Event()
        watcher = LeaseWatcher(
            cluster.pk,
            owner="test",
            stop=stop,
            flush_interval=0.05,
            backoff=Backoff(base=0.1, maximum=0.2, auth_base=0.1, auth_maximum=0.2),
        )
        thread = threading.Thread(target=watcher.run, kwargs={"seconds": 30.0}, daemon=True)
        thread.start()
        # Until the watcher has said why it cannot connect (a second on a quiet machine, more
        # on a busy one), then it is stopped: it keeps retrying, it never gives up.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and thread.is_alive():
            if KubeCluster.objects.filter(pk=cluster.pk).exclude(last_error="").exists():
                break
            time.sleep(0.05)
        assert thread.is_alive(), "the watcher keeps running"
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        server.stop()
    cluster.refresh_from_db()
    assert "The kubeconfig cannot be read" in cluster.last_error
    assert "SECRETS_ENCRYPTION_KEYS" in cluster.last_error
    assert not cluster.connected
    assert server.requests == [], "nothing may be sent without the real credentials"


@pytest.mark.django_db
def test_a_poll_with_undecryptable_credentials_is_an_account_error(
    fake_nks: FakeNks, nks_settings: Any
) -> None:
    account, _ = register_nks_account("demo", api_url=fake_nks.url, **fake_nks.credentials())
    nks_settings.SECRETS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    result = poll_account(account.pk)
    assert not result.ok
    assert "credentials cannot be read" in (result.error or "")
    account.refresh_from_db()
    assert "SECRETS_ENCRYPTION_KEYS" in account.last_error
    assert account.consecutive_failures == 1
    assert fake_nks.requests_seen() == []


# --- Rotation --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_rotate_secrets_re_encrypts_with_the_first_key_and_counts_rows(settings: Any) -> None:
    old_key = settings.SECRETS_ENCRYPTION_KEYS[0]
    register_kube_cluster("prod", kubeconfig=kubeconfig_text())
    register_kube_cluster("self", in_cluster=True)
    register_nks_account("minted", api_url="https://nks.example", token="tok-42")
    new_key = Fernet.generate_key().decode()
    settings.SECRETS_ENCRYPTION_KEYS = [new_key, old_key]

    out = StringIO()
    call_command("rotate_secrets", stdout=out)
    assert "Re-encrypted 2 row(s) with the first key." in out.getvalue()
    assert "leases.KubeCluster.kubeconfig: 1 row(s) re-encrypted" in out.getvalue()

    settings.SECRETS_ENCRYPTION_KEYS = [new_key]  # the old key can go now
    assert KUBE_TOKEN in KubeCluster.objects.get(name="prod").kubeconfig
    assert NksAccount.objects.get(name="minted").token == "tok-42"

    again = StringIO()
    call_command("rotate_secrets", stdout=again)
    assert "Re-encrypted 0 row(s) with the first key." in again.getvalue()


@pytest.mark.django_db
def test_rotate_secrets_leaves_undecryptable_rows_alone_and_fails_loudly(settings: Any) -> None:
    register_kube_cluster("prod", kubeconfig=kubeconfig_text())
    before = raw_column("leases_kubecluster", "kubeconfig")
    settings.SECRETS_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(CommandError, match=r"1 secret\(s\) could not be decrypted"):
        call_command("rotate_secrets", stdout=StringIO())
    assert raw_column("leases_kubecluster", "kubeconfig") == before


# --- Start-up --------------------------------------------------------------------------------

PRODUCTION = {
    "DJANGO_ENV": "production",
    "SECRET_KEY": "p" * 20 + "q" * 20 + "r" * 20 + "stuvw",
    "ALLOWED_HOSTS": "dashboard.example.org",
    "DATABASE_URL": "postgres://dashboard@db.internal:5432/dashboard",
    "REDIS_URL": "redis://redis.internal:6379/0",
}


def test_production_refuses_to_start_without_encryption_keys() -> None:
    result = run_django("", env=PRODUCTION)
    assert result.returncode != 0
    assert "SECRETS_ENCRYPTION_KEYS (or SECRETS_ENCRYPTION_KEYS_FILE) is required" in (
        result.stderr
    )


def test_a_malformed_key_is_named_by_position_and_never_echoed(tmp_path: Path) -> None:
    good = Fernet.generate_key().decode()
    key_file = tmp_path / "keys"
    key_file.write_text(f"{good}\nnot-a-fernet-key-SEKRET\n")
    result = run_django("", env={**PRODUCTION, "SECRETS_ENCRYPTION_KEYS_FILE": str(key_file)})
    assert result.returncode != 0
    assert "key 2 of 2 is not a Fernet key" in result.stderr
    assert "SEKRET" not in result.stderr
    assert good not in result.stderr


def test_keys_from_a_file_decrypt_what_the_first_key_encrypted(tmp_path: Path) -> None:
    first, second = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    key_file = tmp_path / "keys"
    key_file.write_text(f"{first},{second}\n")
    code = (
        "from django.conf import settings\n"
        "from dashboard.encryption import encrypt\n"
        "from cryptography.fernet import Fernet\n"
        "token = encrypt('hello')[len('fernet:'):]\n"
        f"print(len(settings.SECRETS_ENCRYPTION_KEYS), Fernet({first!r}).decrypt(token).decode())\n"
    )
    result = run_django(code, env={**PRODUCTION, "SECRETS_ENCRYPTION_KEYS_FILE": str(key_file)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "hello"]
