"""The built image's entrypoints, run by a real container runtime (issue 23).

Needs podman and an image built by `make image` (DASHBOARD_IMAGE, `lease-dashboard:<version>`
by default). Base images cannot be pulled on this project's machines, so a fresh machine or
CI without the image skips, saying so; the README says how the image was checked by hand.
Each container runs as the image says (its user, its CMD), on a read-only root with every
capability dropped and /tmp as the one writable place, against this run's PostgreSQL (a
database of its own) and Redis, on the host's network.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import REPO_ROOT

# `make image` tags the version it labels (pyproject.toml) besides `latest`; `docker compose
# up --build` re-tags only `latest`, without the labels, so the version's tag is what is tested.
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = os.environ.get("DASHBOARD_IMAGE", f"lease-dashboard:{VERSION}")
PODMAN = shutil.which("podman")
# Some sandboxes refuse the limits podman raises by default ("error setting rlimit"):
# lower ones are always allowed, and these are far above what a process here uses.
LIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
HARDENED = ["--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL"]
HARDENED += ["--security-opt", "no-new-privileges", "--network", "host"]
# Beat publishes its schedule and the workers consume it: on a Redis database of their own, so
# none of it reaches the workers other tests start on REDIS_URL's database (or theirs here).
IMAGE_REDIS_DB = 15
PROBE = 'test $(( $(date +%s) - $(stat -c %Y "$0") )) -lt 60'


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    return subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def image() -> str:
    if PODMAN is None:
        pytest.skip("needs podman (apt-get install -y podman) and an image from `make image`")
    if podman("image", "exists", IMAGE).returncode != 0:
        pytest.skip(
            f"no image {IMAGE}: build it with `make image` (base images cannot be pulled on "
            "this project's machines: see the README's 'The image')"
        )
    return IMAGE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not database_url.startswith("postgres") or not redis_url.startswith("redis"):
        pytest.skip("the image runs in production mode: needs DATABASE_URL and REDIS_URL")
    import psycopg
    import redis

    name = f"image_{secrets.token_hex(4)}"
    own_redis = urlunsplit(urlsplit(redis_url)._replace(path=f"/{IMAGE_REDIS_DB}"))
    redis.Redis.from_url(own_redis).flushdb()
    # The server's maintenance database: DATABASE_URL's own may exist only as test_<name>.
    admin_url = urlunsplit(urlsplit(database_url)._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    values = {
        "DATABASE_URL": urlunsplit(urlsplit(database_url)._replace(path=f"/{name}")),
        "REDIS_URL": own_redis,
        "SECRET_KEY": secrets.token_urlsafe(60),
        "SECRETS_ENCRYPTION_KEYS": "QmFja3VwcyBhbmQgaW1hZ2VzOiBhIHRlc3Qga2V5ISE=",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
    }
    path = tmp_path_factory.mktemp("image") / "env"
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    try:
        yield path
    finally:
        with psycopg.connect(admin_url, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        redis.Redis.from_url(own_redis).flushdb()


def inspect(image: str) -> dict[str, Any]:
    result = podman("image", "inspect", image)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[0]


class Container:
    def __init__(self, image: str, env_file: Path, *command: str) -> None:
        self.name = f"test-{secrets.token_hex(4)}"
        args = ["run", "-d", "--name", self.name, *HARDENED, *LIMITS, "--env-file", str(env_file)]
        result = podman(*args, image, *command)
        assert result.returncode == 0, result.stderr

    def logs(self) -> str:
        result = podman("logs", self.name)
        return result.stdout + result.stderr

    def exec(self, *command: str) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.name, *command)

    def stop(self, grace: int = 30) -> tuple[float, int]:
        started = time.monotonic()
        podman("stop", "-t", str(grace), self.name, timeout=grace + 30)
        seconds = time.monotonic() - started
        code = podman("inspect", self.name, "--format", "{{.State.ExitCode}}").stdout.strip()
        return seconds, int(code or -1)

    def remove(self) -> None:
        podman("rm", "-f", self.name)


def wait_for(check: Any, timeout: float, what: str, container: Container) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout} s; logs:\n{container.logs()[-3000:]}")


def test_the_image_says_what_it_holds_and_runs_as_its_own_user(image: str) -> None:
    config = inspect(image)
    labels = config["Config"].get("Labels") or {}
    assert labels["org.opencontainers.image.title"] == "lease-dashboard"
    assert labels["org.opencontainers.image.version"] == VERSION
    assert len(labels["org.opencontainers.image.revision"]) == 40
    assert config["Config"]["User"] == "dashboard"
    # The code is root's: the runtime user cannot change it, even with a writable root.
    result = podman("run", "--rm", *LIMITS, image, "sh", "-c", "id -u; touch /app/manage.py")
    assert result.stdout.split()[0] == "10001"
    assert result.returncode != 0 and "Permission denied" in result.stderr


def test_every_entrypoint_starts_answers_and_stops_in_time(image: str, env_file: Path) -> None:
    migrate = podman(
        "run", "--rm", *HARDENED, *LIMITS, "--env-file", str(env_file), image,
        "python", "manage.py", "migrate", "--noinput",
        timeout=300,
    )  # fmt: skip
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr

    # The image's own CMD, on a free port of the host's network.
    command = [
        f"127.0.0.1:{(port := free_port())}" if part == "0.0.0.0:8000" else part
        for part in inspect(image)["Config"]["Cmd"]
    ]
    assert "--no-control-socket" in command
    containers = {
        "web": Container(image, env_file, *command),
        "worker": Container(image, env_file, "celery", "-A", "dashboard", "worker", "--queues",
                            "default", "--concurrency", "1", "--hostname", "default@%h"),
        "watch": Container(image, env_file, "celery", "-A", "dashboard", "worker", "--queues",
                           "watch", "--pool", "threads", "--concurrency", "4", "--hostname",
                           "watch@%h"),
        "beat": Container(image, env_file, "celery", "-A", "dashboard", "beat", "--schedule",
                          "/tmp/celerybeat-schedule"),
    }  # fmt: skip
    try:
        web = containers["web"]

        def answers(path: str) -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(lambda: answers("/readyz"), 60, "web answered /readyz", web)
        assert answers("/login/")
        for name, file in (
            ("worker", "/tmp/celery-worker-alive"),
            ("watch", "/tmp/celery-worker-alive"),
            ("beat", "/tmp/celery-beat-alive"),
        ):
            container = containers[name]
            wait_for(
                lambda c=container, f=file: c.exec("sh", "-c", PROBE, f).returncode == 0,
                90,
                f"{name}'s liveness probe passed",
                container,
            )
        for name, container in containers.items():
            logs = container.logs()
            assert " ERROR" not in logs and "[ERROR]" not in logs, (name, logs[-3000:])
            assert "Traceback" not in logs, (name, logs[-3000:])
        for name, container in containers.items():
            seconds, code = container.stop()
            # Inside compose's 30 s stop_grace_period, so never killed.
            assert seconds < 25, (name, seconds)
            assert code in (0, 143), (name, code, container.logs()[-2000:])
    finally:
        for container in containers.values():
            container.remove()
