"""The image's build context, as docker would send it: no secrets in, everything needed in.

The work tree is copied with the files a person following the README leaves beside it (the
compose `.env`, a kubeconfig, the development database); the context is then cut by
.dockerignore with docker's matching rules (tests/deploy/dockerignore.py).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.deploy.dockerignore import build_context, is_excluded, parse

# What the README's steps and ordinary work leave in a checkout, none of which may ship.
PLANTED = {
    ".env": "SECRET_KEY=planted-secret-key\nSECRETS_ENCRYPTION_KEYS=planted-fernet-key\n",
    ".env.production": "SECRET_KEY=planted-secret-key\n",
    "prod-dashboard.kubeconfig": "apiVersion: v1\nkind: Config\n# planted token\n",
    "var/db.sqlite3": "planted database",
    "var/secret_key": "planted-secret-key",
    "var/encryption_key": "planted-fernet-key",
    "var/broker/queue/message": "planted message",
    "db.sqlite3": "planted database",
    "some.key": "planted private key",
    "secrets.pem": "planted certificate and key",
    "dashboard/.env": "SECRET_KEY=planted-secret-key\n",
    "leases/cluster.kubeconfig": "planted kubeconfig",
    "nks/tls.key": "planted private key",
    "templates/backup.sqlite3": "planted database",
    "dashboard/__pycache__/settings.cpython-312.pyc": "planted bytecode",
    ".venv/bin/python": "planted interpreter",
    "staticfiles/css/dashboard.css": "planted collectstatic output",
}
SECRET_NAME = re.compile(
    r"(^|/)(\.env(\..*)?|[^/]*\.env|[^/]*\.kubeconfig|kubeconfig|[^/]*\.(key|pem|p12|pfx|crt)"
    r"|[^/]*\.sqlite3(-.*)?|[^/]*\.db)$"
)
# Folders that are local state or tooling, never source.
NEVER_SENT = ("var/", ".venv/", "staticfiles/", ".git/", "tests/", "bench/", "docs/", "deploy/")
APPS = ("dashboard", "leases", "nks", "alerts", "fakes")


def _work_tree_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [path for path in listed.split("\0") if path and (REPO_ROOT / path).is_file()]


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    checkout = tmp_path_factory.mktemp("checkout")
    for path in _work_tree_files():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / path, checkout / path)
    for path, text in PLANTED.items():
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text(text)
    sent_to = tmp_path_factory.mktemp("context")
    return sent_to, build_context(checkout, sent_to)


def test_no_secret_database_or_local_state_reaches_the_build_context(
    context: tuple[Path, list[str]],
) -> None:
    root, sent = context
    leaked = [path for path in sent if SECRET_NAME.search(path) or path.startswith(NEVER_SENT)]
    assert leaked == []
    assert not [path for path in sent if "__pycache__" in path or path.endswith(".pyc")]
    for path in sent:
        assert b"planted" not in (root / path).read_bytes(), path


def test_everything_the_image_copies_and_imports_is_in_the_context(
    context: tuple[Path, list[str]],
) -> None:
    root, sent = context
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    sources = [
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for source in shlex.split(line)[1:-1]
    ]
    assert "requirements.lock" in sources
    for source in sources:
        assert source == "." or (root / source).exists(), source
    assert "manage.py" in sent
    for app in APPS:
        assert f"{app}/__init__.py" in sent
        assert f"{app}/apps.py" in sent
        for migration in (REPO_ROOT / app / "migrations").glob("*.py"):
            assert f"{app}/migrations/{migration.name}" in sent
    for folder in ("templates", "static", "locale"):
        tracked = [path for path in _work_tree_files() if path.startswith(f"{folder}/")]
        assert tracked and set(tracked) <= set(sent), folder


def test_the_context_alone_starts_django_and_collects_static_files(
    context: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """What the Dockerfile's build step runs, on the context copy: every INSTALLED_APP,
    template folder, static file and catalog is importable or found from it alone."""
    root, _ = context
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "REDIS_", "SECRET", "EMAIL_", "PYTHON"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        DJANGO_ENV="production",
        SECRET_KEY="build-only-not-a-secret-build-only-not-a-secret-build-only",
        SECRETS_ENCRYPTION_KEYS="YnVpbGQtb25seS1ub3QtYS1zZWNyZXQtYnVpbGRvbmw=",
        ALLOWED_HOSTS="build",
        DATABASE_URL="postgres://build@build/build",
        REDIS_URL="redis://build:6379/0",
        STATIC_ROOT=str(tmp_path / "static"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "static" / "staticfiles.json").exists()
    checked = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import dashboard.urls"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        ("*", "manage.py", True),
        ("*", "dashboard/settings.py", True),  # by its parent directory
        ("*\n!dashboard", "dashboard/settings.py", False),
        ("*\n!dashboard\n**/.env", "dashboard/.env", True),
        ("**/.env", ".env", True),  # "**/" matches no directory as well
        ("*.key", "nks/tls.key", False),  # "*" stops at "/"
        ("**/*.key", "nks/tls.key", True),
        ("/var", "var/db.sqlite3", True),
        ("var/*.sqlite3", "var/db.sqlite3", True),
        ("*.py[cod]", "x.pyc", True),
        ("docs\n!docs/design.md", "docs/design.md", False),
        ("!x\n*", "x", True),  # last match wins
        ("a.b", "axb", False),  # "." is literal
    ],
)
def test_the_matcher_follows_docker_rules(patterns: str, path: str, excluded: bool) -> None:
    assert is_excluded(path, parse(patterns)) is excluded
