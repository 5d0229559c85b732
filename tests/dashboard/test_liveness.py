"""Liveness files (dashboard.liveness): a real Celery worker and a real beat touch theirs
while they run and remove them when they stop; the probe command the image's healthchecks
run tells a fresh file from an old one.

Each process gets a broker of its own (the filesystem one, in a temporary folder, with no
REDIS_URL): beat publishes its schedule, and those messages must not reach the workers other
tests start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT

CELERY = REPO_ROOT / ".venv" / "bin" / "celery"
# The healthcheck of docker-compose.yml and the probes of the manifests, with the file's name.
PROBE = 'test $(( $(date +%s) - $(stat -c %Y "$0") )) -lt 60'


def isolated_env(tmp_path: Path, **more: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "REDIS_", "CELERY_")) and key != "DATABASE_URL"
    }
    return {**env, "DASHBOARD_VAR_DIR": str(tmp_path), "LOG_LEVEL": "warning", **more}


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            [str(CELERY) if CELERY.exists() else "celery", "-A", "dashboard", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(condition: object, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s; log:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def probe_passes(path: Path) -> bool:
    return subprocess.run(["sh", "-c", PROBE, str(path)], check=False).returncode == 0


def refreshed(path: Path) -> bool:
    """True once the file's time is recent again after the test set it an hour back."""
    return path.exists() and time.time() - path.stat().st_mtime < 30


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    alive, log = tmp_path / "worker-alive", tmp_path / "worker.log"
    env = isolated_env(tmp_path, CELERY_LIVENESS_FILE=str(alive), CELERY_LIVENESS_SECONDS="1")
    process = start(
        ["worker", "--queues", "default", "--concurrency", "1", "--hostname", "live@%h"],
        env,
        log,
    )
    try:
        yield process, alive, log
    finally:
        stop(process)


def test_a_worker_touches_its_file_while_it_runs_and_removes_it_when_it_stops(
    worker: tuple[subprocess.Popen[bytes], Path, Path],
) -> None:
    process, alive, log = worker
    wait_for(alive.exists, 60, "the worker wrote its liveness file", log)
    assert probe_passes(alive)
    hour_ago = time.time() - 3600
    os.utime(alive, (hour_ago, hour_ago))
    assert not probe_passes(alive)
    wait_for(lambda: refreshed(alive), 15, "the worker touched its file again", log)
    assert probe_passes(alive)
    stop(process)
    assert not alive.exists()
    assert not probe_passes(alive)


def test_beat_touches_its_file_at_every_tick_and_removes_it_when_it_stops(
    tmp_path: Path,
) -> None:
    alive, log = tmp_path / "beat-alive", tmp_path / "beat.log"
    env = isolated_env(tmp_path, CELERY_BEAT_LIVENESS_FILE=str(alive))
    process = start(["beat", "--schedule", str(tmp_path / "schedule")], env, log)
    try:
        wait_for(alive.exists, 60, "beat wrote its liveness file", log)
        hour_ago = time.time() - 3600
        os.utime(alive, (hour_ago, hour_ago))
        # Its shortest entries are due every 5 s: the next tick comes within that.
        wait_for(lambda: refreshed(alive), 15, "beat touched its file again", log)
        assert probe_passes(alive)
    finally:
        stop(process)
    assert not alive.exists()


def test_no_file_is_written_unless_the_environment_names_one(tmp_path: Path) -> None:
    log = tmp_path / "beat.log"
    process = start(["beat", "--schedule", str(tmp_path / "schedule")], isolated_env(tmp_path), log)
    try:
        wait_for(
            lambda: (tmp_path / "schedule.dat").exists() or (tmp_path / "schedule").exists(),
            60,
            "beat started",
            log,
        )
    finally:
        stop(process)
    assert not list(tmp_path.glob("*alive*"))


def test_compose_healthchecks_run_the_probe_on_the_files_the_image_names() -> None:
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    assert "CELERY_LIVENESS_FILE=/tmp/celery-worker-alive" in dockerfile
    assert "CELERY_BEAT_LIVENESS_FILE=/tmp/celery-beat-alive" in dockerfile
    for name, service in compose["services"].items():
        command = " ".join(service.get("command") or [])
        test = " ".join(service.get("healthcheck", {}).get("test", []))
        assert "inspect ping" not in test, name
        if " worker " in f" {command} ":
            assert "/tmp/celery-worker-alive" in test, name
        elif " beat " in f" {command} ":
            assert "/tmp/celery-beat-alive" in test, name
