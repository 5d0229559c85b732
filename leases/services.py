"""Lease domain functions: register clusters, run watchers, keep every cluster watched."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid

from django.core.cache import caches
from django.db import transaction
from django.utils.translation import gettext

from leases import kube
from leases.locks import LOCK_TTL_SECONDS, watcher_lock
from leases.models import KubeCluster
from leases.watcher import LeaseWatcher

logger = logging.getLogger(__name__)


class ClusterConfigError(ValueError):
    """The cluster cannot be registered as given; the message says why."""


def watcher_identity() -> str:
    """Who holds a watcher lock: host, process and a random part, for the status page."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
    """Watch one cluster while holding its lock; False if another watcher holds it."""
    if not KubeCluster.objects.filter(pk=cluster_id, enabled=True).exists():
        logger.info("cluster %s is gone or disabled; not watching it", cluster_id)
        return False
    owner = owner or watcher_identity()
    lock = watcher_lock(cluster_id, owner)
    if not lock.acquire():
        logger.info("cluster %s is already watched by %s", cluster_id, lock.current_owner())
        return False
    try:
        LeaseWatcher(cluster_id, owner=owner, lock=lock, stop=stop).run(seconds=seconds)
    finally:
        lock.release()
    return True


def clusters_without_watcher() -> list[int]:
    """Enabled clusters whose lock nobody holds: their watcher died or never started."""
    missing = []
    for cluster_id in KubeCluster.objects.filter(enabled=True).values_list("id", flat=True):
        if watcher_lock(cluster_id, owner="").current_owner() is None:
            missing.append(cluster_id)
    return missing


def claim_dispatch(cluster_id: int) -> bool:
    """Only one start request per cluster per lock TTL, however often the check runs."""
    return caches["locks"].add(
        f"lease-watcher-dispatch:{cluster_id}", "1", timeout=LOCK_TTL_SECONDS
    )
