"""What a watch failure of an NKS-sourced Lease source may show, before its server is trusted.

A kubeconfig from NKS names a server nobody here chose (leases/egress.py). Until the watcher
has once completed a list on it, what that server answered, and even whether it refused,
timed out or answered at all, stays off the pages every viewer sees: otherwise the "Watch
this cluster" button would be a way to read any address's answers, or to scan its ports, from
the watchers page. The dashboard's own words about the kubeconfig (kind "config": a refused
field, an address rule) are shown as they are; the workers' log keeps the details.
"""

from __future__ import annotations

from django.db import DatabaseError, close_old_connections
from django.utils.translation import gettext

from leases.models import KubeCluster

# The kind recorded with the generic message: a passing trouble, as the watcher retries.
UNTRUSTED_KIND = "connection"


def untrusted_failure_text() -> str:
    return gettext(
        "Could not reach the cluster's API server. Until the watcher has read from it once, "
        "what it answered is not shown (its kubeconfig came from NKS); the watch workers' log "
        "has the details."
    )


def server_trusted(cluster_id: int) -> bool:
    """Whether what the source's API server says may be shown: an operator's source always,
    an NKS-sourced one once a list (of Leases or Nodes) has completed on it."""
    try:
        row = (
            KubeCluster.objects.filter(pk=cluster_id)
            .values_list("nks_api_address", "last_list_at", "nodes_last_list_at")
            .first()
        )
    except DatabaseError:
        close_old_connections()
        return False  # unknown: treated as untrusted
    if row is None:
        return False
    nks_api_address, leases_listed_at, nodes_listed_at = row
    return not nks_api_address or leases_listed_at is not None or nodes_listed_at is not None


def shown_failure(cluster_id: int, message: str, kind: str) -> tuple[str, str]:
    """The (message, kind) to record for a watch failure: as given, or generic for an
    NKS-sourced source whose API server has never completed a list."""
    if kind == "config" or server_trusted(cluster_id):
        return message, kind
    return untrusted_failure_text(), UNTRUSTED_KIND
