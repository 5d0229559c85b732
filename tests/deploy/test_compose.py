"""docker-compose.yml keeps its word (issue 23): every setting written into .env reaches
every dashboard service, one image is built once, and alert mail lands in Mailpit with
nothing more than the README's two keys. Checked offline with the real docker-compose CLI
(`config` renders what `up` would run), in a copy of the file beside a .env of the test's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO_ROOT

DASHBOARD_SERVICES = ("migrate", "web", "worker-watch", "worker", "worker-alerts", "beat")
README_ENV = {"SECRET_KEY": "s" * 60, "SECRETS_ENCRYPTION_KEYS": "k" * 43 + "="}


def rendered(docker_compose: list[str], tmp_path: Path, dot_env: dict[str, str]) -> dict[str, Any]:
    shutil.copy(REPO_ROOT / "docker-compose.yml", tmp_path / "docker-compose.yml")
    (tmp_path / ".env").write_text("".join(f"{key}={value}\n" for key, value in dot_env.items()))
    # Only what the README puts in .env: nothing of the test runner's own environment.
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    result = subprocess.run(
        [*docker_compose, "config"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_settings_written_into_dot_env_reach_every_dashboard_service(
    docker_compose: list[str], tmp_path: Path
) -> None:
    more = {
        "ALERT_EMAIL_TO": "team@example.org",
        "OIDC_ISSUER": "https://sso.example.org/realms/ops",
        "METRICS_TOKEN": "m" * 40,
        "LOG_LEVEL": "debug",
        "EMAIL_URL": "smtp://mail.example.org:587",
    }
    services = rendered(docker_compose, tmp_path, {**README_ENV, **more})["services"]
    for name in DASHBOARD_SERVICES:
        environment = services[name]["environment"]
        for key, value in {**README_ENV, **more}.items():
            assert environment.get(key) == value, (name, key)


def test_the_readme_dot_env_alone_sends_alert_mail_to_mailpit(
    docker_compose: list[str], tmp_path: Path
) -> None:
    services = rendered(docker_compose, tmp_path, README_ENV)["services"]
    for name in DASHBOARD_SERVICES:
        environment = services[name]["environment"]
        assert environment["EMAIL_URL"] == "smtp://mailpit:1025", name
        assert environment["ALERT_EMAIL_TO"], name
        assert environment["DATABASE_URL"].endswith("@postgres:5432/dashboard"), name
        assert environment["REDIS_URL"] == "redis://redis:6379/0", name
    assert "mailpit" in services


def test_one_image_is_built_once_and_used_by_every_dashboard_service(
    docker_compose: list[str], tmp_path: Path
) -> None:
    services = rendered(docker_compose, tmp_path, README_ENV)["services"]
    built = [name for name, service in services.items() if "build" in service]
    assert built == ["migrate"]
    images = {services[name]["image"] for name in DASHBOARD_SERVICES}
    assert images == {"lease-dashboard:latest"}
    for name in DASHBOARD_SERVICES:
        if name != "migrate":
            assert services[name]["pull_policy"] == "never", name
            assert services[name]["depends_on"]["migrate"]["condition"] == (
                "service_completed_successfully"
            )


def test_every_long_running_service_has_a_healthcheck(
    docker_compose: list[str], tmp_path: Path
) -> None:
    services = rendered(docker_compose, tmp_path, README_ENV)["services"]
    for name, service in services.items():
        if name == "migrate":
            continue
        assert "healthcheck" in service, name
    assert "pgdata:/var/lib/postgresql/data" in " ".join(
        str(volume) for volume in services["postgres"]["volumes"]
    ) or any(
        isinstance(volume, dict) and volume.get("target") == "/var/lib/postgresql/data"
        for volume in services["postgres"]["volumes"]
    )
    # gunicorn's --graceful-timeout (Dockerfile) ends before compose would kill the web, and
    # the workers' warm shutdown gets as long.
    for name in DASHBOARD_SERVICES:
        if name != "migrate":  # one-shot: it is never stopped
            assert services[name]["stop_grace_period"] in ("30s", 30, "30"), name
    assert '"--graceful-timeout", "20"' in (REPO_ROOT / "Dockerfile").read_text()
