"""Management commands: add_nks_account, poll_nks, setup_demo's NKS account; NKS metrics."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from fakes.nks import FakeNks
from nks.models import NksAccount, NksCluster
from nks.tasks import poll_account as poll_account_task

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, nks_settings: Any) -> pytest.MonkeyPatch:
    for name in ("NKS_PASSWORD", "NKS_PASSWORD_FILE", "NKS_TOKEN", "NKS_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def identity_args(fake: FakeNks) -> list[str]:
    return [
        "--api-url",
        fake.url,
        "--identity-url",
        fake.identity_url,
        "--tenant-id",
        fake.tenant_id,
        "--username",
        fake.username,
    ]


def test_the_password_comes_from_the_environment_and_is_checked(
    clean_env: pytest.MonkeyPatch, fake_nks: FakeNks
) -> None:
    clean_env.setenv("NKS_PASSWORD", fake_nks.password)
    out = run("add_nks_account", "kr1", *identity_args(fake_nks), "--check")
    assert "Added NKS account 'kr1'" in out
    assert "Credentials work: 3 cluster(s) listed." in out
    assert fake_nks.password not in out
    account = NksAccount.objects.get(name="kr1")
    assert (account.password, account.token, account.username) == (
        fake_nks.password,
        "",
        fake_nks.username,
    )


def test_the_password_may_come_from_a_file(
    clean_env: pytest.MonkeyPatch, fake_nks: FakeNks, tmp_path: Path
) -> None:
    secret = tmp_path / "nks-password"
    secret.write_text(f"{fake_nks.password}\n")
    clean_env.setenv("NKS_PASSWORD_FILE", str(secret))
    run("add_nks_account", "kr1", *identity_args(fake_nks))
    assert NksAccount.objects.get(name="kr1").password == fake_nks.password


def test_without_a_password_in_the_environment_nothing_is_added(
    clean_env: pytest.MonkeyPatch, fake_nks: FakeNks
) -> None:
    with pytest.raises(CommandError, match="Set NKS_PASSWORD"):
        run("add_nks_account", "kr1", *identity_args(fake_nks))
    assert not NksAccount.objects.exists()


def test_a_token_from_the_environment_or_the_command_line(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("NKS_TOKEN", "tok-from-env")
    run("add_nks_account", "minted", "--api-url", "https://nks.example")
    assert NksAccount.objects.get(name="minted").token == "tok-from-env"
    run(
        "add_nks_account",
        "minted",
        "--api-url",
        "https://nks.example",
        "--token",
        "tok-2",
        "--replace",
    )
    assert NksAccount.objects.get(name="minted").token == "tok-2"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--api-url", "https://nks.example"], "Give --identity-url"),
        (["--api-url", "ftp://nks.example", "--token", "t"], "must be an http:// or https:// URL"),
        (
            ["--api-url", "https://nks.example", "--token", "t", "--username", "u"],
            "Set NKS_PASSWORD",
        ),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(
    clean_env: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        run("add_nks_account", "kr1", *args)
    assert not NksAccount.objects.exists()


def test_an_existing_account_needs_replace(clean_env: pytest.MonkeyPatch) -> None:
    run("add_nks_account", "kr1", "--api-url", "https://nks.example", "--token", "t")
    with pytest.raises(CommandError, match="exists already"):
        run("add_nks_account", "kr1", "--api-url", "https://nks.example", "--token", "t")


def test_poll_nks_polls_and_prints_a_summary(nks_account: NksAccount) -> None:
    out = run("poll_nks", "--account", "demo")
    assert "demo: 3 cluster(s), 5 nodegroup(s), 0 gone, 9 event(s) written" in out
    assert "16 HTTP calls" in out
    assert NksCluster.objects.count() == 3


def test_poll_nks_fails_loudly(nks_account: NksAccount, fake_nks: FakeNks) -> None:
    with pytest.raises(CommandError, match="No NKS account named 'nope'"):
        run("poll_nks", "--account", "nope")
    fake_nks.fail_next(r"/v1/clusters", 403)
    with pytest.raises(CommandError, match="Polling failed for: demo"):
        run("poll_nks")


def test_beat_dispatches_polls_and_the_poll_task_polls(nks_account: NksAccount) -> None:
    from dashboard.celery import app

    schedule = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert {
        "nks.tasks.poll_due_accounts",
        "nks.tasks.sweep_resizes",
        "dashboard.tasks.prune_history",
    } <= schedule
    # Tasks are plain functions of ids: run the one beat's dispatch queues, here.
    poll_account_task(nks_account.pk)
    nks_account.refresh_from_db()
    assert nks_account.polls_total == 1 and NksCluster.objects.count() == 3


def test_setup_demo_registers_the_fake_nks_as_account_demo(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("DEMO_NKS_PORT", "18002")
    out = run("setup_demo")
    assert "Demo NKS account 'demo' registered (port 18002)." in out
    account = NksAccount.objects.get(name="demo")
    assert account.api_url == "http://127.0.0.1:18002"
    assert account.identity_url == "http://127.0.0.1:18002/identity"
    assert "up to date" in run("setup_demo")


def test_metrics_export_poll_freshness_and_cluster_health(polled: NksAccount) -> None:
    text = Client().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "lease_dashboard_nks_metrics_up 1.0" in text
    assert (
        'lease_dashboard_nks_cluster_health{account="demo",cluster="prod-api",health="healthy"} 1.0'
        in text
    )
    assert (
        'lease_dashboard_nks_cluster_health{account="demo",cluster="legacy-batch",'
        'health="unknown"} 1.0' in text
    )
    assert 'lease_dashboard_nks_account_consecutive_failures{account="demo"} 0.0' in text
    assert (
        'lease_dashboard_nks_nodegroup_nodes{cluster="staging-web",nodegroup="default-worker",'
        'ready="false"} 1.0' in text
    )
