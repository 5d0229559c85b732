from __future__ import annotations

import time

import pytest
from django.core.management import call_command

from dashboard.locks import ExpiringLock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["database", "redis"])
def lock_backend(request, settings) -> str:  # type: ignore[no-untyped-def]
    """The same lock code on both stores: the embedded database cache and Redis."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        settings.CACHES = {
            **settings.CACHES,
            "locks": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": url,
                "KEY_PREFIX": f"test-locks-{time.monotonic_ns()}",
            },
        }
    else:
        settings.CACHES = {
            **settings.CACHES,
            "locks": {
                "BACKEND": "django.core.cache.backends.db.DatabaseCache",
                "LOCATION": "dashboard_cache",
                "KEY_PREFIX": f"test-locks-{time.monotonic_ns()}",
            },
        }
        # Runs configured for Redis have no cache table yet.
        call_command("createcachetable", "dashboard_cache", verbosity=0)
    return request.param


def test_only_one_owner_holds_the_lock(lock_backend: str) -> None:
    first = ExpiringLock("cluster-1", owner="worker-a", ttl=10)
    second = ExpiringLock("cluster-1", owner="worker-b", ttl=10)
    assert first.acquire()
    assert not second.acquire()
    assert second.current_owner() == "worker-a"
    assert first.renew()


def test_release_lets_another_owner_take_it(lock_backend: str) -> None:
    first = ExpiringLock("cluster-2", owner="worker-a", ttl=10)
    second = ExpiringLock("cluster-2", owner="worker-b", ttl=10)
    assert first.acquire()
    first.release()
    assert second.acquire()


def test_an_owner_that_stops_renewing_loses_the_lock_after_the_ttl(lock_backend: str) -> None:
    dead = ExpiringLock("cluster-3", owner="worker-dead", ttl=1)
    # Long enough to outlive the checks below: the database cache keeps whole seconds, so a
    # 1 s TTL could expire before current_owner() reads it on a busy machine.
    successor = ExpiringLock("cluster-3", owner="worker-b", ttl=10)
    assert dead.acquire()
    time.sleep(2.1)  # the database cache keeps whole seconds
    assert successor.acquire()
    # The stalled owner must not extend (or release) a lock that is no longer its own.
    assert not dead.renew()
    dead.release()
    assert successor.current_owner() == "worker-b"


def test_renew_fails_when_someone_else_holds_the_key(lock_backend: str) -> None:
    mine = ExpiringLock("cluster-4", owner="worker-a", ttl=10)
    assert mine.acquire()
    from django.core.cache import caches

    caches["locks"].set(mine.cache_key, "worker-b", timeout=10)
    assert not mine.renew()
    assert not mine.held
