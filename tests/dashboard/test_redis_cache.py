"""dashboard.cache.RedisCache: Django's Redis cache with one client per connection pool."""

from __future__ import annotations

import uuid

from dashboard.cache import RedisCache


def make_cache(redis_url: str) -> RedisCache:
    return RedisCache(redis_url, {"KEY_PREFIX": f"test-cache-{uuid.uuid4().hex}"})


def test_every_call_shares_one_client_on_one_pool(redis_url: str) -> None:
    cache = make_cache(redis_url)
    client = cache._cache.get_client("a")
    assert cache._cache.get_client("b", write=True) is client
    assert client.connection_pool is cache._cache._get_connection_pool(False)


def test_it_stores_reads_and_deletes_as_django_s_does(redis_url: str) -> None:
    cache = make_cache(redis_url)
    cache.set("key", {"rows": [1, 2]}, timeout=30)
    assert cache.get("key") == {"rows": [1, 2]}
    assert cache.add("key", "other") is False
    assert cache.get_many(["key", "missing"]) == {"key": {"rows": [1, 2]}}
    cache.delete("key")
    assert cache.get("key", "gone") == "gone"
