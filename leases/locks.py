"""The lease watcher's lock: one watcher per Kubernetes cluster across all workers."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.cache import caches

from dashboard.locks import ExpiringLock

# A watcher renews its lock every LOCK_RENEW_INTERVAL_SECONDS (leases/watcher.py), well within
# this; after a crash, another worker takes over the cluster once it has expired. A takeover
# takes the TTL plus a keeper tick and a relist, and must end before `source_stale` opens
# (ALERT_WATCH_STALE_SECONDS, 20 s past the data's as-of moment): with 20 s it took 15-21 s
# against a real API server and opened a false `source_stale` (issue 22's real-server check).
LOCK_TTL_SECONDS = 12


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
