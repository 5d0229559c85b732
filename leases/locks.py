"""The lease watcher's lock: one watcher per Kubernetes cluster across all workers."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.cache import caches

from dashboard.locks import ExpiringLock

# A watcher renews its lock well within this; after a crash, another worker takes over the
# cluster once it has expired.
LOCK_TTL_SECONDS = 20


def watcher_lock(cluster_id: int, owner: str) -> ExpiringLock:
    return ExpiringLock(name=f"lease-watcher:{cluster_id}", owner=owner, ttl=LOCK_TTL_SECONDS)


def watcher_lock_owners(cluster_ids: Iterable[int]) -> dict[int, str]:
    """Who holds each cluster's watcher lock now (clusters nobody holds are left out), in one
    round trip to the lock's store: the pages and the workers' keepers ask for every cluster."""
    keys = {watcher_lock(cluster_id, owner="").cache_key: cluster_id for cluster_id in cluster_ids}
    if not keys:
        return {}
    found = caches["locks"].get_many(list(keys))
    return {keys[key]: owner for key, owner in found.items() if isinstance(owner, str)}
