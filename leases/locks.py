"""The lease watcher's lock: one watcher per Kubernetes cluster across all workers."""

from __future__ import annotations

from dashboard.locks import ExpiringLock

# A watcher renews its lock well within this; after a crash, another worker takes over the
# cluster once it has expired.
LOCK_TTL_SECONDS = 20


def watcher_lock(cluster_id: int, owner: str) -> ExpiringLock:
    return ExpiringLock(name=f"lease-watcher:{cluster_id}", owner=owner, ttl=LOCK_TTL_SECONDS)
