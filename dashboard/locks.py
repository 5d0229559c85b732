"""A lock with a TTL that one owner renews: one worker at a time across all processes.

Lease watchers (one per cluster), NKS polls (one per account) and the alert evaluation all
take one.

Built on Django's cache API, so the same code runs on Redis (`REDIS_URL`) and on the
database cache of the embedded default. `cache.add` is atomic on both. The cache API has
no compare-and-set for renewals, so an owner only renews while its key cannot have expired
yet (its last renewal is younger than the TTL minus a margin); past that it treats the lock
as lost instead of risking to extend a lock another worker has taken since.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.core.cache import caches

# Renewals must land well before expiry; an owner that stalls past this gives the lock up.
RENEW_SAFETY_MARGIN_SECONDS = 5.0


@dataclass
class ExpiringLock:
    name: str
    owner: str
    ttl: int
    alias: str = "locks"
    _held_until: float = field(default=0.0, init=False)

    @property
    def margin(self) -> float:
        return min(RENEW_SAFETY_MARGIN_SECONDS, self.ttl / 4)

    @property
    def cache_key(self) -> str:
        return f"lock:{self.name}"

    def acquire(self) -> bool:
        started = time.monotonic()
        if caches[self.alias].add(self.cache_key, self.owner, timeout=self.ttl):
            self._held_until = started + self.ttl
            return True
        return False

    def renew(self) -> bool:
        """Extend the lock; False when it is no longer ours (or may not be)."""
        started = time.monotonic()
        if started > self._held_until - self.margin:
            self._held_until = 0.0
            return False
        cache = caches[self.alias]
        if cache.get(self.cache_key) != self.owner or not cache.touch(self.cache_key, self.ttl):
            self._held_until = 0.0
            return False
        self._held_until = started + self.ttl
        return True

    def regain(self) -> bool:
        """Take the lock again after renewals could not be made (its store was down, or
        the owner stalled): only if nobody else took it meanwhile. `cache.add` is atomic,
        so two owners cannot both regain it."""
        started = time.monotonic()
        cache = caches[self.alias]
        if cache.add(self.cache_key, self.owner, timeout=self.ttl) or (
            cache.get(self.cache_key) == self.owner and cache.touch(self.cache_key, self.ttl)
        ):
            self._held_until = started + self.ttl
            return True
        self._held_until = 0.0
        return False

    def release(self) -> None:
        if time.monotonic() < self._held_until - self.margin:
            cache = caches[self.alias]
            if cache.get(self.cache_key) == self.owner:
                cache.delete(self.cache_key)
        self._held_until = 0.0

    @property
    def held(self) -> bool:
        return time.monotonic() < self._held_until

    def current_owner(self) -> str | None:
        owner = caches[self.alias].get(self.cache_key)
        return owner if isinstance(owner, str) else None
