"""The Kubernetes API client: the only package that imports the official `kubernetes` SDK.

`client` connects, lists and translates every failure into a `KubeError` written for an
on-call engineer (never with credentials or kubeconfig content); `watch` opens watch
streams and reads them; `bounded` caps what a server can make either hold or wait for
(object and page sizes, total deadlines, no compressed bodies); `deadline` makes each call's
total deadline cover its connect, status line and headers too. Callers use the names
re-exported here.
"""

from leases.kube.bounded import MAX_LEASE_BYTES, MAX_NODE_BYTES, Cut
from leases.kube.client import (
    CANDIDATE_API_VERSIONS,
    CONNECT_TIMEOUT_SECONDS,
    COORDINATION_GROUP,
    LEASE_GRANT,
    LIST_DEADLINE_SECONDS,
    LIST_PAGE_DEADLINE_SECONDS,
    LIST_PAGE_SIZE,
    LIST_READ_TIMEOUT_SECONDS,
    NODE_GRANT,
    PROBE_TIMEOUT_SECONDS,
    CheckedKubeconfig,
    ClusterConfig,
    KubeError,
    ListPage,
    PageStream,
    connect,
    iter_all_leases,
    iter_all_nodes,
    list_lease_candidates,
    list_leases,
    list_nodes,
    parse_kubeconfig,
    probe_revision,
    server_address,
    status_error,
    stream_leases,
    stream_nodes,
)
from leases.kube.watch import (
    WatchStream,
    changes_since,
    open_lease_watch,
    open_node_watch,
)

__all__ = [
    "CANDIDATE_API_VERSIONS",
    "CONNECT_TIMEOUT_SECONDS",
    "COORDINATION_GROUP",
    "LEASE_GRANT",
    "LIST_DEADLINE_SECONDS",
    "LIST_PAGE_DEADLINE_SECONDS",
    "LIST_PAGE_SIZE",
    "LIST_READ_TIMEOUT_SECONDS",
    "MAX_LEASE_BYTES",
    "MAX_NODE_BYTES",
    "NODE_GRANT",
    "PROBE_TIMEOUT_SECONDS",
    "CheckedKubeconfig",
    "ClusterConfig",
    "Cut",
    "KubeError",
    "ListPage",
    "PageStream",
    "WatchStream",
    "changes_since",
    "connect",
    "iter_all_leases",
    "iter_all_nodes",
    "list_lease_candidates",
    "list_leases",
    "list_nodes",
    "open_lease_watch",
    "open_node_watch",
    "parse_kubeconfig",
    "probe_revision",
    "server_address",
    "status_error",
    "stream_leases",
    "stream_nodes",
]
