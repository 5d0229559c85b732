"""A command run against a database it cannot use says so in one line and exits non-zero.

Each case runs `manage.py` in a process of its own, as a person would, against a database
that is empty, behind this code, or unreachable: no traceback, the database named without
its password, the way out (`manage.py migrate`, DATABASE_URL) said.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dashboard.commands import DATABASE_NOT_READY

REPO = Path(__file__).resolve().parents[2]


def manage(tmp_path: Path, database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DASHBOARD_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SETTINGS_MODULE": "dashboard.settings",
        "LANGUAGE_CODE": "en",
    }
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["create_api_token", "erin"],
        ["check_alerts"],
        # Refused for its database before it reads the kubeconfig it names.
        ["add_kube_cluster", "prod", "--kubeconfig", "absent.yaml"],
        ["poll_nks"],
    ],
)
def test_a_never_migrated_database_is_named_in_one_line(tmp_path: Path, command: list[str]) -> None:
    result = manage(tmp_path, f"sqlite:///{tmp_path / 'empty.sqlite3'}", *command)

    assert result.returncode == DATABASE_NOT_READY
    line = one_line(result)
    assert "has none of the dashboard's tables" in line
    assert "manage.py migrate" in line and "DATABASE_URL" in line
    assert str(tmp_path / "empty.sqlite3") in line


def test_a_database_behind_this_code_says_how_far_and_from_where(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    migrated = manage(tmp_path, url, "migrate", "auth", "--noinput")
    assert migrated.returncode == 0, migrated.stderr

    result = manage(tmp_path, url, "create_api_token", "erin")

    assert result.returncode == DATABASE_NOT_READY
    line = one_line(result)
    assert "migrations behind this code" in line and "manage.py migrate" in line


def test_an_unreachable_database_is_named_without_its_password(tmp_path: Path) -> None:
    # Port 1: nothing listens there; the connection is refused at once.
    url = "postgres://oncall:hunter2-secret@127.0.0.1:1/dashboard"

    result = manage(tmp_path, url, "create_api_token", "erin")

    assert result.returncode == DATABASE_NOT_READY
    line = one_line(result)
    assert line.startswith(
        "CommandError: Cannot use the database (PostgreSQL dashboard on 127.0.0.1:1)"
    )
    assert "hunter2" not in result.stderr + result.stdout


def test_a_migrated_database_runs_the_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert manage(tmp_path, url, "migrate", "--noinput").returncode == 0

    result = manage(tmp_path, url, "create_api_token", "nobody")

    # The command's own refusal, not the database check's.
    assert result.returncode == 1
    assert one_line(result) == "CommandError: No user named 'nobody'."
