"""Django's Redis cache, keeping one redis-py client per connection pool.

Django's `RedisCacheClient.get_client` builds a new `redis.Redis` around the pool on every
call: every session read, every shared-partial lookup and every lock renewal paid for a
client's constructor (its response callbacks, about 40 µs) before the one command it sends.
A client is only a handle on its pool, safe to share between threads (each command borrows
a connection from the pool), so one per pool is enough.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient as DjangoRedisCacheClient


class RedisCacheClient(DjangoRedisCacheClient):
    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: str | None = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            pool = self._pools.get(index)
            if pool is None:
                pool = self._pools[index] = self._pool_class.from_url(
                    self._servers[index], **self._pool_options
                )
            client = self._clients[index] = self._client(connection_pool=pool)
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = RedisCacheClient
