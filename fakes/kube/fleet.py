"""A fleet of fake API servers in one process, bulk-loaded for bench/fleet.py.

    .venv/bin/python -m fakes.kube.fleet --clusters 50 --leases 100000 --nodes 20000 \\
        --token T --out fleet.json

Each cluster is its own FakeApiServer (its own port and store), as each real cluster is its
own API server. The leases are spread evenly: about 98 % node heartbeat Leases in
kube-node-lease (the first `nodes / clusters` of them with their Node, the rest heartbeat
Leases alone), about 2 % leader elections (the control-plane trio, client-go elections,
leader-k8s elections with fencing tokens, and slot groups `<lock>-slot-<n>`). Held Leases get
an hour-long duration: nothing renews them while a benchmark runs, and a page must show the
same held rows from the first request to the last. A few are expired, released or NotReady,
so the problem views have something to show.

When every server listens and every object is stored, the address of each cluster is
written to `--out` (atomically) as JSON; then it serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from fakes.kube.leader_k8s_demo import (
    AUDIT_LEADER_ID,
    BASE58,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    NODE_ID,
    TOKEN_LENGTH,
    TOKEN_PREFIX,
)
from fakes.kube.node_scenarios import NODE_LEASE_NAMESPACE, add_node
from fakes.kube.resources import LEASES, NODES
from fakes.kube.server import FakeApiServer
from fakes.kube.store import ObjectStore

HELD_SECONDS = 3_600
# Real kubelets' lease duration: an expired heartbeat is one renewed over 40 s ago.
NODE_LEASE_SECONDS = 40
CONTROL_PLANE = ("kube-scheduler", "kube-controller-manager", "cloud-controller-manager")
NODEGROUP_LABEL = "magnum.openstack.org/nodegroup"
NODEGROUPS = ("default-worker", "pool-b")
ELECTION_SHARE = 0.02


@dataclass(frozen=True)
class ClusterShape:
    """What one fake cluster holds."""

    name: str
    leases: int
    nodes: int

    @property
    def elections(self) -> int:
        return max(1, round(self.leases * ELECTION_SHARE)) if self.leases else 0

    @property
    def node_leases(self) -> int:
        return self.leases - self.elections


def cluster_name(index: int) -> str:
    return f"fleet-{index:02d}"


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` in `parts` shares that differ by at most one."""
    share, extra = divmod(total, parts)
    return [share + (1 if index < extra else 0) for index in range(parts)]


def fleet_shapes(clusters: int, leases: int, nodes: int) -> list[ClusterShape]:
    return [
        ClusterShape(cluster_name(index), lease_count, node_count)
        for index, (lease_count, node_count) in enumerate(
            zip(split_evenly(leases, clusters), split_evenly(nodes, clusters), strict=True)
        )
    ]


def node_name(cluster_index: int, index: int) -> str:
    return f"fleet{cluster_index:02d}-node-{index:05d}"


def nodegroup_of(index: int) -> str:
    return NODEGROUPS[index % len(NODEGROUPS)]


def instance_uuid(cluster: str, node: str) -> str:
    """Stable per node, so the loader can write NKS rows that name the same instances."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.{cluster}.fleet"))


def _token(rng: random.Random) -> str:
    return TOKEN_PREFIX + "".join(rng.choice(BASE58) for _ in range(TOKEN_LENGTH))


def fill_cluster(store: ObjectStore, shape: ClusterShape, cluster_index: int, now: float) -> None:
    """Write one cluster's Nodes and Leases into its store (ADDED events, no client)."""
    rng = random.Random(cluster_index)  # noqa: S311 (repeatable fake data, not secrets)
    for index in range(shape.node_leases):
        name = node_name(cluster_index, index)
        expired = index % 97 == 13
        renewed = now - (600 if expired else rng.uniform(0, 10))
        duration = NODE_LEASE_SECONDS if expired else HELD_SECONDS
        if index < shape.nodes:
            group = nodegroup_of(index)
            add_node(
                store,
                name,
                provider_id=f"openstack:///{instance_uuid(shape.name, name)}",
                internal_ip=f"10.{cluster_index}.{index // 250}.{index % 250 + 1}",
                labels={NODEGROUP_LABEL: group},
                ready=index % 53 != 7,
                at=renewed,
                created_at=now - 86_400,
                lease_duration_seconds=duration,
            )
        else:
            store.apply_lease(
                NODE_LEASE_NAMESPACE,
                name,
                {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renewed},
                created_at=now - 86_400,
            )
    for index in range(shape.elections):
        _election(store, rng, election_kind(cluster_index, index, shape.elections), now)


# A cluster with this many elections has the control-plane trio first; one with fewer (2,000
# leases over 50 clusters leave under one each) gets a mix over the fleet instead, so that
# every kind of election is there at every size.
FULL_CLUSTER_ELECTIONS = 10


def election_kind(cluster_index: int, index: int, count: int) -> tuple[int, bool]:
    """The election's number in the pattern of kinds (control plane, leader-k8s, client-go),
    and whether the cluster is full (the trio first, then no more control plane)."""
    if count >= FULL_CLUSTER_ELECTIONS:
        return index, True
    return index + cluster_index, False


def _election(
    store: ObjectStore, rng: random.Random, kind_of: tuple[int, bool], now: float
) -> None:
    kind, full = kind_of
    renewed = now - rng.uniform(0, 5)
    spec: dict[str, object] = {
        "leaseDurationSeconds": HELD_SECONDS,
        "acquireTime": now - rng.uniform(600, 86_400),
        "renewTime": renewed,
        "leaseTransitions": rng.randint(0, 12),
    }
    annotations: dict[str, str] | None = None
    if (full and kind < len(CONTROL_PLANE)) or (not full and kind % 3 == 2):
        namespace = "kube-system"
        name = CONTROL_PLANE[(kind if full else kind // 3) % len(CONTROL_PLANE)]
        spec["holderIdentity"] = f"master-{kind % 3}_{uuid.UUID(int=rng.getrandbits(128))}"
    elif kind % 3 == 0:
        # leader-k8s: a fresh fencing token holds; the annotations say who leads. Half are
        # the three slots of a group (`<lock>-slot-<n>`), so the groups page has groups.
        if (kind // 9) % 2 == 0:
            namespace = f"jobs-{(kind // 9) % 20:02d}"
            lock = f"worker-{kind // 9:03d}"
            name = f"{lock}-slot-{(kind // 3) % 3}"
        else:
            namespace = f"team-{kind % 20:02d}"
            lock = f"job-{kind // 3:04d}"
            name = f"{lock}-leader"
        pod = f"{lock}-{rng.getrandbits(24):06x}"
        token = _token(rng)
        spec["holderIdentity"] = token
        annotations = {AUDIT_LEADER_ID: token, MANAGED_BY: MANAGED_BY_VALUE, NODE_ID: f"{pod}:1"}
    else:
        namespace = f"team-{kind % 20:02d}"
        name = f"controller-{kind:04d}-leader-election"
        spec["holderIdentity"] = f"controller-{kind:04d}-{rng.getrandbits(32):08x}"
    if kind % 41 == 40:
        spec["holderIdentity"] = ""  # released
    if kind % 37 == 36:
        spec["leaseDurationSeconds"] = 15
        spec["renewTime"] = now - 900  # its holder died a quarter of an hour ago
    store.apply_lease(namespace, name, spec, annotations=annotations, created_at=now - 86_400)


def serve(shapes: Sequence[ClusterShape], token: str, out: Path) -> list[FakeApiServer]:
    now = time.time()
    servers = []
    for cluster_index, shape in enumerate(shapes):
        server = FakeApiServer(token=token, candidate_versions=())
        fill_cluster(server.store, shape, cluster_index, now)
        servers.append(server.start())
    document = {
        "clusters": [
            {
                "name": shape.name,
                "url": server.url,
                # What the store holds, which a client that lists everything must store.
                "leases": server.store.count(LEASES),
                "nodes": server.store.count(NODES),
            }
            for shape, server in zip(shapes, servers, strict=True)
        ],
        "pid": os.getpid(),
    }
    partial = out.with_name(f".{out.name}.partial")
    partial.write_bytes(orjson.dumps(document))
    partial.replace(out)
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 2)[1])
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--leases", type=int, required=True, help="in all, over the clusters")
    parser.add_argument("--nodes", type=int, required=True, help="in all, over the clusters")
    parser.add_argument("--token", required=True, help="the bearer token every server accepts")
    parser.add_argument("--out", type=Path, required=True, help="where the addresses go")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    servers = serve(fleet_shapes(args.clusters, args.leases, args.nodes), args.token, args.out)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for server in servers:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
