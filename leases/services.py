"""Lease domain functions: register clusters, run watchers, keep every cluster watched."""

from __future__ import annotations

import logging
import threading
import uuid

from django.core.cache import caches
from django.db import transaction
from django.utils.translation import gettext

from leases import kube, watcher_assignment
from leases.locks import LOCK_TTL_SECONDS, watcher_lock, watcher_lock_owners
from leases.models import KubeCluster
from leases.watcher import LeaseWatcher

logger = logging.getLogger(__name__)


class ClusterConfigError(ValueError):
    """The cluster cannot be registered as given; the message says why."""


def watcher_identity() -> str:
    """Who holds a watcher lock: host, process (the watch worker's name) and a random part,
    for the status page."""
    return f"{watcher_assignment.worker_name()}:{uuid.uuid4().hex[:8]}"


@transaction.atomic
def register_kube_cluster(
    name: str,
    *,
    kubeconfig: str = "",
    context: str = "",
    in_cluster: bool = False,
    replace: bool = False,
) -> tuple[KubeCluster, bool]:
    """Add (or with `replace`, update) a cluster watched for Leases.

    The kubeconfig is checked by leases.kube (nothing that runs code, reads local files or
    goes to another host); what it warns about is kept on the row for the watchers page.
    """
    if in_cluster == bool(kubeconfig):
        raise ClusterConfigError(
            gettext("Give either a kubeconfig or in-cluster, not both or neither.")
        )
    warnings: tuple[str, ...] = ()
    if not in_cluster:
        try:
            warnings = kube.parse_kubeconfig(kubeconfig, context).warnings
        except kube.KubeError as error:
            raise ClusterConfigError(error.message) from None
    existing = KubeCluster.objects.select_for_update().filter(name=name).first()
    if existing is not None and not replace:
        raise ClusterConfigError(
            gettext("A cluster named %(name)s exists already (use --replace).")
            % {"name": repr(name)}
        )
    cluster = existing or KubeCluster(name=name)
    cluster.source = KubeCluster.Source.IN_CLUSTER if in_cluster else KubeCluster.Source.KUBECONFIG
    cluster.kubeconfig = "" if in_cluster else kubeconfig
    cluster.context = context
    cluster.config_warning = " ".join(warnings)
    cluster.nks_api_address = ""  # the operator's kubeconfig (nks.services marks NKS's)
    cluster.enabled = True
    cluster.last_error = ""
    cluster.save()
    return cluster, existing is None


def run_watcher(
    cluster_id: int,
    *,
    owner: str | None = None,
    stop: threading.Event | None = None,
    seconds: float | None = None,
) -> bool:
    """Watch one cluster while holding its lock; False if another watcher holds it (or this
    watch worker is at its share: another takes the cluster).

    A cluster this worker's keeper claimed comes with its lock already taken
    (leases/watcher_assignment.py); any other request takes the lock here."""
    lock = watcher_assignment.LOCAL.take_claim(cluster_id)
    if not KubeCluster.objects.filter(pk=cluster_id, enabled=True).exists():
        logger.info("cluster %s is gone or disabled; not watching it", cluster_id)
        if lock is not None:
            lock.release()
        return False
    if lock is None:
        if not watcher_assignment.may_take_unclaimed():
            logger.info("cluster %s: this watch worker holds its share; not taking it", cluster_id)
            return False
        lock = watcher_lock(cluster_id, owner or watcher_identity())
        if not lock.acquire():
            logger.info("cluster %s is already watched by %s", cluster_id, lock.current_owner())
            return False
    stop = stop or threading.Event()
    # Registered so the keeper can hand this watcher alone off to another worker.
    watcher_assignment.LOCAL.started(cluster_id, stop)
    try:
        LeaseWatcher(cluster_id, owner=lock.owner, lock=lock, stop=stop).run(seconds=seconds)
    finally:
        watcher_assignment.LOCAL.finished(cluster_id, stop)
        lock.release()
    return True


def clusters_without_watcher() -> list[int]:
    """Enabled clusters whose lock nobody holds: their watcher died or never started."""
    ids = list(KubeCluster.objects.filter(enabled=True).values_list("id", flat=True))
    owners = watcher_lock_owners(ids)
    return [cluster_id for cluster_id in ids if cluster_id not in owners]


def claim_dispatch(cluster_id: int) -> bool:
    """Only one start request per cluster per lock TTL, however often the check runs."""
    return caches["locks"].add(
        f"lease-watcher-dispatch:{cluster_id}", "1", timeout=LOCK_TTL_SECONDS
    )


def route_unwatched(clusters: list[int]) -> list[tuple[int, str | None]]:
    """Where to send the start of each unwatched cluster: the queue of the live watch worker
    with the most room, None (the shared `watch` queue) while no worker has reported itself.

    The workers' keepers claim free clusters themselves within a tick; this is beat's
    backstop (a keeper behind on its ticks, a worker without one), and never sends a worker
    beyond its share. A cluster no live worker has room for is left for the keepers."""
    workers = watcher_assignment.live_workers()
    if not workers:
        return [(cluster_id, None) for cluster_id in clusters]
    total = KubeCluster.objects.filter(enabled=True).count()
    room = {
        worker.queue: watcher_assignment.capacity(total, len(workers), worker.concurrency)
        - worker.clusters
        for worker in workers
    }
    routes: list[tuple[int, str | None]] = []
    for cluster_id in clusters:
        queue = max(room, key=lambda name: (room[name], name))
        if room[queue] <= 0:
            break
        room[queue] -= 1
        routes.append((cluster_id, queue))
    return routes
