"""Shared fixtures: real services when configured, a clear skip (or failure) when not.

`REQUIRE_SERVICES=1` turns a missing PostgreSQL or Redis into a failure, and
`REQUIRE_TOOLS=1` does the same for Chromium and docker-compose, so CI cannot go green by
skipping the tests that matter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def is_required(variable: str) -> bool:
    return os.environ.get(variable, "").strip().lower() in {"1", "true", "yes"}


def skip_or_fail(reason: str, *, required_by: str) -> None:
    """Skip with the reason, unless the environment says the thing is required."""
    if is_required(required_by):
        pytest.fail(f"{reason} ({required_by}=1 makes this a failure)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True, scope="session")
def cache_key_space_per_xdist_worker() -> Iterator[None]:
    """pytest-xdist workers share one Redis: each gets its own key space, or one worker's
    alert evaluation lock makes the other worker's evaluation skip its run.

    Django is set up before any conftest is read, so the prefix is swapped in the settings
    (which resets the cache connections) and put in the environment for child processes.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        yield
        return
    base = settings.CACHE_KEY_PREFIX
    prefix = f"{base}-{worker}"
    # The same keys a child process builds from CACHE_KEY_PREFIX ("<prefix>:lock", ...).
    caches = {
        alias: {**config, "KEY_PREFIX": str(config.get("KEY_PREFIX", "")).replace(base, prefix, 1)}
        for alias, config in settings.CACHES.items()
    }
    os.environ["CACHE_KEY_PREFIX"] = prefix
    with override_settings(CACHES=caches):
        yield


@pytest.fixture(autouse=True, scope="session")
def fast_password_hashing() -> Iterator[None]:
    """One PBKDF2 hash costs 0.56 s here (a million rounds, as production should): every
    user made with a password and every sign-in paid it, in hundreds of tests. The tests
    check who may sign in, not how hard a hash is to crack; what production hashes with is
    Django's default, untouched in dashboard/settings.py."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(autouse=True)
def render_every_request(settings) -> None:  # type: ignore[no-untyped-def]
    """Tests see each change at once; the shared partial cache has tests of its own."""
    settings.LEASE_TABLE_CACHE_SECONDS = 0


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if not url:
        skip_or_fail("needs Redis: set REDIS_URL", required_by="REQUIRE_SERVICES")
    return url


@pytest.fixture
def postgres_database() -> None:
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        skip_or_fail(
            "needs PostgreSQL: set DATABASE_URL=postgres://...", required_by="REQUIRE_SERVICES"
        )


@pytest.fixture
def chromium_path() -> str:
    if not Path(CHROMIUM).exists():
        skip_or_fail(
            f"needs Chromium at {CHROMIUM} (apt-get install -y chromium)",
            required_by="REQUIRE_TOOLS",
        )
    return CHROMIUM


@pytest.fixture
def docker_compose() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    skip_or_fail(
        "needs docker-compose (apt-get install -y docker-compose)", required_by="REQUIRE_TOOLS"
    )
    return []


def reset_celery_connections() -> None:
    """Forget Celery's connection and producer pools (closed ones cannot be reused).

    kombu keeps pools in a process-wide registry keyed by the broker connection, so a pool
    an in-process test worker closed would be handed out again: clear the registry too.
    """
    from kombu import pools

    from dashboard.celery import app

    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[None]:
    """A broker no other test (or `make run`) shares: a folder, or a Redis key prefix."""
    from dashboard.celery import app

    saved = app.conf.broker_transport_options
    if app.conf.broker_url.startswith("filesystem"):
        folder = tmp_path / "queue"
        folder.mkdir()
        options = {**saved, "data_folder_in": str(folder), "data_folder_out": str(folder)}
    else:
        options = {**saved, "global_keyprefix": f"test-{uuid.uuid4().hex}:"}
    app.conf.broker_transport_options = options
    reset_celery_connections()  # pools hold connections made with the old options
    try:
        yield
    finally:
        app.conf.broker_transport_options = saved
        reset_celery_connections()


@pytest.fixture
def celery_worker(private_broker: None) -> Iterator[None]:
    """A real Celery worker in a thread, consuming the `default` and `alerts` queues of a
    private broker (the `watch` queue's tasks run for as long as a watcher lives)."""
    from celery.contrib.testing.worker import start_worker
    from celery.signals import task_postrun
    from django.db import connections

    from dashboard.celery import app

    def close(**_: object) -> None:
        # The worker thread's connection must not outlive the test database (the `celery
        # worker` command installs Django's fixup for this; the test worker does not).
        connections.close_all()

    task_postrun.connect(close, weak=False)
    try:
        with start_worker(
            app,
            pool="solo",
            perform_ping_check=False,
            queues=["default", "alerts"],
            loglevel="WARNING",
        ):
            yield
    finally:
        task_postrun.disconnect(close)


def run_django(
    code: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run Python code in a fresh process with Django set up from the given environment.

    Settings are read once per process, so start-up behaviour (bad values, production mode,
    a database that is down) can only be tested in a new one.
    """
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "REDIS_", "SECRET_KEY", "EMAIL_"))
    }
    base["DJANGO_SETTINGS_MODULE"] = "dashboard.settings"
    base.update(env or {})
    script = "import django\ndjango.setup()\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def operator(django_user_model):  # type: ignore[no-untyped-def]
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("olivia", password="operator-pass-123")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def engineer(django_user_model):  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_user("erin", password="engineer-pass-123")


@pytest.fixture
def engineer_client(client, engineer):  # type: ignore[no-untyped-def]
    client.force_login(engineer)
    return client


@pytest.fixture
def browser(chromium_path: str) -> Iterator[object]:
    """Debian's Chromium driven by Playwright; never a browser downloaded by Playwright."""
    # Playwright's sync API runs an event loop in this thread; Django's ORM calls made by
    # the test itself are still synchronous, so the async-safety guard must be relaxed.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            yield browser
        finally:
            browser.close()


def _page_in(browser: Any, **context_options: Any) -> Iterator[Any]:
    context = browser.new_context(**context_options)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        yield page
    finally:
        context.close()
        # The test body's ORM connection was opened while Playwright's loop ran; close it
        # so the test database can be dropped at the end of the run.
        from django.db import connections

        connections.close_all()


@pytest.fixture
def page(browser):  # type: ignore[no-untyped-def]
    yield from _page_in(browser)


@pytest.fixture
def korean_page(browser):  # type: ignore[no-untyped-def]
    """A browser set to Korean (its Accept-Language) in Seoul's zone (Intl's resolved zone)."""
    yield from _page_in(browser, locale="ko-KR", timezone_id="Asia/Seoul")
