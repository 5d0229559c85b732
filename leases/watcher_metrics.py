"""Prometheus series of the watch workers: which worker watches which cluster, how many each
holds against its share, and the clusters nobody watches. Read at scrape time from the
workers' heartbeat rows and the lock's store (leases.watcher_assignment.fleet): two queries
and one round trip, a series per cluster and per worker, none per lease.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from leases.models import KubeCluster
from leases.watcher_assignment import Fleet, fleet

logger = logging.getLogger(__name__)

PREFIX = "lease_dashboard"


def fleet_families(current: Fleet, names: dict[int, str]) -> list[Metric]:
    workers = GaugeMetricFamily(
        f"{PREFIX}_watch_workers", "Live watch worker processes (a heartbeat within 10 s)."
    )
    workers.add_metric([], len(current.live))
    share = GaugeMetricFamily(
        f"{PREFIX}_watch_worker_share",
        "The most clusters one live watch worker should hold: ceil(clusters / workers).",
    )
    share.add_metric([], current.share)
    held = GaugeMetricFamily(
        f"{PREFIX}_watch_worker_clusters",
        "Clusters whose watcher lock each live watch worker holds.",
        labels=["worker"],
    )
    capacity = GaugeMetricFamily(
        f"{PREFIX}_watch_worker_capacity",
        "Clusters the watch worker takes at most (its share, within its thread pool), as of "
        "its last heartbeat.",
        labels=["worker"],
    )
    for worker in current.live:
        held.add_metric([worker.name], len(worker.clusters))
        capacity.add_metric([worker.name], worker.capacity)
    watched_by = GaugeMetricFamily(
        f"{PREFIX}_watch_cluster_worker",
        "1 for the worker that holds the cluster's watcher lock now.",
        labels=["cluster", "worker"],
    )
    for cluster_id, worker in sorted(current.watcher_of.items()):
        if cluster_id in names:
            watched_by.add_metric([names[cluster_id], worker], 1)
    unwatched = GaugeMetricFamily(
        f"{PREFIX}_watch_clusters_unwatched",
        "Enabled clusters whose watcher lock nobody holds.",
    )
    unwatched.add_metric([], len(current.unwatched))
    return [workers, share, held, capacity, watched_by, unwatched]


class WatcherAssignmentCollector(Collector):
    up_metric = f"{PREFIX}_watch_assignment_metrics_up"

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            self.up_metric,
            "1 when the watch workers' series below could be read (the database and the "
            "lock's store).",
        )
        try:
            current = fleet()
            names = dict(KubeCluster.objects.values_list("id", "name"))
            families = fleet_families(current, names)
        except Exception:  # the database's or the lock store's errors: the rest still scrapes
            logger.exception("%s: the watch workers could not be read", self.up_metric)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


_registered = False


def register() -> None:
    """Add the collector to the dashboard's registry, once per process (leases.apps)."""
    global _registered
    if _registered:
        return
    from dashboard.metrics import register_collector

    register_collector(WatcherAssignmentCollector())
    _registered = True
